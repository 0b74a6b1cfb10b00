package taskplane_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/channels-dev/channels/taskplane"
)

// inlineExec is an executor with an inline first turn: inline works out its changes (nil: it
// has none); Execute completes the task and counts its calls; kept counts the inline turns the
// plane reports committed.
type inlineExec struct {
	inline   taskplane.InlineFunc
	executed atomic.Int32
	kept     atomic.Int32
}

func (e *inlineExec) Inline() taskplane.InlineFunc { return e.inline }

func (e *inlineExec) InlineKept(time.Duration) { e.kept.Add(1) }

func (e *inlineExec) Execute(ctx context.Context, turn *taskplane.Turn) error {
	e.executed.Add(1)
	return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted,
		Message: &taskplane.Message{ID: "executed", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("executed")}}})
}

func completeWith(text string) taskplane.InlineFunc {
	return func(t *taskplane.Task) ([]taskplane.Change, bool) {
		return []taskplane.Change{taskplane.SetStatus{State: taskplane.StateCompleted,
			Message: &taskplane.Message{ID: "inline", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart(text)}}}}, true
	}
}

// eventKinds lists a task's stored events as kind or kind:state.
func eventKinds(t *testing.T, p *taskplane.Plane, principal, taskID string) []string {
	t.Helper()
	evs, err := p.Events(context.Background(), principal, taskID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		switch {
		case e.Status != nil:
			out = append(out, "status:"+string(e.Status.Status.State))
		case e.Task != nil:
			out = append(out, "task:"+string(e.Task.Status.State))
		default:
			out = append(out, e.Kind)
		}
	}
	return out
}

// waitInline waits until a Dispatcher's inline turn is on offer: an acceptance then settles its
// task itself.
func waitInline(t *testing.T, p *taskplane.Plane) {
	t.Helper()
	waitFor(t, "the dispatcher's inline turn", func() bool { return p.InlineOnOffer() })
}

// TestAnInlineTurnCommitsWithItsAcceptance: with a Dispatcher running an executor that has an
// inline first turn, an A2A send's task is committed settled, by that turn, in the transaction
// that accepts the send: the acceptance returns it settled, the store holds it so with the turn's
// events and its woken evidence, no wake is left, and Execute is never called.
func TestAnInlineTurnCommitsWithItsAcceptance(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		exec := &inlineExec{inline: completeWith("inline answer")}
		runDispatcher(t, p, exec, 2)
		waitInline(t, p)
		acc := mustAccept(t, p, a2aEvent("m-1", "hello"))
		if acc.Task.Status.State != taskplane.StateSubmitted {
			t.Fatalf("acceptance's task %s, want the task as the send left it (SUBMITTED)", acc.Task.Status.State)
		}
		if acc.Settled == nil || acc.Settled.Status.State != taskplane.StateCompleted {
			t.Fatalf("settled %+v, want COMPLETED", acc.Settled)
		}
		stored, err := p.Store().GetTask(context.Background(), "alice", acc.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if stored.State != string(taskplane.StateCompleted) || stored.Version != 2 || stored.LastSeq != 2 {
			t.Fatalf("stored task: state %s version %d last seq %d, want COMPLETED 2 2", stored.State, stored.Version, stored.LastSeq)
		}
		got, err := p.GetTask(context.Background(), "alice", acc.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(acc.Settled, got); diff != "" {
			t.Fatalf("settled task against the stored one (-settled +stored):\n%s", diff)
		}
		if m := got.Status.Message; m == nil || len(m.Parts) != 1 || m.Parts[0].Text != "inline answer" {
			t.Fatalf("status message %+v", m)
		}
		want := []string{"task:submitted", "status:completed"}
		if diff := cmp.Diff(want, eventKinds(t, p, "alice", acc.Task.ID)); diff != "" {
			t.Fatalf("events (-want +got):\n%s", diff)
		}
		wakes, err := p.Store().ListTaskWakes(context.Background(), "alice", acc.Task.ID)
		if err != nil || len(wakes) != 0 {
			t.Fatalf("wakes %+v (%v), want none", wakes, err)
		}
		woken := evidenceDetails(t, p, taskplane.EvidenceWoken, acc.Task.ID)
		if len(woken) != 1 || woken[0]["inline"] != true {
			t.Fatalf("woken evidence %v, want one, inline", woken)
		}
		if n := countEvidence(t, p, "alice", taskplane.EvidenceAccepted); n != 1 {
			t.Fatalf("accepted evidence %d", n)
		}
		time.Sleep(50 * time.Millisecond) // a dispatcher poll or two: nothing for it to run
		if n := exec.executed.Load(); n != 0 {
			t.Fatalf("Execute ran %d times", n)
		}
		// Its duplicate is answered from the claim, settled, with no turn.
		dup := mustAccept(t, p, a2aEvent("m-1", "hello"))
		if dup.Outcome != taskplane.Duplicate || dup.Task.Status.State != taskplane.StateCompleted {
			t.Fatalf("duplicate: %s %s", dup.Outcome, dup.Task.Status.State)
		}
		if n := exec.kept.Load(); n != 1 {
			t.Fatalf("inline turns reported kept: %d, want 1", n)
		}
	})
}

