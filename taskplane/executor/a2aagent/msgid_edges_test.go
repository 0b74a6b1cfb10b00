package a2aagent_test

import (
	"context"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// secretAgent answers each task with a result only that task's requester should see.
type secretAgent struct{ cancels }

func (secretAgent) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		if ec.StoredTask == nil && !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, agentMsg(ec, "private answer of task "+string(ec.TaskID))), nil)
	}
}

// dedupingHandler is an agent that uses messageId to detect duplicate sends, as A2A allows
// ("Agents MAY use messageId to detect duplicate sends", SPEC §3.3.1) and as Channels itself
// does: a send repeating a messageId answers with the task the first one made.
type dedupingHandler struct {
	a2asrv.RequestHandler
	mu   sync.Mutex
	seen map[string]a2a.TaskID
}

func (h *dedupingHandler) SendMessage(ctx context.Context, req *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	h.mu.Lock()
	prior, dup := h.seen[req.Message.ID]
	h.mu.Unlock()
	if dup {
		return h.RequestHandler.GetTask(ctx, &a2a.GetTaskRequest{ID: prior})
	}
	res, err := h.RequestHandler.SendMessage(ctx, req)
	if t, ok := res.(*a2a.Task); ok && err == nil {
		h.mu.Lock()
		h.seen[req.Message.ID] = t.ID
		h.mu.Unlock()
	}
	return res, err
}

// Two principals of Channels whose clients happen to pick the same messageId (A2A leaves it to
// each client; Channels deduplicates per principal) must not end up sharing one downstream task:
// Channels is the one client of the agent, so the messageIds it sends must be its own.
func TestTwoPrincipalsNeverShareADownstreamTaskByMessageID(t *testing.T) {
	h := &dedupingHandler{RequestHandler: a2asrv.NewHandler(secretAgent{}), seen: map[string]a2a.TaskID{}}
	srv := serveJSONRPCAgent(t, "dedup", h, false)

	ch := startChannels(t, storetest.OpenSQLite(t), srv.URL)
	accept := func(principal string) string {
		acc, err := ch.plane.Accept(context.Background(), taskplane.Event{Principal: principal, Source: taskplane.SourceA2A,
			Identity: "msg-1", Message: taskplane.Message{ID: "msg-1", Role: taskplane.RoleUser,
				Parts: []taskplane.Part{taskplane.TextPart("what is my balance?")}}})
		if err != nil {
			t.Fatal(err)
		}
		return acc.Task.ID
	}
	done := func(principal, id string) *taskplane.Task {
		for i := 0; i < 500; i++ {
			task, err := ch.plane.GetTask(context.Background(), principal, id)
			if err != nil {
				t.Fatal(err)
			}
			if task.Status.State.Terminal() {
				return task
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("task %s of %s never finished", id, principal)
		return nil
	}
	alice := done("alice", accept("alice"))
	bob := done("bob", accept("bob"))
	if downstreamID(alice) == downstreamID(bob) {
		t.Fatalf("bob's task is linked to alice's downstream task %s and answered %q (alice's was %q)",
			downstreamID(bob), statusText(bob), statusText(alice))
	}
}
