package a2aagent_test

import (
	"context"
	"iter"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/executor/a2aagent"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// countingAgent counts the downstream tasks created (sends that start a new task).
type countingAgent struct {
	*agent
	created atomic.Int32
}

func (c *countingAgent) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	if ec.StoredTask == nil {
		c.created.Add(1)
	}
	return c.agent.Execute(ctx, ec)
}

// TestAStoreBlipWhileRecordingTheDownstreamTaskDoesNotSendTwice: the store failing the write of
// the downstream task's link offers the turn again; the downstream task is settled (recorded once
// the store is back, or canceled), so the offered-again turn does not send the message a second
// time and start a second downstream task.
func TestAStoreBlipWhileRecordingTheDownstreamTaskDoesNotSendTwice(t *testing.T) {
	ca := &countingAgent{agent: &agent{}}
	handler := a2asrv.NewHandler(ca)
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	card := &a2a.AgentCard{Name: "test agent", Description: "scripted", Version: "1.0.0",
		SupportedInterfaces: []*a2a.AgentInterface{a2a.NewAgentInterface(srv.URL+"/rpc", a2a.TransportProtocolJSONRPC)},
		Capabilities:        a2a.AgentCapabilities{Streaming: true},
		DefaultInputModes:   []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"}}
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(handler))

	exec, err := a2aagent.New(a2aagent.Config{AgentURL: srv.URL, AllowPrivate: true, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	blip := storetest.NewBlip(t, storetest.OpenSQLite(t), "(*turnState).see")
	p := taskplane.New(blip, taskplane.WithReofferDelay(10*time.Millisecond))
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 2, Poll: 20 * time.Millisecond, RetryBackoff: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	ch := &channels{plane: p, exec: exec, disp: d}
	task := ch.send(t, "m-hello", "hello", "")
	task = ch.await(t, task.ID, "completion", inState(taskplane.StateCompleted))
	if n := ca.created.Load(); n != 1 {
		t.Fatalf("the agent was sent our message %d times and started %d downstream tasks (ours links %q); want one: a store blip must not make the re-offered turn send again",
			n, n, downstreamID(task))
	}
}
