package a2ahttp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/google/uuid"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2ahttp"
	"github.com/channels-dev/channels/taskplane/a2awire"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// testExec is the agent of these tests. Its behaviour is chosen by the text of the task's first
// user message:
//
//	complete  WORKING, artifact "a1" ("result"), COMPLETED with "done"
//	steps     WORKING "step 1", WORKING "step 2", artifact, COMPLETED
//	input     INPUT_REQUIRED with a question (and an elicitation schema); a follow-up completes
//	auth      AUTH_REQUIRED; a follow-up completes
//	gate      WORKING, waits for release(), artifact, COMPLETED
//	progress  WORKING, waits for release(), WORKING "transient progress", artifact, INPUT_REQUIRED;
//	          a follow-up completes
//	hold      WORKING, waits for its turn to be canceled, then tries to add an artifact
//	anything else: COMPLETED
//
// A message whose text is "direct" is answered directly, with no task.
type testExec struct {
	mu        sync.Mutex
	gates     map[string]chan struct{}
	afterHold chan error // the result of hold's artifact attempt after cancel
	canceled  atomic.Int32
	direct    atomic.Int32 // RespondDirectly calls
}

func newTestExec() *testExec {
	return &testExec{gates: map[string]chan struct{}{}, afterHold: make(chan error, 16)}
}

func (e *testExec) gate(taskID string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.gates[taskID]
	if g == nil {
		g = make(chan struct{})
		e.gates[taskID] = g
	}
	return g
}

// release lets a "gate" task finish.
func (e *testExec) release(taskID string) { close(e.gate(taskID)) }

func text(s string) taskplane.Part { return taskplane.TextPart(s) }

func agentMsg(s string) *taskplane.Message {
	return &taskplane.Message{ID: uuid.NewString(), Role: taskplane.RoleAgent, Parts: []taskplane.Part{text(s)}}
}

func userTexts(t *taskplane.Task) []string {
	var out []string
	for _, m := range t.History {
		if m.Role == taskplane.RoleUser && len(m.Parts) > 0 {
			out = append(out, m.Parts[0].Text)
		}
	}
	return out
}

func (e *testExec) RespondDirectly(_ context.Context, _ string, msg taskplane.Message) (*taskplane.Message, bool) {
	e.direct.Add(1)
	if len(msg.Parts) == 1 && msg.Parts[0].Text == "direct" {
		return agentMsg("direct reply"), true
	}
	return nil, false
}

func (e *testExec) Cancel(context.Context, *taskplane.Task) error {
	e.canceled.Add(1)
	return nil
}

func (e *testExec) Execute(ctx context.Context, turn *taskplane.Turn) error {
	texts := userTexts(turn.Task)
	if len(texts) == 0 {
		return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted})
	}
	if len(texts) > 1 {
		return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted, Message: agentMsg("thanks: " + texts[len(texts)-1])})
	}
	artifact := taskplane.AddArtifact{Artifact: taskplane.Artifact{ID: "a1", Name: "out", Parts: []taskplane.Part{text("result")}}}
	switch texts[0] {
	case "complete":
		if err := turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateWorking}); err != nil {
			return err
		}
		if err := turn.Update(ctx, artifact); err != nil {
			return err
		}
		return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted, Message: agentMsg("done")})
	case "steps":
		for _, c := range []taskplane.Change{
			taskplane.SetStatus{State: taskplane.StateWorking, Message: agentMsg("step 1")},
			taskplane.SetStatus{State: taskplane.StateWorking, Message: agentMsg("step 2")},
			artifact,
			taskplane.SetStatus{State: taskplane.StateCompleted, Message: agentMsg("done")},
		} {
			if err := turn.Update(ctx, c); err != nil {
				return err
			}
		}
		return nil
	case "input":
		q := agentMsg("what is your name?")
		q.Metadata = map[string]any{a2awire.ExtElicitation: map[string]any{
			"requestedSchema": map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}},
		}}
		return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateInputRequired, Message: q})
	case "auth":
		return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateAuthRequired, Message: agentMsg("sign in, please")})
	case "gate":
		if err := turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateWorking, Message: agentMsg("waiting")}); err != nil {
			return err
		}
		select {
		case <-e.gate(turn.Task.ID):
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateWorking, Message: agentMsg("transient progress")}); err != nil {
			return err
		}
		if err := turn.Update(ctx, artifact); err != nil {
			return err
		}
		return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted, Message: agentMsg("done")})
	case "progress":
		if err := turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateWorking, Message: agentMsg("waiting")}); err != nil {
			return err
		}
		select {
		case <-e.gate(turn.Task.ID):
		case <-ctx.Done():
			return ctx.Err()
		}
		for _, c := range []taskplane.Change{
			taskplane.SetStatus{State: taskplane.StateWorking, Message: agentMsg("transient progress")},
			artifact,
			taskplane.SetStatus{State: taskplane.StateInputRequired, Message: agentMsg("anything else?")},
		} {
			if err := turn.Update(ctx, c); err != nil {
				return err
			}
		}
		return nil
	case "hold":
		if err := turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateWorking, Message: agentMsg("holding")}); err != nil {
			return err
		}
		<-ctx.Done()
		// The turn was canceled; a late artifact must be refused.
		err := turn.Update(context.WithoutCancel(ctx), artifact)
		e.afterHold <- err
		return nil
	}
	return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted, Message: agentMsg("ok")})
}

