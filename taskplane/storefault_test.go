package taskplane_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/internal/logcapture"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// blipStore fails the next fails Updates, as pooled connections killed by a database restart
// (or pg_terminate_backend) do; the Updates after them get fresh connections and work.
type blipStore struct {
	store.Store
	fails atomic.Int32
}

func (s *blipStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	if s.fails.Add(-1) >= 0 {
		return errors.New("begin: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")
	}
	return s.Store.Update(ctx, fn)
}

// TestAStoreFailureDuringATurnOffersItAgainInsteadOfFailingTheTask: the store failing the write
// of an agent's completion is no failure of the agent: the task is not failed with the store's
// error (which its client would read), the turn is offered again and completes the task.
func TestAStoreFailureDuringATurnOffersItAgainInsteadOfFailingTheTask(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		bs := &blipStore{Store: open(t)}
		p := taskplane.New(bs)
		var runs atomic.Int32
		exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
			if runs.Add(1) == 1 {
				bs.fails.Store(1) // the store goes away for one transaction: the completion's
			}
			return turn.Complete(ctx, &taskplane.Message{ID: "reply", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("done")}})
		})
		runDispatcher(t, p, exec, 1)
		task := finished(t, p, mustAccept(t, p, a2aEvent("m1", "hello")).Task.ID)
		if task.Status.State != taskplane.StateCompleted || runs.Load() != 2 {
			t.Fatalf("task %s (%q) after %d runs; want completed on the second, not failed by the store's blip", task.Status.State, statusText(task), runs.Load())
		}
		if strings.Contains(statusText(task), "SQLSTATE") {
			t.Errorf("the status message carries the store's error: %q", statusText(task))
		}
	})
}

