package interop_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/errordetails"
)

// headerRT adds fixed headers to every request.
type headerRT struct {
	h    http.Header
	base http.RoundTripper
}

func (rt headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, vs := range rt.h {
		r.Header[k] = vs
	}
	return rt.base.RoundTrip(r)
}

// httpClient sends token as a bearer token, plus the extra headers.
func httpClient(token string, extra ...string) *http.Client {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		h.Set(extra[i], extra[i+1])
	}
	return &http.Client{Transport: headerRT{h: h, base: http.DefaultTransport}}
}

// goClient resolves the server's public agent card and returns an a2a-go v2.4.0 client of the
// one binding asked for (only that transport is registered, so the card's other interface
// cannot be chosen).
func goClient(t *testing.T, s *server, binding a2a.TransportProtocol, hc *http.Client, opts ...a2aclient.FactoryOption) *a2aclient.Client {
	t.Helper()
	card, err := agentcard.NewResolver(http.DefaultClient).Resolve(ctxT(t), s.URL)
	if err != nil {
		t.Fatalf("resolve agent card: %v", err)
	}
	transport := a2aclient.WithRESTTransport(hc)
	if binding == a2a.TransportProtocolJSONRPC {
		transport = a2aclient.WithJSONRPCTransport(hc)
	}
	opts = append([]a2aclient.FactoryOption{a2aclient.WithDefaultsDisabled(), transport}, opts...)
	c, err := a2aclient.NewFromCard(ctxT(t), card, opts...)
	if err != nil {
		t.Fatalf("client from card: %v", err)
	}
	return c
}

// msg is a user message whose messageId selects the conformance agent's scenario: prefix, a
// random suffix, and the binding.
func msg(t *testing.T, prefix string, binding a2a.TransportProtocol) *a2a.Message {
	m := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("interop "+prefix))
	m.ID = prefix + "-" + randomHex(t, 4) + "-" + strings.ToLower(strings.ReplaceAll(string(binding), "+", ""))
	return m
}

// sendTask sends m (blocking unless cfg says otherwise) and returns the Task.
func sendTask(t *testing.T, c *a2aclient.Client, m *a2a.Message, cfg *a2a.SendMessageConfig) *a2a.Task {
	t.Helper()
	res, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m, Config: cfg})
	if err != nil {
		t.Fatalf("SendMessage %s: %v", m.ID, err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("SendMessage %s returned %T, want a Task", m.ID, res)
	}
	return task
}