// Credentials of the tests.
const (
	tokenAlice = "alice-token-0123456789"
	tokenBob   = "bob-token-0123456789"
)

type env struct {
	t      *testing.T
	URL    string
	srv    *a2ahttp.Server
	plane  *taskplane.Plane
	exec   *testExec
	store  store.Store
	cancel context.CancelFunc
	ts     *httptest.Server
	done   chan struct{}
}

type envOption func(*a2aConfig)

type a2aConfig = a2ahttp.Config

// newEnv starts a server over a fresh SQLite store.
func newEnv(t *testing.T, opts ...envOption) *env {
	return newEnvOn(t, storetest.OpenSQLite(t), nil, opts...)
}

// newEnvOn starts a server over st with the given plane options.
func newEnvOn(t *testing.T, st store.Store, popts []taskplane.Option, opts ...envOption) *env {
	t.Helper()
	return newEnvExec(t, st, popts, nil, opts...)
}

// newEnvExec starts a server whose agent is x (nil: the testExec).
func newEnvExec(t *testing.T, st store.Store, popts []taskplane.Option, x taskplane.Executor, opts ...envOption) *env {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, URL: "http://" + l.Addr().String(), exec: newTestExec(), store: st, done: make(chan struct{})}
	e.plane = taskplane.New(st, popts...)
	if x == nil {
		x = e.exec
	}
	disp := &taskplane.Dispatcher{Plane: e.plane, Executor: x, Concurrency: 8, Poll: 50 * time.Millisecond}
	cfg := a2ahttp.Config{
		Name: "test agent", Description: "tests", Version: "1.2.3", PublicURL: e.URL,
		Credentials:     []a2ahttp.Credential{{Token: tokenAlice, Principal: "alice"}, {Token: tokenBob, Principal: "bob"}},
		BlockingTimeout: 10 * time.Second,
		KeepAlive:       time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	e.srv, err = a2ahttp.NewServer(e.plane, disp, x, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		defer close(e.done)
		_ = disp.Run(ctx)
	}()
	e.ts = &httptest.Server{Listener: l, Config: &http.Server{Handler: e.srv}}
	e.ts.Start()
	t.Cleanup(e.stop)
	return e
}

func (e *env) stop() {
	select {
	case <-e.done:
		return
	default:
	}
	e.srv.Close()
	e.ts.CloseClientConnections()
	e.ts.Close()
	e.cancel()
	<-e.done
}

var bindings = []string{a2awire.BindingHTTPJSON, a2awire.BindingJSONRPC}

func bindingName(b string) string {
	if b == a2awire.BindingJSONRPC {
		return "jsonrpc"
	}
	return "rest"
}

