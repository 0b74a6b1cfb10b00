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

// replacingAgent publishes an artifact, then replaces it (append=false, same id: A2A's
// "replace"), then completes.
type replacingAgent struct{ cancels }

func (replacingAgent) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		if ec.StoredTask == nil && !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		draft := a2a.NewArtifactUpdateEvent(ec, "answer", a2a.NewTextPart("draft"))
		draft.Append = false
		if !yield(draft, nil) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(400 * time.Millisecond): // our poller sees the draft
		}
		final := a2a.NewArtifactUpdateEvent(ec, "answer", a2a.NewTextPart("final"))
		final.Append, final.LastChunk = false, true
		if !yield(final, nil) {
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, agentMsg(ec, "done")), nil)
	}
}

// A non-streaming agent is polled; an artifact it replaces (same id, same number of parts, new
// content) must reach our task as the agent has it when the task completes.
func TestAPolledAgentsReplacedArtifactIsNotKeptStale(t *testing.T) {
	srv := serveJSONRPCAgent(t, "replacing", a2asrv.NewHandler(replacingAgent{}), false)

	ch := startChannels(t, storetest.OpenSQLite(t), srv.URL)
	task := ch.send(t, "m-replace", "go", "")
	task = ch.await(t, task.ID, "completion", inState(taskplane.StateCompleted))
	if len(task.Artifacts) != 1 || len(task.Artifacts[0].Parts) != 1 || task.Artifacts[0].Parts[0].Text != "final" {
		t.Fatalf("our task's artifacts %+v, want the agent's artifact \"answer\" as it ended: \"final\"", task.Artifacts)
	}
}
