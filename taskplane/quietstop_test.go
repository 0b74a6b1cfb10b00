package taskplane_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// quietCanceler makes no update: it waits until its turn's context ends (a long model call),
// and counts the cancels it is told of.
type quietCanceler struct {
	started, stopped, cancels atomic.Int32
}

func (c *quietCanceler) Execute(ctx context.Context, turn *taskplane.Turn) error {
	c.started.Add(1)
	<-ctx.Done()
	c.stopped.Add(1)
	return ctx.Err()
}

func (c *quietCanceler) Cancel(context.Context, *taskplane.Task) error {
	c.cancels.Add(1)
	return nil
}

// stopBound is how long a quiet turn may take to stop after its task finished under it: far
// above the milliseconds a notification takes, far below the 20 s a heartbeat of the default
// 1-minute lease waits.
const stopBound = 10 * time.Second

// waitWithin waits up to d for cond, reporting whether it held.
func waitWithin(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// A task timed out by a sweep in the turn's own process (not through CancelTurn): its quiet turn
// is stopped, and its executor told once, on the commit's notification, not at the next
// heartbeat a third of a lease later.
func TestATimeoutStopsAQuietTurnOnItsNotificationNotAtTheNextHeartbeat(t *testing.T) {
	p, exec := quietTurn(t, "m-quiet-timeout")
	waitFor(t, "the timeout sweep to fail the task", func() bool {
		n, err := p.SweepTimeouts(context.Background(), time.Millisecond)
		return err == nil && n == 1
	})
	if !waitWithin(stopBound, func() bool { return exec.stopped.Load() == 1 && exec.cancels.Load() == 1 }) {
		t.Fatalf("%v after the timeout the quiet turn has stopped %d times and its executor been told %d times, want once each",
			stopBound, exec.stopped.Load(), exec.cancels.Load())
	}
	time.Sleep(100 * time.Millisecond)
	if n := exec.cancels.Load(); n != 1 {
		t.Errorf("the executor was told of the timeout %d times, want once", n)
	}
}

// A cancel committed in process A (which runs no turn of the task) stops a quiet turn running in
// process B as soon as B's listener hears of the commit, and B tells its executor once; not at
// B's next heartbeat, a third of a lease later.
func TestACancelInAnotherProcessStopsAQuietTurnOnItsNotification(t *testing.T) {
	stores := storetest.OpenPostgresShared(t, 2)
	pa, pb := taskplane.New(stores[0]), taskplane.New(stores[1])
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { _ = pb.RunListener(ctx) })
	waitListening(t, pa, pb)

	exec := &quietCanceler{}
	db := &taskplane.Dispatcher{Plane: pb, Executor: exec, Concurrency: 1, Poll: 10 * time.Millisecond, Lease: time.Minute}
	wg.Go(func() { _ = db.Run(ctx) })
	acc, err := pa.Accept(context.Background(), a2aEvent("m-xproc-quiet", "work"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the turn to start in B", func() bool { return exec.started.Load() == 1 })
	if _, canceled, err := pa.Cancel(context.Background(), "alice", acc.Task.ID, nil); err != nil || !canceled {
		t.Fatalf("cancel in A: %v %v", canceled, err)
	}
	if !waitWithin(stopBound, func() bool { return exec.stopped.Load() == 1 && exec.cancels.Load() == 1 }) {
		t.Fatalf("%v after the cancel in A, B's quiet turn has stopped %d times and its executor been told %d times, want once each",
			stopBound, exec.stopped.Load(), exec.cancels.Load())
	}
	time.Sleep(100 * time.Millisecond)
	if n := exec.cancels.Load(); n != 1 {
		t.Errorf("the executor was told of the cancel %d times, want once", n)
	}
}

// waitListening returns once b's listener relays a's commits: a turn of a probe task in a
// commits until b hears of one, then completes the task.
func waitListening(t *testing.T, a, b *taskplane.Plane) {
	t.Helper()
	ctx := context.Background()
	acc, err := a.Accept(ctx, a2aEvent("m-probe", "probe"))
	if err != nil {
		t.Fatal(err)
	}
	heard, unsubscribe := b.Subscribe("alice", acc.Task.ID)
	defer unsubscribe()
	g, err := a.ClaimTurn(ctx, taskplane.ClaimRequest{Owner: "probe", Lease: time.Minute})
	if err != nil || g == nil || g.TaskID != acc.Task.ID {
		t.Fatalf("claim the probe: %+v %v", g, err)
	}
	turn := a.NewTurn(g)
	deadline := time.Now().Add(20 * time.Second)
	for listening := false; !listening; {
		if time.Now().After(deadline) {
			t.Fatal("b's listener did not relay a's commits")
		}
		msg := taskplane.Message{ID: "probe-" + time.Now().Format(time.RFC3339Nano), Role: taskplane.RoleAgent,
			Parts: []taskplane.Part{taskplane.TextPart("probe")}}
		if err := turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateWorking, Message: &msg}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-heard:
			listening = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	msg := taskplane.Message{ID: "probe-done", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("done")}}
	if err := turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted, Message: &msg}); err != nil {
		t.Fatal(err)
	}
	if err := a.EndTurn(ctx, g, taskplane.TurnEnd{}); err != nil && !errors.Is(err, taskplane.ErrNoTurn) {
		t.Fatal(err)
	}
}