// The restart that failed a turn's write may fail the end of the turn too (another connection of
// the pool it cut): the end is tried again, and the turn is offered again after the re-offer
// delay. It was left leased, and offered again only when its lease ran out (a minute).
func TestATurnWhoseEndTheStoreFailedIsEndedOnceItAnswers(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		bs := &blipStore{Store: open(t)}
		p := taskplane.New(bs, taskplane.WithReofferDelay(10*time.Millisecond))
		var runs atomic.Int32
		exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
			if runs.Add(1) == 1 {
				bs.fails.Store(2) // the completion's transaction and the end of the turn's
			}
			return turn.Complete(ctx, &taskplane.Message{ID: "reply", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("done")}})
		})
		d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 1, Poll: 10 * time.Millisecond, Lease: time.Minute}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = d.Run(ctx) }()
		defer func() { cancel(); <-done }()
		id := mustAccept(t, p, a2aEvent("m1", "hello")).Task.ID
		deadline := time.Now().Add(10 * time.Second)
		for {
			task, err := p.GetTask(context.Background(), "alice", id)
			if err == nil && task.Status.State.Terminal() {
				if task.Status.State != taskplane.StateCompleted || runs.Load() != 2 {
					t.Fatalf("task %s after %d runs; want completed on the second", task.Status.State, runs.Load())
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the task was not offered again within 10 s (%d runs): its turn was left leased", runs.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// finished waits for task id (of alice) to reach a terminal state and returns it.
func finished(t *testing.T, p *taskplane.Plane, id string) *taskplane.Task {
	t.Helper()
	var task *taskplane.Task
	waitFor(t, "task "+id+" to finish", func() bool {
		var err error
		task, err = p.GetTask(context.Background(), "alice", id)
		return err == nil && task.Status.State.Terminal()
	})
	return task
}

// statusText is the text of the first part of task's status message, or "".
func statusText(task *taskplane.Task) string {
	if m := task.Status.Message; m != nil && len(m.Parts) > 0 {
		return m.Parts[0].Text
	}
	return ""
}

// lostEnd fails renewals while failRenew is set (the lease then lapses), and makes the next end
// of a turn, once ambiguous is set, commit and then report a lost connection, as a group commit
// whose answer a restart cut does.
type lostEnd struct {
	store.Store
	failRenew, ambiguous atomic.Bool
}

func (s *lostEnd) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	stack := make([]byte, 1<<16)
	stack = stack[:runtime.Stack(stack, false)]
	if s.failRenew.Load() && bytes.Contains(stack, []byte("RenewTurn")) {
		return errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	}
	if bytes.Contains(stack, []byte("(*Plane).EndTurn")) && s.ambiguous.CompareAndSwap(true, false) {
		s.failRenew.Store(false)
		if err := s.Store.Update(ctx, fn); err != nil {
			return err
		}
		return errors.New("postgres: commit: unexpected EOF")
	}
	return s.Store.Update(ctx, fn)
}

// A turn stopped because its lease could not be renewed is given back (its wake due again at the
// same offer). If that end commits and its answer is lost, it is not tried again: the retry
// would find the task's next turn, claimed by a claimer of the same dispatcher at the same offer,
// and end it, so that two turns of one task ran at once.
//
// The lease is 3 s: the watchdog stops the first turn at two thirds of it, and the claimers may
// take the wake once the lease has run out; with 600 ms, a loaded machine (CI under -race)
// sometimes let the lease run out before the stopped executor had returned, and the next turn
// started beside it (1 run in 30), the very overlap the test looks for.
func TestAnInterruptedTurnsLostEndIsNotTriedAgainOverTheNextTurn(t *testing.T) {
	st := &lostEnd{Store: storetest.OpenSQLite(t)}
	p := taskplane.New(st, taskplane.WithLogger(slog.New(&logcapture.Lines{})))
	var runs, active, most atomic.Int32
	exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		a := active.Add(1)
		defer active.Add(-1)
		for m := most.Load(); a > m && !most.CompareAndSwap(m, a); m = most.Load() {
		}
		if runs.Add(1) == 1 {
			st.failRenew.Store(true)
			st.ambiguous.Store(true)
		}
		<-ctx.Done()
		return ctx.Err()
	})
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 2, Poll: 10 * time.Millisecond, Lease: 3 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	mustAccept(t, p, a2aEvent("m1", "hello"))
	// The first turn stops at two thirds of the lease (2 s) and is offered again; a retry of its
	// end (100 ms after it) would then end the second turn and start a third beside it.
	for deadline := time.Now().Add(20 * time.Second); runs.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second)
	cancel()
	<-done
	if runs.Load() < 2 {
		t.Fatalf("%d turns: the lapsed turn was never offered again", runs.Load())
	}
	if most.Load() > 1 {
		t.Errorf("%d turns of one task ran at once: the interrupted turn's end was tried again over the next turn", most.Load())
	}
}

// Each claim of a dispatcher leases its wake under an owner of its own (the dispatcher's, and a
// number): a turn given back at shutdown is claimed again at the same offer — here by the same
// dispatcher, run again — and an authority of owner and offer alone could not tell that turn from
// the one before it.
func TestEachTurnOfADispatcherHoldsItsWakeUnderAnOwnerOfItsOwn(t *testing.T) {
	p := taskplane.New(storetest.OpenSQLite(t))
	grants := make(chan taskplane.Grant, 2)
	exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		grants <- *turn.Grant()
		<-ctx.Done() // until the dispatcher stops: the turn is given back
		return ctx.Err()
	})
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 1, Poll: 10 * time.Millisecond, Owner: "disp"}
	run := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = d.Run(ctx) }()
		return func() { cancel(); <-done }
	}
	stop := run()
	mustAccept(t, p, a2aEvent("m1", "one"))
	first := <-grants
	stop()
	stop = run()
	defer stop()
	second := <-grants
	if second.TaskID != first.TaskID || second.Offer != first.Offer {
		t.Fatalf("turns %s/%d then %s/%d: want the task given back and claimed again at its offer",
			first.TaskID, first.Offer, second.TaskID, second.Offer)
	}
	if first.Owner == second.Owner || !strings.HasPrefix(first.Owner, "disp/") || !strings.HasPrefix(second.Owner, "disp/") {
		t.Fatalf("owners %q and %q: want two of their own, each the dispatcher's and a number", first.Owner, second.Owner)
	}
}