// TestATurnTheInlineFunctionDoesNotSettleRunsThroughExecute: an inline function that declines,
// whose changes leave the task unsettled, whose changes do not apply, or that panics writes
// nothing of them and is not reported kept; the turn runs through Execute as any other.
func TestATurnTheInlineFunctionDoesNotSettleRunsThroughExecute(t *testing.T) {
	artifact := taskplane.AddArtifact{Artifact: taskplane.Artifact{ID: "a", Parts: []taskplane.Part{taskplane.TextPart("partial")}}}
	cases := map[string]taskplane.InlineFunc{
		"declines": func(*taskplane.Task) ([]taskplane.Change, bool) { return nil, false },
		"leaves it submitted": func(*taskplane.Task) ([]taskplane.Change, bool) {
			return []taskplane.Change{artifact}, true
		},
		"an artifact after a terminal state": func(*taskplane.Task) ([]taskplane.Change, bool) {
			return []taskplane.Change{taskplane.SetStatus{State: taskplane.StateCompleted}, artifact}, true
		},
		"panics": func(*taskplane.Task) ([]taskplane.Change, bool) { panic("inline turn broke") },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
				exec := &inlineExec{inline: f}
				runDispatcher(t, p, exec, 2)
				waitInline(t, p)
				acc := mustAccept(t, p, a2aEvent("m-1", "hello"))
				if acc.Settled != nil {
					t.Fatalf("settled in the acceptance: %s", acc.Settled.Status.State)
				}
				done := waitState(t, p, acc.Task.ID, taskplane.StateCompleted)
				if m := done.Status.Message; m == nil || m.ID != "executed" {
					t.Fatalf("completed by %+v, want Execute", m)
				}
				want := []string{"task:submitted", "status:working", "status:completed"}
				if diff := cmp.Diff(want, eventKinds(t, p, "alice", acc.Task.ID)); diff != "" {
					t.Fatalf("events (-want +got):\n%s", diff)
				}
				if len(done.Artifacts) != 0 {
					t.Fatalf("artifacts %+v: the inline changes were written", done.Artifacts)
				}
				woken := evidenceDetails(t, p, taskplane.EvidenceWoken, acc.Task.ID)
				if len(woken) != 1 || woken[0]["inline"] != nil {
					t.Fatalf("woken evidence %v, want one, of the dispatcher", woken)
				}
				if n := exec.kept.Load(); n != 0 {
					t.Fatalf("inline turns reported kept: %d, want none", n)
				}
			})
		})
	}
}

// TestOnlyTheFirstTurnOfAnA2ATaskRunsInline: a provider source's task (its result goes home
// through a wake) and a follow-up to a task waiting for input run through Execute; so does every
// turn while no Dispatcher with an inline turn runs.
func TestOnlyTheFirstTurnOfAnA2ATaskRunsInline(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		// No dispatcher: the task waits for a turn.
		before := mustAccept(t, p, a2aEvent("m-0", "before"))
		if before.Settled != nil {
			t.Fatal("settled with no dispatcher running")
		}
		exec := &inlineExec{inline: func(t *taskplane.Task) ([]taskplane.Change, bool) {
			return []taskplane.Change{taskplane.SetStatus{State: taskplane.StateInputRequired,
				Message: &taskplane.Message{ID: "q", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("which?")}}}}, true
		}}
		runDispatcher(t, p, exec, 2)
		waitInline(t, p)
		waitState(t, p, before.Task.ID, taskplane.StateCompleted)

		native := mustAccept(t, p, nativeEvent("alice", "e-1", "conv", "from a provider"))
		if native.Settled != nil {
			t.Fatal("a provider's task settled inline")
		}
		waitState(t, p, native.Task.ID, taskplane.StateCompleted)

		asked := mustAccept(t, p, a2aEvent("m-1", "book"))
		if asked.Settled == nil || asked.Settled.Status.State != taskplane.StateInputRequired {
			t.Fatalf("first turn: %+v, want INPUT_REQUIRED inline", asked.Settled)
		}
		reply := a2aEvent("m-2", "two")
		reply.TaskID = asked.Task.ID
		cont, err := p.Accept(ctx, reply)
		if err != nil {
			t.Fatal(err)
		}
		if cont.Outcome != taskplane.Continued || cont.Settled != nil {
			t.Fatalf("follow-up: %s, settled %v", cont.Outcome, cont.Settled != nil)
		}
		waitState(t, p, asked.Task.ID, taskplane.StateCompleted)
		if n := exec.executed.Load(); n != 3 {
			t.Fatalf("Execute ran %d times, want 3 (the task from before, the provider's, the follow-up)", n)
		}
	})
}

func waitState(t *testing.T, p *taskplane.Plane, taskID string, want taskplane.State) *taskplane.Task {
	t.Helper()
	var got *taskplane.Task
	waitFor(t, "task "+taskID+" "+string(want), func() bool {
		var err error
		got, err = p.GetTask(context.Background(), "alice", taskID)
		return err == nil && got.Status.State == want
	})
	return got
}
