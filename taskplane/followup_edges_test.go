package taskplane_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
)

// An executor that returns ErrUnseenMessage (wrapped) with no follow-up having arrived — a bug,
// or an error it passed on from elsewhere — gets no uncounted, immediate re-offers: the plane
// refused nothing, so the turn ends as an unsettled one, counted against MaxReoffers.
func TestAnExecutorReturningErrUnseenMessageWithoutAFollowUpIsNotReofferedForever(t *testing.T) {
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		var turns atomic.Int64
		d := &taskplane.Dispatcher{Plane: p, Concurrency: 1, Poll: 20 * time.Millisecond,
			Executor: taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
				turns.Add(1)
				return fmt.Errorf("my agent: %w", taskplane.ErrUnseenMessage)
			})}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = d.Run(rctx) }()
		defer func() { cancel(); <-done }()

		task := mustAccept(t, p, a2aEvent("m-1", "first")).Task
		// Up to 20 s for the six turns and their ends: a bound of 3 s left a loaded machine (CI
		// under -race, Postgres) little room. Turns past the cap show in the count however long
		// the wait.
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if taskState(t, p, task.ID).Status.State.Terminal() {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		got := taskState(t, p, task.ID)
		if n := turns.Load(); n > 1+taskplane.MaxReoffers {
			t.Fatalf("the executor was given %d turns (task %s) with no follow-up ever sent; "+
				"want at most %d (MaxReoffers bypassed)", n, got.Status.State, 1+taskplane.MaxReoffers)
		}
		if !got.Status.State.Terminal() {
			t.Fatalf("task still %s after %d turns", got.Status.State, turns.Load())
		}
	}, taskplane.WithReofferDelay(time.Millisecond))
}

// A turn that asked a question (INPUT_REQUIRED) and goes on running gets a follow-up: the task
// goes back to SUBMITTED with the new message and a wake held back by the turn. If the turn then
// changes its question to an auth request, its update cannot be prepared on the copy it holds
// (INPUT_REQUIRED → AUTH_REQUIRED is not a legal move) and is applied to the task as stored
// (SUBMITTED → AUTH_REQUIRED is): that path too looks for the follow-up, else the task would
// settle without it and the follow-up's wake be retired as "waiting for input", never worked.
func TestASettlingUpdateAppliedToTheStoredTaskIsCheckedForAFollowUp(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		task := mustAccept(t, p, a2aEvent("m-1", "first")).Task
		g := claimAs(t, p, "consumer-1")
		turn := p.NewTurn(g)
		if err := turn.RequireInput(ctx, taskplane.Question{Text: "which one?"}); err != nil {
			t.Fatal(err)
		}
		more := a2aEvent("m-2", "second")
		more.TaskID = task.ID
		mustAccept(t, p, more)

		err := turn.RequireInput(ctx, taskplane.Question{Text: "log in first", Auth: true})
		if !errors.Is(err, taskplane.ErrUnseenMessage) {
			got := taskState(t, p, task.ID)
			endTurn(t, p, g)
			next := claimAs(t, p, "consumer-2")
			t.Fatalf("AUTH_REQUIRED without reading m-2: err %v, task now %s; want ErrUnseenMessage "+
				"(the next claim after the turn ended: %v — the follow-up is never worked)",
				err, got.Status.State, next)
		}
	})
}

// The refusal is the plane's answer, not a store failure: it is not classed ErrStore
// (StoreUnavailable), which tells callers "the store failed, offer the turn again / retry later".
func TestAnUnseenMessageRefusalIsNotAStoreFailure(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		_, _, turn := followUpMidTurn(t, p, "")
		err := turn.Update(context.Background(), taskplane.SetStatus{State: taskplane.StateCompleted})
		if !errors.Is(err, taskplane.ErrUnseenMessage) {
			t.Fatalf("err %v, want ErrUnseenMessage", err)
		}
		if taskplane.StoreUnavailable(err) || errors.Is(err, taskplane.ErrStore) {
			t.Fatalf("the refusal %q is classed as a store failure (ErrStore)", err)
		}
	})
}
