package taskplane_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// flakyResults records hand-offs and fails those for failing states (a store hiccup, or a crash
// standing in between the task's commit and the delivery's Prepare).
type flakyResults struct {
	mu    sync.Mutex
	calls []taskplane.State
	fail  map[taskplane.State]int
}

func (f *flakyResults) Settled(_ context.Context, t *taskplane.Task) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, t.Status.State)
	if f.fail[t.Status.State] > 0 {
		f.fail[t.Status.State]--
		return errors.New("prepare failed (store busy)")
	}
	return nil
}

func (f *flakyResults) count(s taskplane.State) (n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		if c == s {
			n++
		}
	}
	return n
}

// waitingNativeTask is a provider task whose turn asked a question and ended: INPUT_REQUIRED,
// with no live wake.
func waitingNativeTask(t *testing.T, p *taskplane.Plane) *taskplane.Turn {
	t.Helper()
	turn := grantTask(t, p, nativeEvent("alice", "e1", "conv", "book"))
	if err := turn.RequireInput(context.Background(), taskplane.Question{Text: "for how many?"}); err != nil {
		t.Fatal(err)
	}
	endTurn(t, p, turn.Grant())
	return turn
}

// A task settled outside any turn (timed out while waiting for an answer; canceled) hands its
// notice home right after its commit; if that hand-off fails (or the process dies first), a wake
// held for it in the same transaction falls due and a claimer hands it off again.
func TestATimeoutNoticeWhoseHandOffFailedIsHandedOffAgain(t *testing.T) {
	c := newFakeClock()
	res := &flakyResults{fail: map[taskplane.State]int{taskplane.StateFailed: 1}}
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		res.calls = nil
		res.fail[taskplane.StateFailed] = 1
		ctx := context.Background()
		waitingNativeTask(t, p)
		c.Advance(2*time.Hour + time.Second)
		if n, err := p.SweepTimeouts(ctx, 2*time.Hour); err != nil || n != 1 {
			t.Fatalf("sweep: %d %v", n, err)
		}
		// Give every durable retry mechanism its chance: the wake queue and further sweeps.
		for i := 0; i < 5; i++ {
			c.Advance(10 * time.Minute)
			_ = claimAs(t, p, "later")
			_, _ = p.SweepTimeouts(ctx, 2*time.Hour)
		}
		if got := res.count(taskplane.StateFailed); got < 2 {
			t.Fatalf("the FAILED (no-response) notice was handed to delivery %d time(s) and it failed; never retried", got)
		}
	}, taskplane.WithClock(c.Now), taskplane.WithResults(res))
}

// The same for a cancel: and once handed off, the held wake is retired, so it is handed off once.
func TestACancelNoticeWhoseHandOffFailedIsHandedOffAgain(t *testing.T) {
	c := newFakeClock()
	res := &flakyResults{fail: map[taskplane.State]int{}}
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		res.calls = nil
		res.fail[taskplane.StateCanceled] = 1
		ctx := context.Background()
		turn := waitingNativeTask(t, p)
		if _, _, err := p.Cancel(ctx, "alice", turn.Task.ID, nil); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			c.Advance(10 * time.Minute)
			_ = claimAs(t, p, "later")
		}
		if got := res.count(taskplane.StateCanceled); got != 2 {
			t.Fatalf("the CANCELED notice was handed to delivery %d time(s), want 2: one that failed, one again", got)
		}
	}, taskplane.WithClock(c.Now), taskplane.WithResults(res))
}

