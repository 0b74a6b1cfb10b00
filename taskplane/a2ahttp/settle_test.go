package a2ahttp_test

import (
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/channels-dev/channels/taskplane/a2awire"
)

// TestSettleLeavesTheStateAloneOverA2A: the A2A caller settles its finished task by sending to it
// with an outfitter-task/v1 outcome; the task stays COMPLETED and shows the settlement; a
// malformed outcome is invalid params.
func TestSettleLeavesTheStateAloneOverA2A(t *testing.T) {
	e := newEnv(t)
	forEachBinding(t, func(t *testing.T, binding string) {
		c := e.client(binding, tokenAlice)
		task := send(t, c, userMessage("complete"), nil)
		if task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("state %s", task.Status.State)
		}
		settle := func(outcome string) (a2a.SendMessageResult, error) {
			m := userMessage("feedback")
			m.TaskID = task.ID
			return c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m, Metadata: map[string]any{
				a2awire.ExtOutfitterTask: map[string]any{"outcome": outcome, "feedback": "good, a bit long"}}})
		}
		res, err := settle("accepted")
		if err != nil {
			t.Fatal(err)
		}
		got, ok := res.(*a2a.Task)
		if !ok || got.Status.State != a2a.TaskStateCompleted || got.ID != task.ID {
			t.Fatalf("settle answered %+v", res)
		}
		got, err = c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: task.ID})
		if err != nil {
			t.Fatal(err)
		}
		m, _ := got.Metadata[a2awire.ExtOutfitterTask].(map[string]any)
		if got.Status.State != a2a.TaskStateCompleted || m["outcome"] != "accepted" || m["feedback"] != "good, a bit long" {
			t.Fatalf("after settle: %s %v", got.Status.State, got.Metadata)
		}
		if len(got.History) != len(task.History) {
			t.Fatalf("settle added history: %d → %d messages", len(task.History), len(got.History))
		}
		if _, err := settle("Not A Token"); err == nil {
			t.Fatal("a malformed outcome was accepted")
		}
	})
}
