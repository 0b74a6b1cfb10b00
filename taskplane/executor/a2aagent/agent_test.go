package a2aagent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/channels-dev/channels/internal/safebuf"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/executor/a2aagent"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

const agentToken = "downstream-secret-token"

// agent is a real a2a-go v2.4.0 agent (a2asrv) with a few scripted behaviours, chosen by the text
// of the message that creates its task:
//
//	hello → WORKING "thinking", an artifact in two chunks (the second appended), COMPLETED "done: hello"
//	ask   → INPUT_REQUIRED "what is your name?"; the follow-up completes "nice to meet you, <answer>"
//	wait  → WORKING until canceled
//	fail  → FAILED "quota exceeded"
type agent struct {
	mu        sync.Mutex
	followUps []a2a.TaskID // downstream tasks that received a follow-up
	canceled  []a2a.TaskID
	release   map[a2a.TaskID]chan struct{}
	tokens    []string // Authorization headers seen on A2A calls
}

func text(m *a2a.Message) string {
	for _, p := range m.Parts {
		if t, ok := p.Content.(a2a.Text); ok {
			return string(t)
		}
	}
	return ""
}

func agentMsg(ec *a2asrv.ExecutorContext, s string) *a2a.Message {
	return a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart(s))
}

func (a *agent) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		if ec.StoredTask != nil && ec.StoredTask.Status.State == a2a.TaskStateInputRequired {
			a.mu.Lock()
			a.followUps = append(a.followUps, ec.TaskID)
			a.mu.Unlock()
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, agentMsg(ec, "nice to meet you, "+text(ec.Message))), nil)
			return
		}
		if ec.StoredTask == nil && !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		switch text(ec.Message) {
		case "hello":
			if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, agentMsg(ec, "thinking")), nil) {
				return
			}
			first := a2a.NewArtifactUpdateEvent(ec, "report", a2a.NewTextPart("part one, "))
			first.Append = false // NewArtifactUpdateEvent appends by default; the first chunk creates it
			if !yield(first, nil) {
				return
			}
			second := a2a.NewArtifactUpdateEvent(ec, "report", a2a.NewTextPart("part two"))
			second.Append, second.LastChunk = true, true
			if !yield(second, nil) {
				return
			}
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, agentMsg(ec, "done: hello")), nil)
		case "ask":
			q := agentMsg(ec, "what is your name?")
			q.Metadata = map[string]any{taskplane.ExtElicitation: map[string]any{"requestedSchema": map[string]any{"type": "object"}}}
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateInputRequired, q), nil)
		case "wait":
			if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, agentMsg(ec, "waiting")), nil) {
				return
			}
			select {
			case <-ctx.Done():
			case <-a.releaseOf(ec.TaskID):
			}
		case "fail":
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateFailed, agentMsg(ec, "quota exceeded")), nil)
		default:
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, agentMsg(ec, "unknown: "+text(ec.Message))), nil)
		}
	}
}

func (a *agent) releaseOf(id a2a.TaskID) chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.release == nil {
		a.release = map[a2a.TaskID]chan struct{}{}
	}
	if a.release[id] == nil {
		a.release[id] = make(chan struct{})
	}
	return a.release[id]
}

