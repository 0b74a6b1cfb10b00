package a2aagent_test

import (
	"context"
	"iter"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// progressAgent asks a question; on the answer it first publishes a progress artifact, then
// completes.
type progressAgent struct{ cancels }

func (progressAgent) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		if ec.StoredTask == nil {
			if yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
				yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateInputRequired, agentMsg(ec, "which branch?")), nil)
			}
			return
		}
		progress := a2a.NewArtifactUpdateEvent(ec, "log", a2a.NewTextPart("deploying "+text(ec.Message)))
		progress.Append = false
		if !yield(progress, nil) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, agentMsg(ec, "deployed "+text(ec.Message))), nil)
	}
}

// A polled agent answered: the snapshot the follow-up's send returns may still show the question
// it just answered (INPUT_REQUIRED until the agent moves on). That is not a new question.
func TestAnAnsweredQuestionIsNotAskedAgain(t *testing.T) {
	srv := serveJSONRPCAgent(t, "progress", a2asrv.NewHandler(progressAgent{}), false)

	ch := startChannels(t, storetest.OpenSQLite(t), srv.URL)
	task := ch.send(t, "m-deploy", "deploy", "")
	task = ch.await(t, task.ID, "the question", inState(taskplane.StateInputRequired))
	ch.send(t, "m-main", "main", task.ID)
	deadline := time.Now().Add(15 * time.Second) // the agent completes 300 ms after the answer
	for time.Now().Before(deadline) {
		task, _ = ch.plane.GetTask(context.Background(), "alice", task.ID)
		if task.Status.State == taskplane.StateCompleted {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	questions := 0
	for _, m := range task.History {
		if m.Role == taskplane.RoleAgent {
			questions++
		}
	}
	t.Fatalf("after the answer our task is %s %q with %d agent messages in history; the agent completed \"deployed main\"",
		task.Status.State, statusText(task), questions)
}