// forEachBinding runs fn once per binding.
func forEachBinding(t *testing.T, fn func(t *testing.T, binding string)) {
	for _, b := range bindings {
		t.Run(bindingName(b), func(t *testing.T) { fn(t, b) })
	}
}

// headerRT adds headers to every request.
type headerRT struct {
	h    http.Header
	base http.RoundTripper
}

func (rt headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, vs := range rt.h {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	return rt.base.RoundTrip(r)
}

func httpClient(token string, extra http.Header) *http.Client {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	for k, vs := range extra {
		h[k] = vs
	}
	return &http.Client{Transport: headerRT{h: h, base: http.DefaultTransport}}
}

// client returns an a2a-go v2.4.0 client of the binding, authenticated with token.
func (e *env) client(binding, token string, opts ...a2aclient.FactoryOption) *a2aclient.Client {
	e.t.Helper()
	return e.clientWith(binding, httpClient(token, nil), opts...)
}

func (e *env) clientWith(binding string, hc *http.Client, opts ...a2aclient.FactoryOption) *a2aclient.Client {
	e.t.Helper()
	iface := &a2a.AgentInterface{URL: e.URL, ProtocolBinding: a2a.TransportProtocolHTTPJSON, ProtocolVersion: "1.0"}
	if binding == a2awire.BindingJSONRPC {
		iface = &a2a.AgentInterface{URL: e.URL + "/jsonrpc", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: "1.0"}
	}
	opts = append([]a2aclient.FactoryOption{a2aclient.WithRESTTransport(hc), a2aclient.WithJSONRPCTransport(hc)}, opts...)
	c, err := a2aclient.NewFromEndpoints(context.Background(), []*a2a.AgentInterface{iface}, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func userMessage(textContent string) *a2a.Message {
	m := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(textContent))
	return m
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// send sends a blocking message and returns the Task.
func send(t *testing.T, c *a2aclient.Client, m *a2a.Message, cfg *a2a.SendMessageConfig) *a2a.Task {
	t.Helper()
	res, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m, Config: cfg})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("SendMessage returned %T, want *a2a.Task", res)
	}
	return task
}

func intp(n int) *int { return &n }