// The same for the failure notice of a task the admission bound refused: a wake held in the
// acceptance's transaction hands it off again when the hand-off right after the commit failed.
func TestAnOverflowNoticeWhoseHandOffFailedIsHandedOffAgain(t *testing.T) {
	c := newFakeClock()
	res := &flakyResults{fail: map[taskplane.State]int{}}
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		res.calls = nil
		res.fail[taskplane.StateFailed] = 1
		mustAccept(t, p, nativeEvent("alice", "e1", "conv-1", "first"))
		refused := mustAccept(t, p, nativeEvent("alice", "e2", "conv-2", "second"))
		if refused.Task.Status.State != taskplane.StateFailed {
			t.Fatalf("second acceptance: %s, want FAILED by the admission bound", refused.Task.Status.State)
		}
		// The first task's turn runs and ends, so the queue holds only the held notice.
		g := claimAs(t, p, "worker")
		if err := p.NewTurn(g).Complete(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		endTurn(t, p, g)
		for i := 0; i < 5; i++ {
			c.Advance(10 * time.Minute)
			_ = claimAs(t, p, "later")
		}
		if got := res.count(taskplane.StateFailed); got != 2 {
			t.Fatalf("the overflow notice was handed to delivery %d time(s), want 2: one that failed, one again", got)
		}
	}, taskplane.WithClock(c.Now), taskplane.WithResults(res), taskplane.WithMaxWaiting(1))
}

// The same for the failure notice of a task failed by the re-offer cap, when its last offer ends
// unsettled (EndTurn gives up) and when its last holder died (the claim that finds its lease run
// out gives up): a wake held in the transaction that failed it hands it off again.
func TestAReofferCapNoticeWhoseHandOffFailedIsHandedOffAgain(t *testing.T) {
	for _, holderDies := range []bool{false, true} {
		t.Run(fmt.Sprintf("holderDies=%v", holderDies), func(t *testing.T) {
			c := newFakeClock()
			res := &flakyResults{fail: map[taskplane.State]int{}}
			eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
				res.calls = nil
				res.fail[taskplane.StateFailed] = 1
				task := mustAccept(t, p, nativeEvent("alice", "e1", "conv", "hi")).Task
				for i := 0; i < 1+taskplane.MaxReoffers; i++ {
					c.Advance(2 * time.Minute) // the re-offer falls due; a dead holder's lease runs out
					g := claimAs(t, p, "w")
					if g == nil {
						t.Fatalf("offer %d: nothing to claim", i+1)
					}
					if !holderDies {
						endTurn(t, p, g) // unsettled
					}
				}
				if holderDies {
					c.Advance(2 * time.Minute)
					if g := claimAs(t, p, "w"); g != nil {
						t.Fatalf("a seventh offer: %+v", g)
					}
				}
				if got := taskState(t, p, task.ID); got.Status.State != taskplane.StateFailed || reasonOf(got) != taskplane.ReasonReofferCap {
					t.Fatalf("task %s (%s), want FAILED by the re-offer cap", got.Status.State, reasonOf(got))
				}
				for i := 0; i < 5; i++ {
					c.Advance(10 * time.Minute)
					_ = claimAs(t, p, "later")
				}
				if got := res.count(taskplane.StateFailed); got != 2 {
					t.Fatalf("the FAILED (re-offer cap) notice was handed to delivery %d time(s), want 2: one that failed, one again", got)
				}
			}, taskplane.WithClock(c.Now), taskplane.WithResults(res), taskplane.WithReofferDelay(time.Millisecond))
		})
	}
}

// timedResults records when each hand-off was made and refuses them while refuse is set.
type timedResults struct {
	mu     sync.Mutex
	clock  func() time.Time
	refuse bool
	at     []time.Time
}

func (r *timedResults) Settled(context.Context, *taskplane.Task) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = append(r.at, r.clock())
	if r.refuse {
		return errors.New("delivery store unavailable")
	}
	return nil
}

func (r *timedResults) times() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.at)
}