func (a *agent) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	a.mu.Lock()
	a.canceled = append(a.canceled, ec.TaskID)
	a.mu.Unlock()
	close(a.releaseOf(ec.TaskID))
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// startAgent serves the agent over one binding; streaming says what its card declares.
func startAgent(t *testing.T, binding a2a.TransportProtocol, streaming bool) (*agent, *httptest.Server) {
	t.Helper()
	ag := &agent{}
	handler := a2asrv.NewHandler(ag)
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	iface := a2a.NewAgentInterface(srv.URL+"/rpc", a2a.TransportProtocolJSONRPC)
	if binding == a2a.TransportProtocolHTTPJSON {
		iface = a2a.NewAgentInterface(srv.URL+"/rest", a2a.TransportProtocolHTTPJSON)
	}
	card := &a2a.AgentCard{Name: "test agent", Description: "scripted", Version: "1.0.0",
		SupportedInterfaces: []*a2a.AgentInterface{iface}, Capabilities: a2a.AgentCapabilities{Streaming: streaming},
		DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"}}
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	auth := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ag.mu.Lock()
			ag.tokens = append(ag.tokens, r.Header.Get("Authorization"))
			ag.mu.Unlock()
			if r.Header.Get("Authorization") != "Bearer "+agentToken {
				http.Error(w, "unauthenticated", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	mux.Handle("/rpc", auth(a2asrv.NewJSONRPCHandler(handler)))
	mux.Handle("/rest/", auth(http.StripPrefix("/rest", a2asrv.NewRESTHandler(handler))))
	return ag, srv
}

// channels is a Plane and a Dispatcher running the a2a executor.
type channels struct {
	plane *taskplane.Plane
	exec  *a2aagent.Executor
	disp  *taskplane.Dispatcher
}

func startChannels(t *testing.T, s store.Store, agentURL string) *channels {
	t.Helper()
	return startChannelsWith(t, s, a2aagent.Config{AgentURL: agentURL, Token: agentToken, AllowPrivate: true,
		PollInterval: 20 * time.Millisecond})
}

func startChannelsWith(t *testing.T, s store.Store, cfg a2aagent.Config) *channels {
	t.Helper()
	exec, err := a2aagent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := taskplane.New(s)
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 4, Poll: 20 * time.Millisecond, RetryBackoff: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &channels{plane: p, exec: exec, disp: d}
}

func (c *channels) send(t *testing.T, id, msg, taskID string) *taskplane.Task {
	t.Helper()
	acc, err := c.plane.Accept(context.Background(), taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A,
		Identity: id, TaskID: taskID, Message: taskplane.Message{ID: id, Role: taskplane.RoleUser,
			Parts: []taskplane.Part{taskplane.TextPart(msg)}}})
	if err != nil {
		t.Fatalf("accept %s: %v", id, err)
	}
	return acc.Task
}

// await waits until the task satisfies cond.
func (c *channels) await(t *testing.T, id, what string, cond func(*taskplane.Task) bool) *taskplane.Task {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		task, err := c.plane.GetTask(context.Background(), "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		if cond(task) {
			return task
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; task is %s %+v", what, task.Status.State, task.Status.Message)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func inState(s taskplane.State) func(*taskplane.Task) bool {
	return func(t *taskplane.Task) bool { return t.Status.State == s }
}

func statusText(t *taskplane.Task) string {
	if t.Status.Message == nil || len(t.Status.Message.Parts) == 0 {
		return ""
	}
	return t.Status.Message.Parts[0].Text
}

func downstreamID(t *taskplane.Task) string {
	m, _ := t.Metadata[a2aagent.MetaRemote].(map[string]any)
	id, _ := m["taskId"].(string)
	return id
}

// TestA2AExecutorAgainstA2AGoAgent drives a real a2a-go v2.4.0 agent through Channels over both
// bindings, streaming and not, on both store drivers: the mapped stream, an INPUT_REQUIRED round
// trip continued through Channels, a downstream failure, and a cancel.
func TestA2AExecutorAgainstA2AGoAgent(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		for _, c := range []struct {
			name      string
			binding   a2a.TransportProtocol
			streaming bool
		}{
			{"jsonrpc-streaming", a2a.TransportProtocolJSONRPC, true},
			{"rest-streaming", a2a.TransportProtocolHTTPJSON, true},
			{"jsonrpc-blocking", a2a.TransportProtocolJSONRPC, false},
			{"rest-blocking", a2a.TransportProtocolHTTPJSON, false},
		} {
			t.Run(c.name, func(t *testing.T) {
				ag, srv := startAgent(t, c.binding, c.streaming)
				ch := startChannels(t, open(t), srv.URL)
				testStream(t, ch, c.streaming)
				testInputRequiredRoundTrip(t, ch, ag)
				testDownstreamFailure(t, ch)
				testCancel(t, ch, ag, srv)
				ag.mu.Lock()
				defer ag.mu.Unlock()
				for _, h := range ag.tokens {
					if h != "Bearer "+agentToken {
						t.Fatalf("a call reached the agent with Authorization %q", h)
					}
				}
			})
		}
	})
}

func testStream(t *testing.T, ch *channels, streaming bool) {
	task := ch.send(t, "m-hello", "hello", "")
	task = ch.await(t, task.ID, "completion", inState(taskplane.StateCompleted))
	if statusText(task) != "done: hello" || downstreamID(task) == "" {
		t.Fatalf("completed with %q, downstream %q", statusText(task), downstreamID(task))
	}
	if len(task.Artifacts) != 1 || task.Artifacts[0].ID != "report" || len(task.Artifacts[0].Parts) != 2 ||
		task.Artifacts[0].Parts[0].Text+task.Artifacts[0].Parts[1].Text != "part one, part two" {
		t.Fatalf("artifacts %+v, want the two appended chunks of one artifact", task.Artifacts)
	}
	if streaming {
		// The agent's progress message came through as our WORKING status.
		evs, err := ch.plane.Events(context.Background(), "alice", task.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var seen bool
		for _, ev := range evs {
			if ev.Kind == taskplane.EventStatus && ev.Status.Status.State == taskplane.StateWorking &&
				ev.Status.Status.Message != nil && ev.Status.Status.Message.Parts[0].Text == "thinking" {
				seen = true
			}
		}
		if !seen {
			t.Fatal("the agent's WORKING message was not mapped")
		}
	}
}

func testInputRequiredRoundTrip(t *testing.T, ch *channels, ag *agent) {
	task := ch.send(t, "m-ask", "ask", "")
	task = ch.await(t, task.ID, "the question", inState(taskplane.StateInputRequired))
	if statusText(task) != "what is your name?" {
		t.Fatalf("question %q", statusText(task))
	}
	if _, ok := task.Status.Message.Metadata[taskplane.ExtElicitation]; !ok {
		t.Fatal("the question lost the agent's requestedSchema")
	}
	downstream := downstreamID(task)
	// The person answers through Channels (an A2A continuation of our task).
	ch.send(t, "m-answer", "Ada", task.ID)
	task = ch.await(t, task.ID, "completion after the answer", inState(taskplane.StateCompleted))
	if statusText(task) != "nice to meet you, Ada" {
		t.Fatalf("answer %q", statusText(task))
	}
	ag.mu.Lock()
	defer ag.mu.Unlock()
	if len(ag.followUps) == 0 || string(ag.followUps[len(ag.followUps)-1]) != downstream {
		t.Fatalf("follow-ups went to %v, want the downstream task %s", ag.followUps, downstream)
	}
}

func testDownstreamFailure(t *testing.T, ch *channels) {
	task := ch.send(t, "m-fail", "fail", "")
	task = ch.await(t, task.ID, "failure", inState(taskplane.StateFailed))
	if statusText(task) != "quota exceeded" || task.Status.Message.Metadata[taskplane.MetaReason] != "agent-failed" {
		t.Fatalf("failure %q %v", statusText(task), task.Status.Message.Metadata)
	}
}

func testCancel(t *testing.T, ch *channels, ag *agent, srv *httptest.Server) {
	task := ch.send(t, "m-wait", "wait", "")
	task = ch.await(t, task.ID, "the downstream task to start", func(t *taskplane.Task) bool { return downstreamID(t) != "" })
	downstream := downstreamID(task)
	// What the A2A bindings do on CancelTask: cancel, stop the turn, tell the executor.
	canceled, _, err := ch.plane.Cancel(context.Background(), "alice", task.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch.disp.CancelTurn(task.ID)
	if err := ch.exec.Cancel(context.Background(), canceled); err != nil {
		t.Fatalf("executor cancel: %v", err)
	}
	ag.mu.Lock()
	got := ag.canceled
	ag.mu.Unlock()
	if len(got) == 0 || string(got[len(got)-1]) != downstream {
		t.Fatalf("downstream cancels %v, want %s", got, downstream)
	}
	// The downstream task is CANCELED too, as an independent client sees it.
	client, err := a2aclient.NewFromEndpoints(context.Background(), []*a2a.AgentInterface{
		a2a.NewAgentInterface(srv.URL+"/rpc", a2a.TransportProtocolJSONRPC)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := a2aclient.AttachServiceParams(context.Background(), a2aclient.ServiceParams{"authorization": {"Bearer " + agentToken}})
	dt, err := client.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(downstream)})
	if err != nil {
		t.Fatal(err)
	}
	if dt.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("downstream task %s, want CANCELED", dt.Status.State)
	}
	ch.await(t, task.ID, "our task to stay canceled", inState(taskplane.StateCanceled))
}

// refusedAddr is an address where nothing listens: a connection is refused. A port taken from a
// listener and closed again could be another test's by the time it is dialed (tests of other
// packages run beside these); port 1 is privileged, and no test listens on it.
const refusedAddr = "127.0.0.1:1"

func TestA2AExecutorTransportFailureIsRetriedThenFails(t *testing.T) {
	ch := startChannels(t, storetest.OpenSQLite(t), "http://"+refusedAddr)
	task := ch.send(t, "m-1", "hello", "")
	task = ch.await(t, task.ID, "failure", inState(taskplane.StateFailed))
	if r := task.Status.Message.Metadata[taskplane.MetaReason]; r != taskplane.ReasonTransport {
		t.Fatalf("reason %v, want %s (%q)", r, taskplane.ReasonTransport, statusText(task))
	}
}

// The agent URL may carry a key in its path or query: a failure to reach the agent names it by
// its origin only, in the task the end user reads, in the operator's evidence, in the log and in
// the link kept in metadata.
func TestAgentURLSecretsReachNoTaskEvidenceOrLog(t *testing.T) {
	var logs safebuf.Buffer // nothing listens at refusedAddr: connection refused, a transport failure
	exec, err := a2aagent.New(a2aagent.Config{AgentURL: "http://" + refusedAddr + "/agents/s3cr3t-path?api_key=s3cr3t-key",
		AllowPrivate: true, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s := storetest.OpenSQLite(t)
	p := taskplane.New(s, taskplane.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 1, Poll: 20 * time.Millisecond, RetryBackoff: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	ch := &channels{plane: p, exec: exec, disp: d}

	task := ch.send(t, "m-1", "hello", "")
	task = ch.await(t, task.ID, "failure", inState(taskplane.StateFailed))
	ev, err := s.ListEvidence(context.Background(), store.EvidenceFilter{Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	seen, _ := json.Marshal(map[string]any{"task": task, "evidence": ev})
	for what, text := range map[string]string{"task and evidence": string(seen), "log": logs.String()} {
		if strings.Contains(text, "s3cr3t") {
			t.Errorf("the %s hold the agent URL's secret: %s", what, text)
		}
	}
	if !strings.Contains(string(seen), "http://"+refusedAddr) {
		t.Errorf("the failure does not name the agent by its origin: %s", seen)
	}
}

func TestA2AExecutorSSRFCheck(t *testing.T) {
	for _, u := range []string{"http://agent.example.com", "https://127.0.0.1/", "https://10.1.2.3", "https://[::1]:8443",
		"https://169.254.169.254/latest", "https://100.64.0.1", "ftp://agent.example.com", "https://user:pw@agent.example.com",
		"not a url"} {
		if _, err := a2aagent.New(a2aagent.Config{AgentURL: u}); !errors.Is(err, a2aagent.ErrForbiddenURL) {
			t.Errorf("New(%q): %v, want ErrForbiddenURL", u, err)
		}
	}
	for _, u := range []string{"https://agent.example.com", "https://93.184.216.34/a2a"} {
		if _, err := a2aagent.New(a2aagent.Config{AgentURL: u}); err != nil {
			t.Errorf("New(%q): %v", u, err)
		}
	}
	if _, err := a2aagent.New(a2aagent.Config{AgentURL: "http://127.0.0.1:9", AllowPrivate: true}); err != nil {
		t.Errorf("a private agent, allowed: %v", err)
	}

	// A name that resolves to loopback passes the URL check and is refused when dialed; that is
	// not a transport failure worth retrying: the task fails at once, with the reason.
	ch := startChannelsWith(t, storetest.OpenSQLite(t), a2aagent.Config{AgentURL: "https://localhost:1"})
	task := ch.send(t, "m-ssrf", "hello", "")
	task = ch.await(t, task.ID, "failure", inState(taskplane.StateFailed))
	if r := task.Status.Message.Metadata[taskplane.MetaReason]; r != taskplane.ReasonExecutor || !strings.Contains(statusText(task), "SSRF") {
		t.Fatalf("failure %q (reason %v), want the SSRF refusal", statusText(task), r)
	}
}

// The executor connects to public addresses, and to private ones only when the operator allows
// private agents — never to cloud metadata or reserved addresses, nor to IPv6 forms that embed a
// private IPv4 address (6to4, NAT64, IPv4-translated).
func TestAllowedAddress(t *testing.T) {
	for _, c := range []struct {
		addr                string
		public, withPrivate bool
	}{
		{"93.184.216.34", true, true}, {"2606:2800:220:1::1", true, true},
		{"127.0.0.1", false, true}, {"10.0.0.1", false, true}, {"172.16.0.1", false, true}, {"192.168.1.1", false, true},
		{"100.64.0.1", false, true}, {"::1", false, true}, {"fe80::1", false, true}, {"fc00::1", false, true},
		{"::ffff:127.0.0.1", false, true}, {"2002:7f00:1::1", false, true}, {"::ffff:0:7f00:1", false, true},
		{"0.0.0.0", false, true}, {"::", false, true}, {"::ffff:0.0.0.0", false, true},
		{"0.1.2.3", false, false}, {"::ffff:0.9.9.9", false, false},
		{"169.254.169.254", false, false}, {"198.18.0.10", false, false}, {"224.0.0.1", false, false},
		{"64:ff9b::a9fe:a9fe", false, false}, {"192.0.2.1", false, false},
	} {
		a := netip.MustParseAddr(c.addr)
		if got := a2aagent.AllowedAddr(a, false); got != c.public {
			t.Errorf("allowed(%s) = %v, want %v", c.addr, got, c.public)
		}
		if got := a2aagent.AllowedAddr(a, true); got != c.withPrivate {
			t.Errorf("allowed(%s) with private agents = %v, want %v", c.addr, got, c.withPrivate)
		}
	}
}

// A downstream agent that takes a CancelTask and never answers holds nothing up: the turn of the
// task stopped from outside (here by the timeout sweep) ends at once, the cancel is given up
// after the dispatcher's CancelTimeout, and shutdown returns.
func TestADownstreamCancelThatNeverAnswersHoldsUpNothing(t *testing.T) {
	_, srv := startAgent(t, a2a.TransportProtocolJSONRPC, true)
	hang := make(chan struct{})
	defer close(hang)
	inner := srv.Config.Handler
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		if bytes.Contains(b, []byte(`"CancelTask"`)) {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		inner.ServeHTTP(w, r)
	})
	exec, err := a2aagent.New(a2aagent.Config{AgentURL: srv.URL, Token: agentToken, AllowPrivate: true, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := taskplane.New(storetest.OpenSQLite(t))
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 2, Poll: 20 * time.Millisecond,
		Lease: time.Second, CancelTimeout: 300 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	ch := &channels{plane: p, exec: exec, disp: d}
	task := ch.send(t, "m-wait", "wait", "")
	ch.await(t, task.ID, "downstream", func(t *taskplane.Task) bool { return downstreamID(t) != "" })
	// The sweep fails the task once it holds still for a millisecond; an update of the running
	// turn may land between the sweep's listing and its check, so it is tried until it takes.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, err := p.SweepTimeouts(context.Background(), time.Millisecond)
		if err != nil {
			t.Fatalf("sweep: %v", err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the timeout sweep never failed the working task")
		}
	}
	time.Sleep(time.Second) // the heartbeat (every third of the lease) sees the task stopped and tells the agent
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Dispatcher.Run did not return 5 s after shutdown: the heartbeat waits on the downstream CancelTask")
	}
}

// slowFirstWrite delays the first write of a response: the agent has made its task, and the
// event naming it is on its way.
type slowFirstWrite struct {
	http.ResponseWriter
	delayed bool
	arrived chan struct{}
}

func (w *slowFirstWrite) Write(b []byte) (int, error) {
	if !w.delayed {
		w.delayed = true
		close(w.arrived)
		time.Sleep(500 * time.Millisecond)
	}
	return w.ResponseWriter.Write(b)
}

func (w *slowFirstWrite) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// delayFirstEvent makes the agent behind srv answer a streaming send half a second late; arrived
// is closed once the send reached it (the agent has made its task).
func delayFirstEvent(srv *httptest.Server) (arrived chan struct{}) {
	inner := srv.Config.Handler
	arrived = make(chan struct{})
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		if bytes.Contains(b, []byte(`"SendStreamingMessage"`)) {
			inner.ServeHTTP(&slowFirstWrite{ResponseWriter: w, arrived: arrived}, r)
			return
		}
		inner.ServeHTTP(w, r)
	})
	return arrived
}

// A cancel that lands while the first send is in flight (the agent made its task, the event
// naming it has not arrived, so ours records no link and the executor's Cancel has nothing to
// cancel) still reaches the downstream task: the send waits a moment for that event, and cancels
// the task it names.
func TestACancelDuringTheFirstSendCancelsTheDownstreamTask(t *testing.T) {
	ag, srv := startAgent(t, a2a.TransportProtocolJSONRPC, true)
	arrived := delayFirstEvent(srv)
	ch := startChannels(t, storetest.OpenSQLite(t), srv.URL)
	task := ch.send(t, "m-wait", "wait", "")
	<-arrived
	// What the A2A bindings do on CancelTask.
	canceled, _, err := ch.plane.Cancel(context.Background(), "alice", task.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch.disp.CancelTurn(task.ID)
	if err := ch.exec.Cancel(context.Background(), canceled); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ag.mu.Lock()
		n := len(ag.canceled)
		ag.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			final, _ := ch.plane.GetTask(context.Background(), "alice", task.ID)
			t.Fatalf("our task is %s (downstream link %q); the downstream task was never canceled", final.Status.State, downstreamID(final))
		}
	}
}

// A shutdown while the first send is in flight gives the turn back, to resume: the downstream
// task the send made is not canceled but recorded (the send waits a moment for the event naming
// it), so the resumed turn follows it instead of making a second one; and the dispatcher does
// not wait long.
func TestAShutdownDuringTheFirstSendRecordsTheDownstreamTask(t *testing.T) {
	ag, srv := startAgent(t, a2a.TransportProtocolJSONRPC, true)
	arrived := delayFirstEvent(srv)
	exec, err := a2aagent.New(a2aagent.Config{AgentURL: srv.URL, Token: agentToken, AllowPrivate: true, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := taskplane.New(storetest.OpenSQLite(t))
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 2, Poll: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	ch := &channels{plane: p, exec: exec, disp: d}
	task := ch.send(t, "m-wait", "wait", "")
	<-arrived
	cancel() // shutdown
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return 5 s after shutdown")
	}
	final, _ := p.GetTask(context.Background(), "alice", task.ID)
	ag.mu.Lock()
	n := len(ag.canceled)
	ag.mu.Unlock()
	if final.Status.State.Terminal() || n != 0 || downstreamID(final) == "" {
		t.Fatalf("after shutdown our task is %s, links %q, and the agent saw %d cancels; want it unfinished, linked to the downstream task, nothing canceled",
			final.Status.State, downstreamID(final), n)
	}
}

// seeGate holds the first store write made while recording a downstream link (turnState.see)
// until the writer's context ends, as a busy store writer would.
type seeGate struct {
	store.Store
	once sync.Once
	held chan struct{} // closed when the write is held
}

func (g *seeGate) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	buf := make([]byte, 1<<16)
	if strings.Contains(string(buf[:runtime.Stack(buf, false)]), "(*turnState).see") {
		hold := false
		g.once.Do(func() { hold = true })
		if hold {
			close(g.held)
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
			}
		}
	}
	return g.Store.Update(ctx, fn)
}

// The turn ends (a shutdown, a cancel) while the link to the downstream task its first event
// named is being written: that write fails with the turn's context, and the downstream task is
// still recorded (shutdown) or canceled (our task canceled), never left unwatched.
func TestATurnEndingWhileItRecordsTheDownstreamTaskStillSettlesIt(t *testing.T) {
	for _, mode := range []string{"shutdown", "cancel"} {
		t.Run(mode, func(t *testing.T) {
			ag, srv := startAgent(t, a2a.TransportProtocolJSONRPC, true)
			gs := &seeGate{Store: storetest.OpenSQLite(t), held: make(chan struct{})}
			exec, err := a2aagent.New(a2aagent.Config{AgentURL: srv.URL, Token: agentToken, AllowPrivate: true, PollInterval: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			p := taskplane.New(gs)
			d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 2, Poll: 20 * time.Millisecond}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = d.Run(ctx) }()
			task := (&channels{plane: p, exec: exec, disp: d}).send(t, "m-wait", "wait", "")
			<-gs.held
			if mode == "cancel" {
				c, _, err := p.Cancel(context.Background(), "alice", task.ID, nil)
				if err != nil {
					t.Fatal(err)
				}
				d.CancelTurn(task.ID)
				if err := exec.Cancel(context.Background(), c); err != nil {
					t.Fatal(err)
				}
			}
			cancel()
			<-done
			final, _ := p.GetTask(context.Background(), "alice", task.ID)
			ag.mu.Lock()
			n := len(ag.canceled)
			ag.mu.Unlock()
			switch {
			case mode == "shutdown" && (downstreamID(final) == "" || n != 0):
				t.Errorf("after a shutdown our task links %q and the agent saw %d cancels; want the downstream task recorded, not canceled", downstreamID(final), n)
			case mode == "cancel" && n == 0:
				t.Errorf("our task is %s, links %q, and the downstream task was never canceled", final.Status.State, downstreamID(final))
			}
		})
	}
}

// TestATurnEndedBeforeItsSendSendsNothing: a turn whose context ended before it sent (a cancel
// remembered for a turn granted but not yet started, a shutdown) makes no call to the downstream
// agent: the send outlives the turn only once it has gone out.
func TestATurnEndedBeforeItsSendSendsNothing(t *testing.T) {
	ag, srv := startAgent(t, a2a.TransportProtocolJSONRPC, true)
	exec, err := a2aagent.New(a2aagent.Config{AgentURL: srv.URL, Token: agentToken, AllowPrivate: true, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := taskplane.New(storetest.OpenSQLite(t))
	turnOf := func(id, msg string) (*taskplane.Turn, string) {
		acc, err := p.Accept(context.Background(), taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A,
			Identity: id, Message: taskplane.Message{ID: id, Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart(msg)}}})
		if err != nil {
			t.Fatal(err)
		}
		g, err := p.ClaimTurn(context.Background(), taskplane.ClaimRequest{Owner: "o-" + id, Lease: time.Minute})
		if err != nil || g == nil {
			t.Fatalf("claim: %v %v", g, err)
		}
		return p.NewTurn(g), acc.Task.ID
	}
	// One task first, so the agent's card and client are in hand and the next turn goes
	// straight to its send.
	warm, _ := turnOf("m-warm", "hello")
	if err := exec.Execute(context.Background(), warm); err != nil {
		t.Fatal(err)
	}
	calls := func() int {
		ag.mu.Lock()
		defer ag.mu.Unlock()
		return len(ag.tokens)
	}
	turn, id := turnOf("m-late", "wait")
	if _, _, err := p.Cancel(context.Background(), "alice", id, nil); err != nil {
		t.Fatal(err)
	}
	before := calls()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := exec.Execute(ctx, turn); !errors.Is(err, context.Canceled) {
		t.Errorf("Execute on an ended turn: %v, want context.Canceled", err)
	}
	time.Sleep(200 * time.Millisecond) // a send that went out would have reached the agent by now
	if n := calls() - before; n != 0 {
		t.Fatalf("a turn whose context had ended made %d calls to the downstream agent, want none", n)
	}
}
