package taskplane_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
)

// lastUserText is the text of the last user message in t's history.
func lastUserText(t *taskplane.Task) string {
	for i := len(t.History) - 1; i >= 0; i-- {
		if m := t.History[i]; m.Role == taskplane.RoleUser && len(m.Parts) > 0 {
			return m.Parts[0].Text
		}
	}
	return ""
}

// followUpMidTurn accepts "first" (message m-1<suffix>), grants its turn to consumer-1, and then
// accepts the follow-up "second" (m-2<suffix>) for the same task while that turn runs.
func followUpMidTurn(t *testing.T, p *taskplane.Plane, suffix string) (*taskplane.Task, *taskplane.Grant, *taskplane.Turn) {
	t.Helper()
	task := mustAccept(t, p, a2aEvent("m-1"+suffix, "first")).Task
	g := claimAs(t, p, "consumer-1")
	turn := p.NewTurn(g)
	more := a2aEvent("m-2"+suffix, "second")
	more.TaskID = task.ID
	mustAccept(t, p, more)
	return task, g, turn
}

// A follow-up accepted (and acknowledged) while a turn runs waits for the next turn. A turn that
// would then settle the task without having read it is refused, the task goes back to the queue
// uncounted, and the next turn sees every message: the follow-up is never answered by a turn
// that did not read it, nor left unanswered in a finished task.
func TestAFollowUpAcceptedMidTurnIsAnsweredByATurnThatReadIt(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		task, g, turn := followUpMidTurn(t, p, "")

		// Progress is not settling: it is written (and the turn now knows the task changed).
		if err := turn.Update(ctx, taskplane.AddArtifact{Artifact: taskplane.Artifact{ID: "a-1",
			Parts: []taskplane.Part{taskplane.TextPart("draft")}}}); err != nil {
			t.Fatalf("artifact: %v", err)
		}
		for _, st := range []taskplane.State{taskplane.StateCompleted, taskplane.StateRejected,
			taskplane.StateInputRequired} {
			err := turn.Update(ctx, taskplane.SetStatus{State: st})
			if !errors.Is(err, taskplane.ErrUnseenMessage) {
				t.Fatalf("%s without reading m-2: %v, want ErrUnseenMessage", st, err)
			}
		}
		if got := taskState(t, p, task.ID); got.Status.State != taskplane.StateWorking {
			t.Fatalf("after the refusals the task is %s", got.Status.State)
		}
		if err := p.EndTurn(ctx, g, taskplane.TurnEnd{Unseen: true}); err != nil {
			t.Fatal(err)
		}
		g2 := claimAs(t, p, "consumer-2")
		if g2 == nil || g2.TaskID != task.ID {
			t.Fatalf("no next turn for the follow-up: %+v", g2)
		}
		if g2.Offer != 1 {
			t.Errorf("next turn's offer %d, want 1 (a refused turn is not counted)", g2.Offer)
		}
		if got := lastUserText(g2.Task); got != "second" {
			t.Fatalf("the next turn reads %q last, want the follow-up", got)
		}
		if err := p.NewTurn(g2).Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted}); err != nil {
			t.Fatalf("the turn that read the follow-up completes: %v", err)
		}
		endTurn(t, p, g2)
		wantNoClaim(t, p, "consumer-3")
	})
}

// A turn that reads the follow-up (Refresh) may settle; a failure or a cancel is never refused.
func TestATurnThatRefreshedOrFailsIsNotRefusedForAFollowUp(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		for i, refresh := range []bool{true, false} {
			_, g, turn := followUpMidTurn(t, p, []string{"r", "f"}[i])
			st := taskplane.StateFailed
			if refresh {
				if err := turn.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
				if lastUserText(turn.Task) != "second" {
					t.Fatalf("Refresh did not read the follow-up")
				}
				st = taskplane.StateCompleted
			}
			if err := turn.Update(ctx, taskplane.SetStatus{State: st}); err != nil {
				t.Fatalf("%s (refreshed %v): %v", st, refresh, err)
			}
			endTurn(t, p, g)
			wantNoClaim(t, p, "consumer-2")
		}
	})
}

// Through a Dispatcher: the executor's turn on m-1 tries to complete after m-2 came; the refusal
// sends the task round again at once, and the answer the task ends with is one made having read
// m-2. The blocking wait of either sender ends on it.
func TestADispatcherAnswersAFollowUpThatCameMidTurn(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		started := make(chan struct{})
		release := make(chan struct{})
		var mu sync.Mutex
		var read []string
		d := &taskplane.Dispatcher{Plane: p, Concurrency: 2, Poll: 20 * time.Millisecond,
			Executor: taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
				text := lastUserText(turn.Task)
				mu.Lock()
				read = append(read, text)
				first := len(read) == 1
				mu.Unlock()
				if first {
					close(started)
					<-release
				}
				return turn.Complete(ctx, &taskplane.Message{ID: "r-" + text, Role: taskplane.RoleAgent,
					Parts: []taskplane.Part{taskplane.TextPart("answer to " + text)}})
			})}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = d.Run(rctx) }()
		t.Cleanup(func() { cancel(); <-done })

		task := mustAccept(t, p, a2aEvent("m-1", "first")).Task
		<-started
		more := a2aEvent("m-2", "second")
		more.TaskID = task.ID
		mustAccept(t, p, more)
		close(release)
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := taskState(t, p, task.ID)
			if got.Status.State.Terminal() {
				if got.Status.State != taskplane.StateCompleted || got.Status.Message == nil ||
					got.Status.Message.Parts[0].Text != "answer to second" {
					t.Fatalf("task ended %s with %+v, want the answer to the follow-up", got.Status.State, got.Status.Message)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task still %s", got.Status.State)
			}
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(read) != 2 || read[0] != "first" || read[1] != "second" {
			t.Fatalf("turns read %q, want [first second]", read)
		}
	})
}