// waitState polls GetTask until the task is in state.
func waitState(t *testing.T, c *a2aclient.Client, id a2a.TaskID, state a2a.TaskState) *a2a.Task {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		task, err := c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: id})
		if err != nil {
			t.Fatalf("GetTask %s: %v", id, err)
		}
		if task.Status.State == state {
			return task
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %s after 20 s, want %s", id, task.Status.State, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// statusText is the text of the first part of a task's status message.
func statusText(task *a2a.Task) string {
	if task.Status.Message == nil || len(task.Status.Message.Parts) == 0 {
		return ""
	}
	return task.Status.Message.Parts[0].Text()
}

// eventKinds names the events of a stream: task, message, status:<STATE>, artifact.
func eventKinds(evs []a2a.Event) []string {
	var out []string
	for _, ev := range evs {
		switch ev := ev.(type) {
		case *a2a.Task:
			out = append(out, "task")
		case *a2a.Message:
			out = append(out, "message")
		case *a2a.TaskStatusUpdateEvent:
			out = append(out, "status:"+string(ev.Status.State))
		case *a2a.TaskArtifactUpdateEvent:
			out = append(out, "artifact")
		default:
			out = append(out, "?")
		}
	}
	return out
}

// collect reads a stream to its end; it fails the test on an error.
func collect(t *testing.T, seq func(func(a2a.Event, error) bool)) []a2a.Event {
	t.Helper()
	var evs []a2a.Event
	for ev, err := range seq {
		if err != nil {
			t.Fatalf("stream after %v: %v", eventKinds(evs), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// firstErr returns the first error of a stream (nil if it yields an event first).
func firstErr(seq func(func(a2a.Event, error) bool)) error {
	for _, err := range seq {
		return err
	}
	return nil
}

// versionOverride is an a2a-go interceptor that sends another A2A-Version.
type versionOverride string

func (v versionOverride) Before(ctx context.Context, req *a2aclient.Request) (context.Context, any, error) {
	req.ServiceParams[a2a.SvcParamVersion] = []string{string(v)}
	return ctx, nil, nil
}

func (versionOverride) After(context.Context, *a2aclient.Response) error { return nil }

var goBindings = []a2a.TransportProtocol{a2a.TransportProtocolHTTPJSON, a2a.TransportProtocolJSONRPC}

// TestA2AGoAgainstServe drives a real "channels serve" (conformance executor, two principals)
// with the a2a-go v2.4.0 client over both bindings, on SQLite and on Postgres, then stops it
// with SIGTERM while a blocking send and a stream are open, and restarts it on the same store.
func TestA2AGoAgainstServe(t *testing.T) {
	forEachStore(t, func(t *testing.T, storeURL string) {
		creds := credentialsFile(t)
		s := startServer(t, storeURL, creds)
		t.Run("bindings", func(t *testing.T) {
			for _, b := range goBindings {
				t.Run(string(b), func(t *testing.T) {
					t.Parallel()
					interopSuite(t, s, b)
				})
			}
		})
		if t.Failed() {
			return
		}
		t.Run("SIGTERMDrains", func(t *testing.T) { sigtermDrains(t, s, creds) })
	})
}

// interopSuite is the representative subset of the A2A surface, over one binding.
func interopSuite(t *testing.T, s *server, b a2a.TransportProtocol) {
	c := goClient(t, s, b, httpClient(tokenAlice))

	t.Run("SendBlocking", func(t *testing.T) {
		task := sendTask(t, c, msg(t, "tck-complete-task", b), nil)
		if task.Status.State != a2a.TaskStateCompleted || statusText(task) != "Hello from TCK" {
			t.Fatalf("task %s %q, want COMPLETED \"Hello from TCK\"", task.Status.State, statusText(task))
		}
		if task.ContextID == "" || task.Status.Timestamp == nil || len(task.History) == 0 {
			t.Fatalf("task lacks contextId, timestamp or history: %+v", task)
		}
	})

	t.Run("DirectMessage", func(t *testing.T) {
		res, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: msg(t, "tck-message-response", b)})
		if err != nil {
			t.Fatal(err)
		}
		m, ok := res.(*a2a.Message)
		if !ok || m.Role != a2a.MessageRoleAgent || len(m.Parts) != 1 || m.Parts[0].Text() != "Direct message response" {
			t.Fatalf("result %T %+v, want the direct agent message", res, res)
		}
	})

	t.Run("SendReturnImmediately", func(t *testing.T) {
		// test-resubscribe-message-id stays WORKING about 4 s: a call that waited would see it done.
		begun := time.Now()
		task := sendTask(t, c, msg(t, "test-resubscribe-message-id", b), &a2a.SendMessageConfig{ReturnImmediately: true})
		if task.Status.State != a2a.TaskStateSubmitted && task.Status.State != a2a.TaskStateWorking {
			t.Fatalf("state %s, want SUBMITTED or WORKING", task.Status.State)
		}
		if d := time.Since(begun); d > 3*time.Second {
			t.Fatalf("returnImmediately took %s", d)
		}
	})

	t.Run("GetTask", func(t *testing.T) {
		task := sendTask(t, c, msg(t, "tck-artifact-text", b), nil)
		got, err := c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: task.ID, HistoryLength: new(0)})
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != task.ID || got.Status.State != a2a.TaskStateCompleted || got.History != nil {
			t.Fatalf("historyLength 0: %s %s, %d history", got.ID, got.Status.State, len(got.History))
		}
		if len(got.Artifacts) != 1 || len(got.Artifacts[0].Parts) != 1 || got.Artifacts[0].Parts[0].Text() != "Generated text content" {
			t.Fatalf("artifacts %+v", got.Artifacts)
		}
		got, err = c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: task.ID, HistoryLength: new(1)})
		if err != nil || len(got.History) != 1 {
			t.Fatalf("historyLength 1: %v, %d messages", err, len(got.History))
		}
	})

	t.Run("ListTasks", func(t *testing.T) {
		first := sendTask(t, c, msg(t, "tck-artifact-text", b), nil)
		for _, p := range []string{"tck-complete-task", "tck-input-required"} {
			m := msg(t, p, b)
			m.ContextID = first.ContextID
			sendTask(t, c, m, nil)
		}
		page1, err := c.ListTasks(ctxT(t), &a2a.ListTasksRequest{ContextID: first.ContextID, PageSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		if page1.TotalSize != 3 || len(page1.Tasks) != 2 || page1.PageSize != 2 || page1.NextPageToken == "" {
			t.Fatalf("page 1: total %d, %d tasks, size %d, token %q", page1.TotalSize, len(page1.Tasks), page1.PageSize, page1.NextPageToken)
		}
		if page1.Tasks[0].Status.State != a2a.TaskStateInputRequired {
			t.Fatalf("newest task is %s, want the INPUT_REQUIRED one", page1.Tasks[0].Status.State)
		}
		for _, tk := range page1.Tasks {
			if tk.Artifacts != nil {
				t.Fatal("artifacts without includeArtifacts")
			}
		}
		page2, err := c.ListTasks(ctxT(t), &a2a.ListTasksRequest{ContextID: first.ContextID, PageSize: 2, PageToken: page1.NextPageToken, IncludeArtifacts: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(page2.Tasks) != 1 || page2.NextPageToken != "" || page2.Tasks[0].ID != first.ID || len(page2.Tasks[0].Artifacts) != 1 {
			t.Fatalf("page 2: %d tasks, token %q", len(page2.Tasks), page2.NextPageToken)
		}
		byState, err := c.ListTasks(ctxT(t), &a2a.ListTasksRequest{ContextID: first.ContextID, Status: a2a.TaskStateCompleted})
		if err != nil || byState.TotalSize != 2 {
			t.Fatalf("status filter: %v %+v", err, byState)
		}
		if _, err := c.ListTasks(ctxT(t), &a2a.ListTasksRequest{PageSize: 101}); !errors.Is(err, a2a.ErrInvalidParams) {
			t.Fatalf("pageSize 101: %v, want InvalidParams", err)
		}
	})

	t.Run("Cancel", func(t *testing.T) {
		task := sendTask(t, c, msg(t, "tck-input-required", b), nil)
		if task.Status.State != a2a.TaskStateInputRequired {
			t.Fatalf("state %s, want INPUT_REQUIRED", task.Status.State)
		}
		got, err := c.CancelTask(ctxT(t), &a2a.CancelTaskRequest{ID: task.ID})
		if err != nil || got.Status.State != a2a.TaskStateCanceled {
			t.Fatalf("cancel: %v %+v", err, got)
		}
		// Cancel is idempotent: a second cancel returns the canceled task as it is.
		again, err := c.CancelTask(ctxT(t), &a2a.CancelTaskRequest{ID: task.ID})
		if err != nil || again.Status.State != a2a.TaskStateCanceled || !again.Status.Timestamp.Equal(*got.Status.Timestamp) {
			t.Fatalf("second cancel: %v %+v, want the task as the first cancel left it", err, again)
		}
		done := sendTask(t, c, msg(t, "tck-complete-task", b), nil)
		if _, err := c.CancelTask(ctxT(t), &a2a.CancelTaskRequest{ID: done.ID}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
			t.Fatalf("cancel of a completed task: %v, want TaskNotCancelable", err)
		}
		// A message to a terminal task is refused.
		m := msg(t, "follow-up", b)
		m.TaskID = done.ID
		if _, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m}); !errors.Is(err, a2a.ErrUnsupportedOperation) {
			t.Fatalf("message to a completed task: %v, want UnsupportedOperation", err)
		}
	})

	t.Run("Stream", func(t *testing.T) {
		evs := collect(t, c.SendStreamingMessage(ctxT(t), &a2a.SendMessageRequest{Message: msg(t, "tck-stream-001", b)}))
		want := "task status:TASK_STATE_WORKING artifact status:TASK_STATE_COMPLETED"
		if got := strings.Join(eventKinds(evs), " "); got != want {
			t.Fatalf("stream %s, want %s", got, want)
		}
		if au := evs[2].(*a2a.TaskArtifactUpdateEvent); au.Artifact.Parts[0].Text() != "Stream hello from TCK" {
			t.Fatalf("artifact %+v", au.Artifact)
		}
		evs = collect(t, c.SendStreamingMessage(ctxT(t), &a2a.SendMessageRequest{Message: msg(t, "tck-message-response", b)}))
		if got := strings.Join(eventKinds(evs), " "); got != "message" {
			t.Fatalf("direct reply stream %s, want one message", got)
		}
	})

	t.Run("SubscribeAndResume", func(t *testing.T) {
		task := sendTask(t, c, msg(t, "test-resubscribe-message-id", b), &a2a.SendMessageConfig{ReturnImmediately: true})
		waitState(t, c, task.ID, a2a.TaskStateWorking)
		// A plain subscription: the Task first; the client goes away after it.
		ctx, cancel := context.WithCancel(ctxT(t))
		for ev, err := range c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}) {
			if err != nil {
				t.Fatal(err)
			}
			if tk, ok := ev.(*a2a.Task); !ok || tk.ID != task.ID || tk.Status.State != a2a.TaskStateWorking {
				t.Fatalf("first event %T %+v, want the WORKING Task", ev, ev)
			}
			break
		}
		cancel()
		// Reconnect with Last-Event-ID (the id of that snapshot): no snapshot, every later event
		// once, the stream closing at COMPLETED.
		last := firstEventID(t, s.URL, tokenAlice, string(task.ID))
		resumer := goClient(t, s, b, httpClient(tokenAlice, "Last-Event-ID", last))
		evs := collect(t, resumer.SubscribeToTask(ctxT(t), &a2a.SubscribeToTaskRequest{ID: task.ID}))
		if got := strings.Join(eventKinds(evs), " "); got != "status:TASK_STATE_COMPLETED" {
			t.Fatalf("resumed after %s: %s, want the COMPLETED status alone", last, got)
		}
		// The whole log replayed from the start, after the task ended: each event once, in order.
		replayer := goClient(t, s, b, httpClient(tokenAlice, "Last-Event-ID", "0"))
		evs = collect(t, replayer.SubscribeToTask(ctxT(t), &a2a.SubscribeToTaskRequest{ID: task.ID}))
		if got := strings.Join(eventKinds(evs), " "); !strings.HasSuffix(got, "status:TASK_STATE_WORKING status:TASK_STATE_COMPLETED") ||
			strings.Count(got, "COMPLETED") != 1 || strings.Count(got, "WORKING") != 1 {
			t.Fatalf("replay from 0: %s", got)
		}
		// Without Last-Event-ID, a terminal task cannot be subscribed to.
		if err := firstErr(c.SubscribeToTask(ctxT(t), &a2a.SubscribeToTaskRequest{ID: task.ID})); !errors.Is(err, a2a.ErrUnsupportedOperation) {
			t.Fatalf("subscribe to a completed task: %v, want UnsupportedOperation", err)
		}
	})

	t.Run("IdempotentResend", func(t *testing.T) {
		m := msg(t, "tck-complete-task", b)
		first := sendTask(t, c, m, nil)
		again := sendTask(t, c, m, nil)
		if again.ID != first.ID {
			t.Fatalf("resend made task %s, the first was %s", again.ID, first.ID)
		}
		list, err := c.ListTasks(ctxT(t), &a2a.ListTasksRequest{ContextID: first.ContextID})
		if err != nil || list.TotalSize != 1 {
			t.Fatalf("context holds %d tasks (%v), want 1", list.TotalSize, err)
		}
	})

	t.Run("Conflict", func(t *testing.T) {
		m := msg(t, "tck-complete-task", b)
		sendTask(t, c, m, nil)
		other := *m
		other.Parts = a2a.ContentParts{a2a.NewTextPart("another payload")}
		_, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: &other})
		var ae *a2a.Error
		if !errors.As(err, &ae) || !strings.Contains(ae.Message, "messageId") {
			t.Fatalf("reused messageId with another payload: %T %v, want an A2A error naming the messageId", err, err)
		}
		// a2a-go v2.4.0 keeps only the reasons it knows: DUPLICATE_MESSAGE_ID arrives as an
		// internal error over REST (HTTP 409) and as invalid params over JSON-RPC (-32602).
		// The reason itself is checked on the wire below.
		if b == a2a.TransportProtocolJSONRPC && !errors.Is(err, a2a.ErrInvalidParams) {
			t.Fatalf("JSON-RPC conflict: %v, want InvalidParams", err)
		}
		body := `{"message":{"messageId":"` + m.ID + `","role":"ROLE_USER","parts":[{"text":"a third payload"}]}}`
		status, reason := rawError(t, s.URL+"/message:send", tokenAlice, body)
		if status != http.StatusConflict || reason != "DUPLICATE_MESSAGE_ID" {
			t.Fatalf("REST conflict on the wire: HTTP %d reason %q, want 409 DUPLICATE_MESSAGE_ID", status, reason)
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		if _, err := c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: "no-such-task"}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("GetTask: %v, want TaskNotFound", err)
		}
		if _, err := c.CancelTask(ctxT(t), &a2a.CancelTaskRequest{ID: "no-such-task"}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("CancelTask: %v, want TaskNotFound", err)
		}
		if err := firstErr(c.SubscribeToTask(ctxT(t), &a2a.SubscribeToTaskRequest{ID: "no-such-task"})); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("SubscribeToTask: %v, want TaskNotFound", err)
		}
	})

	t.Run("BadVersion", func(t *testing.T) {
		bad := goClient(t, s, b, httpClient(tokenAlice), a2aclient.WithCallInterceptors(versionOverride("99.0")))
		if _, err := bad.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: "x"}); !errors.Is(err, a2a.ErrVersionNotSupported) {
			t.Fatalf("A2A-Version 99.0: %v, want VersionNotSupported", err)
		}
	})

	t.Run("PrincipalsIsolated", func(t *testing.T) {
		bob := goClient(t, s, b, httpClient(tokenBob))
		task := sendTask(t, c, msg(t, "tck-input-required", b), nil)
		if _, err := bob.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("bob GetTask: %v, want TaskNotFound", err)
		}
		if _, err := bob.CancelTask(ctxT(t), &a2a.CancelTaskRequest{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("bob CancelTask: %v, want TaskNotFound", err)
		}
		if err := firstErr(bob.SubscribeToTask(ctxT(t), &a2a.SubscribeToTaskRequest{ID: task.ID})); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("bob SubscribeToTask: %v, want TaskNotFound", err)
		}
		m := msg(t, "hijack", b)
		m.TaskID = task.ID
		if _, err := bob.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("bob continues alice's task: %v, want TaskNotFound", err)
		}
		list, err := bob.ListTasks(ctxT(t), &a2a.ListTasksRequest{ContextID: task.ContextID})
		if err != nil || list.TotalSize != 0 {
			t.Fatalf("bob lists alice's context: %v, %d tasks", err, list.TotalSize)
		}
		got, err := c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: task.ID})
		if err != nil || got.Status.State != a2a.TaskStateInputRequired {
			t.Fatalf("alice's task after bob: %v %+v", err, got)
		}
		// An unknown token is refused outright.
		if _, err := goClient(t, s, b, httpClient("not-a-token")).GetTask(ctxT(t), &a2a.GetTaskRequest{ID: task.ID}); err == nil {
			t.Fatal("an unknown token was accepted")
		}
	})

	t.Run("ExtendedCard", func(t *testing.T) {
		card, err := c.GetExtendedAgentCard(ctxT(t), &a2a.GetExtendedAgentCardRequest{})
		if err != nil || card.Name == "" || len(card.SupportedInterfaces) != 2 {
			t.Fatalf("extended card: %v %+v", err, card)
		}
	})
}