// A result whose hand-off keeps failing is tried again with backoff, not every second: the waits
// double from the first re-offer delay (1 s) up to a minute and stay there, and the hand-off is
// never given up: once delivery takes it, it is handed off once more and the wake is retired.
func TestAFailingResultHandOffIsRetriedWithBackoffUpToAMinute(t *testing.T) {
	c := newFakeClock()
	const step = 500 * time.Millisecond // how often claimers look (the poll)
	res := &timedResults{clock: c.Now}
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		res.mu.Lock()
		res.at, res.refuse = nil, true
		res.mu.Unlock()
		turn := grantTask(t, p, nativeEvent("alice", "e1", "conv", "hi"))
		if err := turn.Complete(ctx, nil); err != nil {
			t.Fatal(err)
		}
		endTurn(t, p, turn.Grant()) // the first hand-off fails
		for range int(5 * time.Minute / step) {
			c.Advance(step)
			if g := claimAs(t, p, "d"); g != nil {
				t.Fatalf("a settled task was offered a turn: %+v", g)
			}
		}
		at := res.times()
		// Each wait is as long as the task has been settled: 1 s, then about 1.5, 3, 6, 12, 24 and
		// 48 s (the poll's step adds to a wait, and the next one doubles it), then a minute each.
		if len(at) < 9 || len(at) > 12 {
			t.Fatalf("%d hand-offs in 5 minutes, want about 11 (doubling waits, up to a minute)", len(at))
		}
		var prev time.Duration
		for i := 1; i < len(at); i++ {
			gap := at[i].Sub(at[i-1])
			if gap < prev-2*step || gap > time.Minute+2*step {
				t.Fatalf("hand-off %d came %s after the one before (that one's wait: %s): want the waits doubling up to a minute", i+1, gap, prev)
			}
			prev = gap
		}
		if prev < time.Minute-2*step {
			t.Fatalf("the last wait was %s, want the cap of a minute by now", prev)
		}
		res.mu.Lock()
		res.refuse = false
		res.mu.Unlock()
		n := len(at)
		for range 6 {
			c.Advance(30 * time.Second)
			_ = claimAs(t, p, "d")
		}
		if got := len(res.times()); got != n+1 {
			t.Fatalf("%d hand-offs after delivery came back, want 1", got-n)
		}
		ws, err := p.Store().ListTaskWakes(ctx, "alice", turn.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if w.State != store.WakeDone {
				t.Errorf("wake %s left %s (%s)", w.ID, w.State, w.Detail)
			}
		}
	}, taskplane.WithClock(c.Now), taskplane.WithResults(res))
}

// lostStore is a store this process has lost while others still reach it: while down is set its
// Updates fail, or, with hang, wait until the test ends (a black-holed connection).
type lostStore struct {
	store.Store
	down atomic.Bool
	hang chan struct{} // nil: fail at once
}

func (f *lostStore) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if f.down.Load() {
		if f.hang != nil {
			<-f.hang
		}
		return errors.New("connection lost")
	}
	return f.Store.Update(ctx, fn)
}

// A turn that cannot renew its lease (its process lost the database: renewals fail, or hang)
// stops before the lease runs out, so the process that takes the task afterwards never runs beside
// it; and a turn so stopped is given back, not failed, when the database is back by then.
//
// The lease is 3 s: the turn stops at two thirds of it, and its executor must have returned
// before the lease runs out and B claims, a margin of a third of the lease, which a loaded
// machine (CI under -race) can take when it is 500 ms (TestAnInterruptedTurnsLostEndIsNotTried...
// failed so, 1 run in 30 under load, with 200 ms).
func TestATurnThatCannotRenewItsLeaseStopsBeforeItRunsOut(t *testing.T) {
	for _, c := range []struct {
		name  string
		hang  bool
		brief bool // the database is back as the turn stops
	}{{"renewals fail", false, false}, {"renewals hang", true, false}, {"the database is back", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			s := storetest.OpenSQLite(t)
			lost := &lostStore{Store: s}
			if c.hang {
				lost.hang = make(chan struct{})
			}
			var running, peak, calls atomic.Int32
			exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
				calls.Add(1)
				n := running.Add(1)
				defer running.Add(-1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				<-ctx.Done()
				if c.brief {
					lost.down.Store(false)
				}
				return ctx.Err()
			})
			run := func(p *taskplane.Plane, owner string) {
				d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 1, Poll: 10 * time.Millisecond,
					Lease: 3 * time.Second, Owner: owner}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { defer close(done); _ = d.Run(ctx) }()
				t.Cleanup(func() { cancel(); <-done })
			}
			a := taskplane.New(lost)
			acc := mustAccept(t, a, nativeEvent("alice", "e1", "conv", "work"))
			run(a, "A")
			if c.hang {
				// Registered after A's dispatcher: cleanups run last first, so the hung calls end
				// before A is stopped and waited for.
				t.Cleanup(func() { close(lost.hang) })
			}
			waitFor(t, "A's turn", func() bool { return running.Load() == 1 })
			lost.down.Store(true)
			if !c.brief {
				run(taskplane.New(s), "B")
			}
			waitFor(t, "a second turn after the first stopped", func() bool { return calls.Load() == 2 })
			if peak.Load() > 1 {
				t.Fatalf("%d executors ran the task at once: the turn that could not renew ran on past its lease", peak.Load())
			}
			task, err := taskplane.New(s).GetTask(context.Background(), "alice", acc.Task.ID)
			if err != nil {
				t.Fatal(err)
			}
			if task.Status.State.Terminal() {
				t.Fatalf("task %s after its turn was stopped for its lease, want it given back", task.Status.State)
			}
		})
	}
}

