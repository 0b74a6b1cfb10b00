package a2aagent_test

import (
	"context"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// slowAgent answers "slow" only once released, and anything else at once, always with a
// downstream task that completes with "answer to <text>".
type slowAgent struct {
	cancels
	mu      sync.Mutex
	release chan struct{}
	got     []string // texts of the messages it received
}

func (a *slowAgent) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		a.mu.Lock()
		a.got = append(a.got, text(ec.Message))
		a.mu.Unlock()
		if ec.StoredTask == nil && !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		if text(ec.Message) == "slow" {
			if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, agentMsg(ec, "working on it")), nil) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-a.release:
			}
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, agentMsg(ec, "answer to "+text(ec.Message))), nil)
	}
}

func startSlowAgent(t *testing.T) (*slowAgent, *httptest.Server) {
	t.Helper()
	ag := &slowAgent{release: make(chan struct{})}
	return ag, serveJSONRPCAgent(t, "slow agent", a2asrv.NewHandler(ag), true)
}

// cancels is the Cancel of a scripted agent with nothing of its own to stop: the task is CANCELED.
type cancels struct{}

func (cancels) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// serveJSONRPCAgent serves handler as an agent over JSON-RPC on 127.0.0.1, its card declaring
// streaming or not (not: Channels sends with returnImmediately and polls), until t ends.
func serveJSONRPCAgent(t *testing.T, name string, handler a2asrv.RequestHandler, streaming bool) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	card := &a2a.AgentCard{Name: name, Description: "scripted", Version: "1.0.0",
		SupportedInterfaces: []*a2a.AgentInterface{a2a.NewAgentInterface(srv.URL+"/rpc", a2a.TransportProtocolJSONRPC)},
		Capabilities:        a2a.AgentCapabilities{Streaming: streaming},
		DefaultInputModes:   []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"}}
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(handler))
	return srv
}

// The downstream agent finished the task our turn sent it — its answer to the first message is
// in the COMPLETED status — when a follow-up arrived for our task. The plane refuses our turn's
// completion (ErrUnseenMessage); the agent's answer is kept in our task's history, and the next
// turn sends only the follow-up, so the caller sees both answers.
func TestARefusedRemoteCompletionKeepsTheAgentsAnswer(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ag, srv := startSlowAgent(t)
		ch := startChannels(t, open(t), srv.URL)
		task := ch.send(t, "m-slow", "slow", "")
		ch.await(t, task.ID, "the downstream task", func(x *taskplane.Task) bool {
			return downstreamID(x) != "" && statusText(x) == "working on it"
		})
		ch.send(t, "m-more", "more", task.ID) // the follow-up, mid-turn
		close(ag.release)
		got := ch.await(t, task.ID, "completion", inState(taskplane.StateCompleted))
		var answers []string
		for _, m := range got.History {
			if m.Role == taskplane.RoleAgent && len(m.Parts) > 0 {
				answers = append(answers, m.Parts[0].Text)
			}
		}
		ag.mu.Lock()
		received := append([]string(nil), ag.got...)
		ag.mu.Unlock()
		if !strings.Contains(strings.Join(answers, "|"), "answer to slow") {
			t.Fatalf("the agent answered %q (it received %q), but our task's agent messages are %q and it ended %q: "+
				"the answer to the first message was dropped with the refused completion",
				"answer to slow", received, answers, statusText(got))
		}
	})
}