// waitState polls GetTask until the task reaches state.
func waitState(t *testing.T, c *a2aclient.Client, id a2a.TaskID, state a2a.TaskState) *a2a.Task {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		task, err := c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: id})
		if err != nil {
			t.Fatalf("GetTask: %v", err)
		}
		if task.Status.State == state {
			return task
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %s, want %s", id, task.Status.State, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitHeld waits until the test executor holds the task WORKING with its own status message:
// the dispatcher's WORKING at the start of a turn carries none, and an event the executor writes
// after it would otherwise race the test.
func waitHeld(t *testing.T, c *a2aclient.Client, id a2a.TaskID) *a2a.Task {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		task := waitState(t, c, id, a2a.TaskStateWorking)
		if task.Status.Message != nil {
			return task
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is WORKING without the executor's message", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// raw performs an HTTP request and returns status, headers and body.
func (e *env) raw(method, path, token string, body []byte, headers map[string]string) (int, http.Header, []byte) {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxT(e.t), method, e.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range headers {
		switch {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// rpc performs one JSON-RPC call and returns the decoded response.
func (e *env) rpc(token, method string, params any, headers map[string]string) rpcResponse {
	e.t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	status, _, body := e.raw(http.MethodPost, "/jsonrpc", token, b, headers)
	if status != http.StatusOK {
		e.t.Fatalf("jsonrpc %s: HTTP %d: %s", method, status, body)
	}
	var r rpcResponse
	if err := json.Unmarshal(body, &r); err != nil {
		e.t.Fatalf("jsonrpc %s: %v: %s", method, err, body)
	}
	return r
}

type rpcResponse struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int              `json:"code"`
		Message string           `json:"message"`
		Data    []map[string]any `json:"data"`
	} `json:"error"`
}

func (r rpcResponse) reason() string {
	if r.Error == nil {
		return ""
	}
	for _, d := range r.Error.Data {
		if d["@type"] == a2awire.ErrorInfoType {
			s, _ := d["reason"].(string)
			return s
		}
	}
	return ""
}

// restError decodes an AIP-193 error body: HTTP code, status and ErrorInfo reason.
func restError(t *testing.T, body []byte) (int, string, string) {
	t.Helper()
	var env struct {
		Error struct {
			Code    int              `json:"code"`
			Status  string           `json:"status"`
			Details []map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatalf("error body: %v: %s", err, body)
	}
	reason := ""
	for _, d := range env.Error.Details {
		if d["@type"] == a2awire.ErrorInfoType && d["domain"] == a2awire.Domain {
			reason, _ = d["reason"].(string)
		}
	}
	return env.Error.Code, env.Error.Status, reason
}

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	ID    string
	Event string
	Data  string
}

// sseStream reads events from an open text/event-stream response.
type sseStream struct {
	resp *http.Response
	sc   *bufio.Scanner
}

// openSSE opens a stream with a raw HTTP request.
func (e *env) openSSE(ctx context.Context, method, path, token string, body []byte, headers map[string]string) (*sseStream, int, []byte) {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, resp.StatusCode, b
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	return &sseStream{resp: resp, sc: sc}, resp.StatusCode, nil
}

// next returns the next event, skipping comments; ok is false at the end of the stream.
func (s *sseStream) next() (sseEvent, bool) {
	var ev sseEvent
	seen := false
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if seen {
				return ev, true
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			ev.ID, seen = strings.TrimPrefix(line, "id: "), true
		case strings.HasPrefix(line, "event: "):
			ev.Event, seen = strings.TrimPrefix(line, "event: "), true
		case strings.HasPrefix(line, "data: "):
			ev.Data, seen = strings.TrimPrefix(line, "data: "), true
		}
	}
	return ev, false
}

// all reads events until the stream ends.
func (s *sseStream) all() []sseEvent {
	var out []sseEvent
	for {
		ev, ok := s.next()
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

func (s *sseStream) close() { s.resp.Body.Close() }

// kind returns the member name of a REST StreamResponse ("task", "statusUpdate", …) and, for a
// status update, its state.
func kind(t *testing.T, data string) (string, string) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		t.Fatalf("stream data: %v: %s", err, data)
	}
	if r, ok := m["result"]; ok { // JSON-RPC
		m = nil
		if err := json.Unmarshal(r, &m); err != nil {
			t.Fatalf("stream result: %v", err)
		}
	}
	for k, v := range m {
		switch k {
		case "statusUpdate":
			var su struct {
				Status struct{ State string } `json:"status"`
			}
			_ = json.Unmarshal(v, &su)
			return k, su.Status.State
		case "task":
			var tk struct {
				Status struct{ State string } `json:"status"`
			}
			_ = json.Unmarshal(v, &tk)
			return k, tk.Status.State
		case "artifactUpdate", "message", "error":
			return k, ""
		}
	}
	return "", ""
}

func sendBody(t *testing.T, msg map[string]any, cfg map[string]any) []byte {
	t.Helper()
	req := map[string]any{"message": msg}
	if cfg != nil {
		req["configuration"] = cfg
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wireMsg(id, textContent string) map[string]any {
	return map[string]any{"messageId": id, "role": "ROLE_USER", "parts": []any{map[string]any{"text": textContent}}}
}

func seq(t *testing.T, id string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		t.Fatalf("SSE id %q is not a sequence", id)
	}
	return n
}

// activate is an a2a-go interceptor that activates extensions (A2A-Extensions) on every call.
type activate []string

func (a activate) Before(ctx context.Context, req *a2aclient.Request) (context.Context, any, error) {
	req.ServiceParams[a2a.SvcParamExtensions] = append(req.ServiceParams[a2a.SvcParamExtensions], a...)
	return ctx, nil, nil
}

func (activate) After(context.Context, *a2aclient.Response) error { return nil }

// outfitterClient is a client of e that activates outfitter-task/v1.
func (e *env) outfitterClient(binding, token string) *a2aclient.Client {
	e.t.Helper()
	return e.client(binding, token, a2aclient.WithCallInterceptors(activate{a2awire.ExtOutfitterTask}))
}
