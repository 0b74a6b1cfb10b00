package echo_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/executor/echo"
	"github.com/channels-dev/channels/taskplane/executor/executortest"
)

// executed runs the echo's turns through Execute alone: a Dispatcher running echo.New() itself
// settles a new A2A task's first turn in its acceptance (Inline), not through Execute.
func executed() taskplane.Executor { return taskplane.ExecutorFunc(echo.New().Execute) }

func TestEchoCompletesWithTheUsersText(t *testing.T) {
	h := executortest.New(t, executed())
	ev := executortest.UserEvent("m-1", "hello")
	ev.Message.Parts = append(ev.Message.Parts, taskplane.Part{Data: []byte(`{"a":1}`)}, taskplane.TextPart("world"))
	acc := h.Send(t, ev)
	evs := h.Settle(t, acc.Task.ID, acc.Task.LastSeq)
	// The wake queue's grant puts the task in WORKING; the echo completes it.
	if diff := cmp.Diff([]string{"status:working", "status:completed"}, executortest.Steps(evs)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	msg := evs[1].Status.Status.Message
	if msg == nil || msg.Role != taskplane.RoleAgent {
		t.Fatalf("status message %+v", msg)
	}
	want := []taskplane.Part{taskplane.TextPart("hello"), taskplane.TextPart("world")}
	if diff := cmp.Diff(want, msg.Parts); diff != "" {
		t.Fatalf("echoed parts (-want +got):\n%s", diff)
	}
}

func TestEchoWithoutTextStillCompletes(t *testing.T) {
	h := executortest.New(t, executed())
	ev := executortest.UserEvent("m-2", "")
	ev.Message.Parts = []taskplane.Part{{URL: "https://example.com/x", MediaType: "text/plain"}}
	acc := h.Send(t, ev)
	evs := h.Settle(t, acc.Task.ID, acc.Task.LastSeq)
	if got := executortest.Steps(evs); len(got) != 2 || got[1] != "status:completed" {
		t.Fatalf("events %v", got)
	}
}

func TestLatestUserMessageSkipsAgentMessages(t *testing.T) {
	task := &taskplane.Task{History: []taskplane.Message{
		{ID: "u1", Role: taskplane.RoleUser}, {ID: "u2", Role: taskplane.RoleUser}, {ID: "a1", Role: taskplane.RoleAgent},
	}}
	if m := echo.LatestUserMessage(task); m == nil || m.ID != "u2" {
		t.Fatalf("latest user message %+v", m)
	}
	if m := echo.LatestUserMessage(&taskplane.Task{}); m != nil {
		t.Fatalf("empty history gave %+v", m)
	}
}

// The inline turn (run in a new A2A task's acceptance) is the turn Execute records.
func TestEchoInlineTurnIsTheTurnExecuteRecords(t *testing.T) {
	task := &taskplane.Task{Status: taskplane.Status{State: taskplane.StateSubmitted}, History: []taskplane.Message{
		{ID: "u1", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("hello"), {Data: []byte(`{"a":1}`)}}},
	}}
	changes, ok := echo.New().Inline()(task)
	if !ok || len(changes) != 1 {
		t.Fatalf("inline turn %+v %v", changes, ok)
	}
	st, isStatus := changes[0].(taskplane.SetStatus)
	if !isStatus || st.State != taskplane.StateCompleted || st.Message == nil || st.Message.Role != taskplane.RoleAgent {
		t.Fatalf("inline change %+v", changes[0])
	}
	if diff := cmp.Diff([]taskplane.Part{taskplane.TextPart("hello")}, st.Message.Parts); diff != "" {
		t.Fatalf("echoed parts (-want +got):\n%s", diff)
	}
}