// slowGrantStore stalls the Update after stall is set, once (as a commit held up by the disk or a
// process paused), and fails every Update after that one (the database lost).
type slowGrantStore struct {
	store.Store
	stall atomic.Int64 // nanoseconds; 0: none pending
	down  atomic.Bool
}

func (f *slowGrantStore) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if f.down.Load() {
		return errors.New("connection lost")
	}
	err := f.Store.Update(ctx, fn)
	if d := f.stall.Swap(0); d != 0 {
		time.Sleep(time.Duration(d))
		f.down.Store(true)
	}
	return err
}

// A turn's watchdog counts its lease from the grant's transaction, not from when the turn
// started: a claim whose commit took half the lease, followed by renewals that fail, stops the
// turn before the lease written in that transaction runs out (counted from the turn's start, it
// ran a sixth of the lease past it).
func TestATurnWhoseGrantTookLongStopsBeforeTheLeaseItWasGivenRunsOut(t *testing.T) {
	s := &slowGrantStore{Store: storetest.OpenSQLite(t)}
	p := taskplane.New(s)
	mustAccept(t, p, nativeEvent("alice", "e1", "conv", "work"))
	const lease = 3 * time.Second
	type stop struct {
		at         time.Time
		leaseUntil time.Time
	}
	stopped := make(chan stop, 1)
	exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		<-ctx.Done()
		stopped <- stop{time.Now(), turn.Grant().LeaseUntil}
		return ctx.Err()
	})
	s.stall.Store(int64(lease / 2)) // the claim's Update is the next one
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 1, Poll: time.Hour, Lease: lease, Owner: "A"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case st := <-stopped:
		if !st.at.Before(st.leaseUntil) {
			t.Fatalf("the turn stopped %v after its lease ran out", st.at.Sub(st.leaseUntil))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the turn was not stopped")
	}
}

// A renewal that fails once (the store away for a moment, less than a third of the lease) is
// tried again soon: the turn goes on and completes, instead of being stopped and offered again.
//
// The lease is 3 s, not a fraction of a second: the watchdog stops a turn two thirds of a lease
// after its last renewal, and with a 600 ms lease a loaded machine (CI under -race) sometimes took
// the 200 ms between the retried renewal and the watchdog, stopping the turn (1 run in 30).
func TestABriefStoreBlipDoesNotStopTheTurn(t *testing.T) {
	const lease = 3 * time.Second
	lost := &lostStore{Store: storetest.OpenSQLite(t)}
	p := taskplane.New(lost)
	var stopped atomic.Bool
	exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		// The store is away from a quarter of the lease to 150 ms past its third: the renewal at a
		// third fails, and is tried again (every twelfth of the lease) long before the watchdog,
		// at two thirds. Without that retry the next renewal would come as the watchdog fires.
		time.Sleep(lease / 4)
		lost.down.Store(true)
		time.Sleep(lease/3 - lease/4 + 150*time.Millisecond)
		lost.down.Store(false)
		select {
		case <-ctx.Done():
			stopped.Store(true)
			return ctx.Err()
		case <-time.After(lease / 2): // past the watchdog of a turn whose renewal was not retried
		}
		return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted})
	})
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 1, Poll: 10 * time.Millisecond, Lease: lease}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	acc, err := p.Accept(context.Background(), a2aEvent("m-blip", "work"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the turn to finish or stop", func() bool {
		return stopped.Load() || taskState(t, p, acc.Task.ID).Status.State == taskplane.StateCompleted
	})
	if stopped.Load() {
		t.Fatal("one failed renewal (the store away 400 ms of a 3 s lease) stopped the turn")
	}
}