// A running turn's watch of its own task is not a stream: the subscriber count (the
// channels_sse_subscribers gauge) leaves it out.
func TestARunningTurnsWatchIsNotCountedAsAStreamSubscriber(t *testing.T) {
	p, _ := quietTurn(t, "m-watch")
	if n := p.Subscribers(); n != 0 {
		t.Fatalf("with one turn running and no stream open, Subscribers = %d, want 0", n)
	}
}

// Turn watches opened and closed concurrently never make the subscriber count negative nor
// count one of them: a watch and its share of the count change together.
func TestTurnWatchesComingAndGoingNeverShowInTheSubscriberCount(t *testing.T) {
	p := taskplane.New(storetest.OpenSQLite(t))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, unwatch := p.Watch("alice", fmt.Sprintf("t-%d", i))
				unwatch()
			}
		})
	}
	for range 20000 {
		if n := p.Subscribers(); n != 0 {
			close(stop)
			wg.Wait()
			t.Fatalf("with only turn watches open, Subscribers = %d, want 0", n)
		}
	}
	close(stop)
	wg.Wait()
}

// quietTurn runs a dispatcher (default one-minute lease) over a fresh SQLite plane with a
// quietCanceler, accepts the message msgID and waits until its turn has started; the
// dispatcher stops when the test ends.
func quietTurn(t *testing.T, msgID string) (*taskplane.Plane, *quietCanceler) {
	t.Helper()
	p := taskplane.New(storetest.OpenSQLite(t))
	exec := &quietCanceler{}
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 1, Poll: 10 * time.Millisecond, Lease: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if _, err := p.Accept(context.Background(), a2aEvent(msgID, "work")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the turn to start", func() bool { return exec.started.Load() == 1 })
	return p, exec
}

// TestGracefulRestartsDoNotSpendTheReofferCap: a turn interrupted by shutdown goes back to the
// queue without counting against the re-offer cap, so a long task outlives any number of graceful
// restarts of a healthy executor (the cap is for turns that end unsettled, or holders that die).
func TestGracefulRestartsDoNotSpendTheReofferCap(t *testing.T) {
	exec := &quietCanceler{}
	restartPastTheReofferCap(t, exec, exec.started.Load)
}

// TestAShutdownIsNotAReofferWhenTheExecutorReturnsNil (invariant 7): the same when the executor
// returns nil as its context ends (leaving the task WORKING) rather than ctx.Err().
func TestAShutdownIsNotAReofferWhenTheExecutorReturnsNil(t *testing.T) {
	var started atomic.Int32
	exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		started.Add(1)
		<-ctx.Done()
		return nil // stopped; the task stays WORKING
	})
	restartPastTheReofferCap(t, exec, started.Load)
}

// restartPastTheReofferCap runs a long task through more graceful restarts (a dispatcher run,
// then stopped once its turn started) than the re-offer cap allows offers, and fails the test if
// the task is finished by them. started counts the executor's turns.
func restartPastTheReofferCap(t *testing.T, exec taskplane.Executor, started func() int32) {
	t.Helper()
	p := taskplane.New(storetest.OpenSQLite(t), taskplane.WithReofferDelay(time.Millisecond))
	acc, err := p.Accept(context.Background(), a2aEvent("m-long", "work"))
	if err != nil {
		t.Fatal(err)
	}
	for i := int32(1); i <= taskplane.MaxReoffers+3; i++ {
		d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 1, Poll: 10 * time.Millisecond, Lease: time.Minute}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = d.Run(ctx) }()
		var task *taskplane.Task
		began := waitWithin(stopBound, func() bool {
			task, err = p.GetTask(context.Background(), "alice", acc.Task.ID)
			return started() >= i || err != nil || task.Status.State.Terminal()
		})
		cancel() // the process is told to stop
		<-done
		switch {
		case err != nil:
			t.Fatal(err)
		case task.Status.State.Terminal():
			t.Fatalf("after %d graceful restarts the task is %s: %+v", i-1, task.Status.State, task.Status.Message.Parts)
		case !began:
			t.Fatalf("restart %d: the turn did not start", i)
		}
	}
}

// TestAnExecutorPanicFailsItsTaskNotTheProcess: a panic in one turn's executor fails that task
// (reason executor, without the panic's value in its status) and the dispatcher goes on to work
// the next task.
func TestAnExecutorPanicFailsItsTaskNotTheProcess(t *testing.T) {
	p := taskplane.New(storetest.OpenSQLite(t))
	exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		if text := turn.Task.History[len(turn.Task.History)-1].Parts[0].Text; text == "boom" {
			panic("secret-ish value " + text)
		}
		return turn.Complete(ctx, &taskplane.Message{Parts: []taskplane.Part{taskplane.TextPart("done")}})
	})
	runDispatcher(t, p, exec, 1)
	boom := finished(t, p, mustAccept(t, p, a2aEvent("m-boom", "boom")).Task.ID)
	fine := finished(t, p, mustAccept(t, p, a2aEvent("m-fine", "fine")).Task.ID)
	if boom.Status.State != taskplane.StateFailed || strings.Contains(fmt.Sprint(boom.Status.Message), "secret-ish") {
		t.Errorf("the panicking turn's task: %s %+v; want failed, without the panic's value", boom.Status.State, boom.Status.Message)
	}
	if fine.Status.State != taskplane.StateCompleted {
		t.Errorf("the next task: %s, want completed", fine.Status.State)
	}
}