// rawError POSTs a JSON body as token and returns the HTTP status and the ErrorInfo reason of
// the AIP-193 error body ("" if there is none).
func rawError(t *testing.T, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env struct {
		Error struct {
			Details []map[string]any `json:"details"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&env)
	for _, d := range env.Error.Details {
		if d["@type"] == errordetails.ErrorInfoType {
			r, _ := d["reason"].(string)
			return resp.StatusCode, r
		}
	}
	return resp.StatusCode, ""
}

// sigtermDrains stops s with SIGTERM while a blocking send waits on a task and a stream is open:
// the send is answered, the stream ends without an error, the process exits 0. A new process on
// the same store then serves both tasks and finishes them.
func sigtermDrains(t *testing.T, s *server, creds string) {
	c := goClient(t, s, a2a.TransportProtocolHTTPJSON, httpClient(tokenAlice))
	rpc := goClient(t, s, a2a.TransportProtocolJSONRPC, httpClient(tokenAlice))

	type sendResult struct {
		task *a2a.Task
		err  error
	}
	sent := make(chan sendResult, 1)
	before := time.Now().Add(-time.Second) // status timestamps are the server's clock, in ms
	blocking := msg(t, "test-resubscribe-message-id", a2a.TransportProtocolHTTPJSON)
	go func() {
		res, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: blocking})
		task, _ := res.(*a2a.Task)
		sent <- sendResult{task, err}
	}()

	type streamResult struct {
		events []a2a.Event
		err    error
	}
	firstEvent := make(chan struct{})
	streamed := make(chan streamResult, 1)
	go func() {
		var r streamResult
		m := msg(t, "test-resubscribe-message-id", a2a.TransportProtocolJSONRPC)
		for ev, err := range rpc.SendStreamingMessage(ctxT(t), &a2a.SendMessageRequest{Message: m}) {
			if err != nil {
				r.err = err
				break
			}
			r.events = append(r.events, ev)
			if len(r.events) == 1 {
				close(firstEvent)
			}
		}
		streamed <- r
	}()

	// Both requests are in flight: the stream delivered its Task, and the blocking send's task
	// is WORKING (the only tasks that turned WORKING since before are these two).
	select {
	case <-firstEvent:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream delivered no first event")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		list, err := c.ListTasks(ctxT(t), &a2a.ListTasksRequest{Status: a2a.TaskStateWorking, StatusTimestampAfter: &before})
		if err != nil {
			t.Fatal(err)
		}
		if list.TotalSize == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d WORKING tasks, want the blocking send's and the stream's", list.TotalSize)
		}
		time.Sleep(20 * time.Millisecond)
	}

	began := time.Now()
	if code := s.sigterm(); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM:\n%s", code, s.stderr.String())
	}
	if d := time.Since(began); d > 15*time.Second {
		t.Fatalf("shutdown took %s", d)
	}
	if s.logLine("stopped") == nil {
		t.Fatalf("no \"stopped\" log line:\n%s", s.stderr.String())
	}
	var blockingTask *a2a.Task
	select {
	case r := <-sent:
		if r.err != nil || r.task == nil {
			t.Fatalf("in-flight blocking send: %v", r.err)
		}
		blockingTask = r.task
	case <-time.After(10 * time.Second):
		t.Fatal("the in-flight blocking send was not answered")
	}
	var streamTask *a2a.Task
	select {
	case r := <-streamed:
		if r.err != nil {
			t.Fatalf("stream ended with an error after %v: %v", eventKinds(r.events), r.err)
		}
		streamTask, _ = r.events[0].(*a2a.Task)
	case <-time.After(10 * time.Second):
		t.Fatal("the open stream was not closed")
	}
	if streamTask == nil {
		t.Fatal("the stream's first event was not the Task")
	}

	// A new process on the same store knows both tasks and finishes the interrupted turns.
	s2 := startServer(t, s.Store, creds)
	c2 := goClient(t, s2, a2a.TransportProtocolHTTPJSON, httpClient(tokenAlice))
	waitState(t, c2, blockingTask.ID, a2a.TaskStateCompleted)
	waitState(t, c2, streamTask.ID, a2a.TaskStateCompleted)
	if code := s2.sigterm(); code != 0 {
		t.Fatalf("second serve exited %d:\n%s", code, s2.stderr.String())
	}
}