// chattyCanceler reports progress every few milliseconds until an update is refused, and counts
// the cancels it is told of.
type chattyCanceler struct{ cancels, returned atomic.Int32 }

func (c *chattyCanceler) Execute(ctx context.Context, turn *taskplane.Turn) error {
	defer c.returned.Add(1)
	for i := 0; ; i++ {
		msg := taskplane.Message{ID: fmt.Sprintf("progress-%d", i), Role: taskplane.RoleAgent,
			Parts: []taskplane.Part{taskplane.TextPart(fmt.Sprintf("step %d", i))}}
		if err := turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateWorking, Message: &msg}); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (c *chattyCanceler) Cancel(context.Context, *taskplane.Task) error {
	c.cancels.Add(1)
	return nil
}

// A task timed out while its executor reports progress: the executor's next update is refused
// before any heartbeat sees the task finished, and the stop is still passed on to it (the a2a
// executor cancels its downstream task), once.
func TestATimeoutTheExecutorNoticesFirstIsPassedOnToIt(t *testing.T) {
	p := taskplane.New(storetest.OpenSQLite(t))
	exec := &chattyCanceler{}
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 1, Poll: 10 * time.Millisecond, Lease: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	acc, err := p.Accept(context.Background(), a2aEvent("m-chatty", "work"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the turn to start", func() bool { return len(taskState(t, p, acc.Task.ID).History) > 1 })
	waitFor(t, "the timeout sweep to fail the task", func() bool {
		n, err := p.SweepTimeouts(context.Background(), time.Millisecond)
		return err == nil && n == 1
	})
	waitFor(t, "the executor to be told", func() bool { return exec.cancels.Load() > 0 })
	time.Sleep(100 * time.Millisecond)
	if n := exec.cancels.Load(); n != 1 {
		t.Errorf("the executor was told of the timeout %d times, want once", n)
	}
}

// A cancel committed while the executor reports progress: its next update is refused and its turn
// tells it of the cancel before the canceler's CancelTurn runs (the A2A CancelTask commits CANCELED
// first). CancelTurn then says the executor was told already, whether the turn still runs or has
// ended, so the canceler does not tell it again; a cancel of a task with no turn here asks the
// caller to tell it.
func TestCancelTurnAfterTheTurnPassedTheCancelOnSaysNotToTellAgain(t *testing.T) {
	p := taskplane.New(storetest.OpenSQLite(t))
	exec := &chattyCanceler{}
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 1, Poll: 10 * time.Millisecond, Lease: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	acc, err := p.Accept(context.Background(), a2aEvent("m-chatty-cancel", "work"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the turn to start", func() bool { return len(taskState(t, p, acc.Task.ID).History) > 1 })
	if _, canceled, err := p.Cancel(context.Background(), "alice", acc.Task.ID, nil); err != nil || !canceled {
		t.Fatalf("cancel: %v %v", canceled, err)
	}
	waitFor(t, "the turn to tell the executor and return", func() bool {
		return exec.cancels.Load() == 1 && exec.returned.Load() == 1
	})
	time.Sleep(100 * time.Millisecond) // the turn ends and leaves the dispatcher
	if d.CancelTurn(acc.Task.ID) {
		t.Fatal("CancelTurn asks its caller to tell the executor, which its turn told already")
	}
	if !d.CancelTurn("a-task-with-no-turn-here") {
		t.Fatal("CancelTurn of a task with no turn here does not ask its caller to tell the executor")
	}
	if n := exec.cancels.Load(); n != 1 {
		t.Errorf("the executor was told of the cancel %d times, want once", n)
	}
}
