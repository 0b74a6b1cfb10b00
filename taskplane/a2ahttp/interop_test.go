package a2ahttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/google/go-cmp/cmp"

	"github.com/channels-dev/channels/taskplane/a2awire"
)

// TestInterop drives the server with the independent a2a-go v2.4.0 client over both bindings.
func TestInterop(t *testing.T) {
	e := newEnv(t)
	forEachBinding(t, func(t *testing.T, binding string) {
		c := e.client(binding, tokenAlice)

		t.Run("SendBlocking", func(t *testing.T) {
			task := send(t, c, userMessage("complete"), nil)
			if task.Status.State != a2a.TaskStateCompleted {
				t.Fatalf("state %s, want COMPLETED", task.Status.State)
			}
			if len(task.Artifacts) != 1 || task.Artifacts[0].ID != "a1" {
				t.Fatalf("artifacts %+v, want a1", task.Artifacts)
			}
			if task.ContextID == "" || task.Status.Timestamp == nil {
				t.Fatalf("missing contextId or timestamp: %+v", task)
			}
			if got := len(task.History); got != 2 {
				t.Fatalf("history has %d messages, want 2 (user, agent)", got)
			}
		})

		t.Run("SendReturnImmediately", func(t *testing.T) {
			task := send(t, c, userMessage("complete"), &a2a.SendMessageConfig{ReturnImmediately: true})
			if task.Status.State.Terminal() {
				// The executor may be quick; what matters is that the call did not wait, which a
				// gated task proves below.
				t.Logf("task already %s", task.Status.State)
			}
			gated := send(t, c, userMessage("gate"), &a2a.SendMessageConfig{ReturnImmediately: true})
			if gated.Status.State != a2a.TaskStateSubmitted && gated.Status.State != a2a.TaskStateWorking {
				t.Fatalf("state %s, want SUBMITTED or WORKING", gated.Status.State)
			}
			e.exec.release(string(gated.ID))
			waitState(t, c, gated.ID, a2a.TaskStateCompleted)
		})

		t.Run("GetTaskHistoryLength", func(t *testing.T) {
			task := send(t, c, userMessage("complete"), nil)
			got, err := c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: task.ID, HistoryLength: intp(0)})
			if err != nil {
				t.Fatal(err)
			}
			if got.History != nil {
				t.Fatalf("historyLength 0 returned %d messages", len(got.History))
			}
			got, err = c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: task.ID, HistoryLength: intp(1)})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.History) != 1 || got.History[0].Role != a2a.MessageRoleAgent {
				t.Fatalf("historyLength 1: %+v, want the latest (agent) message", got.History)
			}
			got, err = c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: task.ID})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.History) != 2 || len(got.Artifacts) != 1 {
				t.Fatalf("full task: %d history, %d artifacts", len(got.History), len(got.Artifacts))
			}
		})

		t.Run("ListTasks", func(t *testing.T) {
			// A context of its own: three completed tasks and one waiting for input.
			first := send(t, c, userMessage("complete"), nil)
			ctxID := first.ContextID
			for _, s := range []string{"complete", "complete", "input"} {
				m := userMessage(s)
				m.ContextID = ctxID
				send(t, c, m, nil)
			}
			resp, err := c.ListTasks(ctxT(t), &a2a.ListTasksRequest{ContextID: ctxID, PageSize: 3})
			if err != nil {
				t.Fatal(err)
			}
			if resp.TotalSize != 4 || len(resp.Tasks) != 3 || resp.PageSize != 3 || resp.NextPageToken == "" {
				t.Fatalf("page 1: total %d, %d tasks, size %d, token %q", resp.TotalSize, len(resp.Tasks), resp.PageSize, resp.NextPageToken)
			}
			for i, tk := range resp.Tasks {
				if tk.Artifacts != nil {
					t.Fatalf("task %d carries artifacts without includeArtifacts", i)
				}
				if i > 0 && tk.Status.Timestamp.After(*resp.Tasks[i-1].Status.Timestamp) {
					t.Fatalf("tasks are not sorted newest first")
				}
			}
			if resp.Tasks[0].Status.State != a2a.TaskStateInputRequired {
				t.Fatalf("newest task is %s, want the INPUT_REQUIRED one", resp.Tasks[0].Status.State)
			}
			resp2, err := c.ListTasks(ctxT(t), &a2a.ListTasksRequest{ContextID: ctxID, PageSize: 3, PageToken: resp.NextPageToken, IncludeArtifacts: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp2.Tasks) != 1 || resp2.NextPageToken != "" || resp2.Tasks[0].ID != first.ID {
				t.Fatalf("page 2: %d tasks, token %q", len(resp2.Tasks), resp2.NextPageToken)
			}
			if len(resp2.Tasks[0].Artifacts) != 1 {
				t.Fatalf("includeArtifacts: %d artifacts, want 1", len(resp2.Tasks[0].Artifacts))
			}
			byState, err := c.ListTasks(ctxT(t), &a2a.ListTasksRequest{ContextID: ctxID, Status: a2a.TaskStateInputRequired, HistoryLength: intp(0)})
			if err != nil {
				t.Fatal(err)
			}
			if byState.TotalSize != 1 || byState.Tasks[0].History != nil {
				t.Fatalf("status filter: total %d, history %v", byState.TotalSize, byState.Tasks[0].History)
			}
			after := time.Now().Add(time.Hour)
			none, err := c.ListTasks(ctxT(t), &a2a.ListTasksRequest{ContextID: ctxID, StatusTimestampAfter: &after})
			if err != nil {
				t.Fatal(err)
			}
			if none.TotalSize != 0 || len(none.Tasks) != 0 || none.NextPageToken != "" {
				t.Fatalf("statusTimestampAfter in the future: %+v", none)
			}
			_, err = c.ListTasks(ctxT(t), &a2a.ListTasksRequest{PageSize: 101})
			if !errors.Is(err, a2a.ErrInvalidParams) {
				t.Fatalf("pageSize 101: %v, want invalid params", err)
			}
		})

		t.Run("Cancel", func(t *testing.T) {
			task := send(t, c, userMessage("hold"), &a2a.SendMessageConfig{ReturnImmediately: true})
			waitHeld(t, c, task.ID)
			got, err := c.CancelTask(ctxT(t), &a2a.CancelTaskRequest{ID: task.ID})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.State != a2a.TaskStateCanceled {
				t.Fatalf("cancel returned %s", got.Status.State)
			}
			select {
			case err := <-e.exec.afterHold:
				if err == nil {
					t.Fatal("the canceled turn added an artifact")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the running turn was not stopped by cancel")
			}
			// Cancel is idempotent: the second returns the canceled task as it is.
			again, err := c.CancelTask(ctxT(t), &a2a.CancelTaskRequest{ID: task.ID})
			if err != nil || again.Status.State != a2a.TaskStateCanceled || !again.Status.Timestamp.Equal(*got.Status.Timestamp) {
				t.Fatalf("second cancel: %v %+v, want the task as the first cancel left it", err, again)
			}
		})

		t.Run("NotCancelable", func(t *testing.T) {
			task := send(t, c, userMessage("complete"), nil)
			_, err := c.CancelTask(ctxT(t), &a2a.CancelTaskRequest{ID: task.ID})
			if !errors.Is(err, a2a.ErrTaskNotCancelable) {
				t.Fatalf("cancel of a completed task: %v, want TaskNotCancelable", err)
			}
		})

		t.Run("NotFound", func(t *testing.T) {
			_, err := c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: "no-such-task"})
			if !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Fatalf("GetTask: %v, want TaskNotFound", err)
			}
			_, err = c.CancelTask(ctxT(t), &a2a.CancelTaskRequest{ID: "no-such-task"})
			if !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Fatalf("CancelTask: %v, want TaskNotFound", err)
			}
			m := userMessage("continue")
			m.TaskID = "no-such-task"
			_, err = c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m})
			if !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Fatalf("SendMessage to an unknown task: %v, want TaskNotFound", err)
			}
		})

		t.Run("Stream", func(t *testing.T) {
			var kinds []string
			var states []a2a.TaskState
			for ev, err := range c.SendStreamingMessage(ctxT(t), &a2a.SendMessageRequest{Message: userMessage("steps")}) {
				if err != nil {
					t.Fatal(err)
				}
				switch ev := ev.(type) {
				case *a2a.Task:
					kinds = append(kinds, "task")
					states = append(states, ev.Status.State)
				case *a2a.TaskStatusUpdateEvent:
					kinds = append(kinds, "status")
					states = append(states, ev.Status.State)
				case *a2a.TaskArtifactUpdateEvent:
					kinds = append(kinds, "artifact")
				default:
					t.Fatalf("unexpected event %T", ev)
				}
			}
			// The first status is the wake queue's grant (WORKING), then the executor's steps.
			want := []string{"task", "status", "status", "status", "artifact", "status"}
			if diff := cmp.Diff(want, kinds); diff != "" {
				t.Fatalf("stream events (-want +got):\n%s", diff)
			}
			wantStates := []a2a.TaskState{a2a.TaskStateSubmitted, a2a.TaskStateWorking, a2a.TaskStateWorking,
				a2a.TaskStateWorking, a2a.TaskStateCompleted}
			if diff := cmp.Diff(wantStates, states); diff != "" {
				t.Fatalf("stream states (-want +got):\n%s", diff)
			}
		})

		t.Run("StreamDirectMessage", func(t *testing.T) {
			var got []a2a.Event
			for ev, err := range c.SendStreamingMessage(ctxT(t), &a2a.SendMessageRequest{Message: userMessage("direct")}) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, ev)
			}
			if len(got) != 1 {
				t.Fatalf("%d events, want the single message", len(got))
			}
			if m, ok := got[0].(*a2a.Message); !ok || m.Role != a2a.MessageRoleAgent {
				t.Fatalf("event %T, want an agent message", got[0])
			}
		})

		t.Run("Subscribe", func(t *testing.T) {
			task := send(t, c, userMessage("gate"), &a2a.SendMessageConfig{ReturnImmediately: true})
			waitHeld(t, c, task.ID)
			ctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			events := make(chan a2a.Event, 16)
			errs := make(chan error, 1)
			go func() {
				defer close(events)
				for ev, err := range c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}) {
					if err != nil {
						errs <- err
						return
					}
					events <- ev
				}
			}()
			first := <-events
			if tk, ok := first.(*a2a.Task); !ok || tk.ID != task.ID {
				t.Fatalf("first event %T, want the Task", first)
			}
			e.exec.release(string(task.ID))
			var last a2a.Event
			for ev := range events {
				last = ev
			}
			select {
			case err := <-errs:
				t.Fatal(err)
			default:
			}
			su, ok := last.(*a2a.TaskStatusUpdateEvent)
			if !ok || su.Status.State != a2a.TaskStateCompleted {
				t.Fatalf("last event %#v, want COMPLETED status", last)
			}
			// A terminal task cannot be subscribed to.
			var err error
			for _, err = range c.SubscribeToTask(ctxT(t), &a2a.SubscribeToTaskRequest{ID: task.ID}) {
				break
			}
			if !errors.Is(err, a2a.ErrUnsupportedOperation) {
				t.Fatalf("subscribe to a terminal task: %v, want UnsupportedOperation", err)
			}
		})

		t.Run("IdempotentResend", func(t *testing.T) {
			m := userMessage("complete")
			a := send(t, c, m, nil)
			b := send(t, c, m, nil)
			if a.ID != b.ID {
				t.Fatalf("resend made task %s, first was %s", b.ID, a.ID)
			}
			list, err := c.ListTasks(ctxT(t), &a2a.ListTasksRequest{ContextID: a.ContextID})
			if err != nil {
				t.Fatal(err)
			}
			if list.TotalSize != 1 {
				t.Fatalf("%d tasks in the context, want 1", list.TotalSize)
			}
		})

		t.Run("DuplicateConflict", func(t *testing.T) {
			m := userMessage("complete")
			send(t, c, m, nil)
			m2 := *m
			m2.Parts = a2a.ContentParts{a2a.NewTextPart("something else")}
			_, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: &m2})
			if err == nil {
				t.Fatal("a reused messageId with another payload was accepted")
			}
			var ae *a2a.Error
			if !errors.As(err, &ae) {
				t.Fatalf("error %T %v", err, err)
			}
		})

		t.Run("BadVersion", func(t *testing.T) {
			bad := e.clientWith(binding, httpClient(tokenAlice, nil), a2aclient.WithCallInterceptors(versionOverride("99.0")))
			_, err := bad.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: "x"})
			if !errors.Is(err, a2a.ErrVersionNotSupported) {
				t.Fatalf("A2A-Version 99.0: %v, want VersionNotSupported", err)
			}
		})

		t.Run("PrincipalsIsolated", func(t *testing.T) {
			bob := e.client(binding, tokenBob)
			task := send(t, c, userMessage("input"), nil)
			if _, err := bob.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Fatalf("bob GetTask: %v, want TaskNotFound", err)
			}
			if _, err := bob.CancelTask(ctxT(t), &a2a.CancelTaskRequest{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Fatalf("bob CancelTask: %v, want TaskNotFound", err)
			}
			m := userMessage("hijack")
			m.TaskID = task.ID
			if _, err := bob.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m}); !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Fatalf("bob continues alice's task: %v, want TaskNotFound", err)
			}
			var err error
			for _, err = range bob.SubscribeToTask(ctxT(t), &a2a.SubscribeToTaskRequest{ID: task.ID}) {
				break
			}
			if !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Fatalf("bob subscribes: %v, want TaskNotFound", err)
			}
			list, err := bob.ListTasks(ctxT(t), &a2a.ListTasksRequest{ContextID: task.ContextID})
			if err != nil {
				t.Fatal(err)
			}
			if list.TotalSize != 0 {
				t.Fatalf("bob lists %d of alice's tasks", list.TotalSize)
			}
			// Alice's task is untouched.
			got, err := c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: task.ID})
			if err != nil || got.Status.State != a2a.TaskStateInputRequired || len(got.History) != 2 {
				t.Fatalf("alice's task after bob: %v %+v", err, got)
			}
		})
	})
}

// versionOverride is an a2a-go interceptor that sends another A2A-Version.
type versionOverride string

func (v versionOverride) Before(ctx context.Context, req *a2aclient.Request) (context.Context, any, error) {
	req.ServiceParams[a2a.SvcParamVersion] = []string{string(v)}
	return ctx, nil, nil
}

func (versionOverride) After(context.Context, *a2aclient.Response) error { return nil }

// TestBadContentType sends a non-JSON body with a wrong Content-Type on both bindings.
func TestBadContentType(t *testing.T) {
	e := newEnv(t)
	status, h, body := e.raw(http.MethodPost, "/message:send", tokenAlice, []byte("hello=world"),
		map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if status != http.StatusBadRequest || h.Get("Content-Type") != "application/json" {
		t.Fatalf("REST: %d %s", status, h.Get("Content-Type"))
	}
	if _, _, reason := restError(t, body); reason != "CONTENT_TYPE_NOT_SUPPORTED" {
		t.Fatalf("REST reason %q", reason)
	}
	status, _, body = e.raw(http.MethodPost, "/jsonrpc", tokenAlice, []byte("hello=world"),
		map[string]string{"Content-Type": "text/plain"})
	var r rpcResponse
	if err := json.Unmarshal(body, &r); err != nil || status != http.StatusOK {
		t.Fatalf("JSON-RPC: %d %s", status, body)
	}
	if r.Error == nil || r.Error.Code != -32005 || r.reason() != "CONTENT_TYPE_NOT_SUPPORTED" {
		t.Fatalf("JSON-RPC error %+v", r.Error)
	}
	if string(r.ID) != "null" {
		t.Fatalf("JSON-RPC id of an unreadable request: %s, want null", r.ID)
	}
	// A request refused before parsing gets its id back when the body has one: under a wrong
	// Content-Type, and when nested too deep.
	deep := `{"jsonrpc":"2.0","id":"keep-me","method":"GetTask","params":{"id":"x","metadata":` +
		strings.Repeat(`{"a":`, 60) + `1` + strings.Repeat(`}`, 60) + `}}`
	for _, tc := range []struct{ body, ctype string }{
		{`{"jsonrpc":"2.0","id":"keep-me","method":"GetTask","params":{"id":"x"}}`, "text/plain"},
		{deep, "application/json"},
	} {
		_, _, body = e.raw(http.MethodPost, "/jsonrpc", tokenAlice, []byte(tc.body), map[string]string{"Content-Type": tc.ctype})
		var r rpcResponse
		if err := json.Unmarshal(body, &r); err != nil || r.Error == nil || string(r.ID) != `"keep-me"` {
			t.Fatalf("refused %s request: %s, want an error with id \"keep-me\"", tc.ctype, body)
		}
	}
	// application/a2a+json is accepted.
	status, _, body = e.raw(http.MethodPost, "/message:send", tokenAlice, sendBody(t, wireMsg("ct-1", "complete"), nil),
		map[string]string{"Content-Type": "application/a2a+json; charset=utf-8"})
	if status != http.StatusOK {
		t.Fatalf("application/a2a+json: %d %s", status, body)
	}
}

// contentTypeRT sends every request with Content-Type ct, whatever the client set.
type contentTypeRT struct {
	ct   string
	base http.RoundTripper
}

func (rt contentTypeRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Content-Type", rt.ct)
	return rt.base.RoundTrip(r)
}

// nested is a map n levels deep.
func nested(n int) map[string]any {
	m := map[string]any{"leaf": 1}
	for range n {
		m = map[string]any{"x": m}
	}
	return m
}

// TestAJSONRPCStreamingSendRefusedBeforeParsingGivesTheClientItsError: a streaming send that the
// JSON-RPC binding refuses before it parses the request — a body over MaxBodyBytes, nesting past
// the depth bound, a wrong Content-Type — reaches the a2a-go client, which reads a streaming
// method's errors only from the stream, as that error and not as an empty stream; nothing is
// accepted. The error is one event under the request's id; a non-streaming method keeps its plain
// JSON-RPC error even when the request accepts text/event-stream.
func TestAJSONRPCStreamingSendRefusedBeforeParsingGivesTheClientItsError(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) { c.Limits.MaxTextBytes = 4 << 20 })
	for _, tc := range []struct {
		name        string
		msg         *a2a.Message
		contentType string
		want        error
	}{
		{"body over MaxBodyBytes", userMessage(strings.Repeat("x", 2<<20)), "", a2a.ErrInvalidParams},
		{"nested past the depth bound", a2a.NewMessage(a2a.MessageRoleUser, a2a.NewDataPart(nested(45))), "", a2a.ErrInvalidParams},
		{"wrong Content-Type", userMessage("complete"), "text/plain", a2a.ErrUnsupportedContentType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := httpClient(tokenAlice, nil)
			if tc.contentType != "" {
				hc.Transport = contentTypeRT{ct: tc.contentType, base: hc.Transport}
			}
			c := e.clientWith(a2awire.BindingJSONRPC, hc)
			events := 0
			var got error
			for _, err := range c.SendStreamingMessage(ctxT(t), &a2a.SendMessageRequest{Message: tc.msg}) {
				if err != nil {
					got = err
					break
				}
				events++
			}
			if events != 0 || !errors.Is(got, tc.want) {
				t.Fatalf("a refused streaming send: %d events, error %v; want no event and %v", events, got, tc.want)
			}
		})
	}
	list, err := e.client(a2awire.BindingJSONRPC, tokenAlice).ListTasks(ctxT(t), &a2a.ListTasksRequest{})
	if err != nil || len(list.Tasks) != 0 {
		t.Fatalf("after refused sends: %v, %d tasks, want none", err, len(list.Tasks))
	}

	body := func(method string) []byte {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "keep-me", "method": method,
			"params": map[string]any{"message": wireMsg("ct-stream-1", "complete")}})
		return b
	}
	textPlain := map[string]string{"Content-Type": "text/plain"}
	s, status, rb := e.openSSE(ctxT(t), http.MethodPost, "/jsonrpc", tokenAlice, body("SendStreamingMessage"), textPlain)
	if s == nil {
		t.Fatalf("a refused streaming send accepting text/event-stream: HTTP %d %s, want a stream", status, rb)
	}
	evs := s.all()
	s.close()
	var r rpcResponse
	if len(evs) != 1 || json.Unmarshal([]byte(evs[0].Data), &r) != nil || r.Error == nil || r.Error.Code != -32005 ||
		r.reason() != "CONTENT_TYPE_NOT_SUPPORTED" || string(r.ID) != `"keep-me"` {
		t.Fatalf("the refusal's stream: %+v, want one CONTENT_TYPE_NOT_SUPPORTED error under id \"keep-me\"", evs)
	}
	// A media type is case-insensitive, and Accept may come as several header lines.
	for _, accept := range [][]string{{"Text/Event-Stream"}, {"application/json", "text/event-stream"}} {
		req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, e.URL+"/jsonrpc", bytes.NewReader(body("SendStreamingMessage")))
		if err != nil {
			t.Fatal(err)
		}
		req.Header["Accept"] = accept
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("Authorization", "Bearer "+tokenAlice)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
			t.Errorf("a refused streaming send with Accept %q: Content-Type %q, want a stream", accept, ct)
		}
	}
	s, status, rb = e.openSSE(ctxT(t), http.MethodPost, "/jsonrpc", tokenAlice, body("SendMessage"), textPlain)
	if s != nil {
		s.close()
		t.Fatal("a refused non-streaming send answered a stream")
	}
	r = rpcResponse{}
	if err := json.Unmarshal(rb, &r); err != nil || status != http.StatusOK || r.Error == nil || r.Error.Code != -32005 {
		t.Fatalf("a refused non-streaming send: HTTP %d %s, want a plain CONTENT_TYPE_NOT_SUPPORTED error", status, rb)
	}
}

// TestAWrongMediaTypeIsRefusedBeforeTheBodysSize: a body of a media type the server does not take
// is CONTENT_TYPE_NOT_SUPPORTED on both bindings however large it is, whether its length is sent
// or not: the media type is checked before the size.
func TestAWrongMediaTypeIsRefusedBeforeTheBodysSize(t *testing.T) {
	e := newEnv(t)
	big := bytes.Repeat([]byte("a"), 2<<20) // over the 1 MiB limit
	for _, tc := range []struct {
		name, path string
		chunked    bool
	}{
		{"REST", "/message:send", false},
		{"REST, length not sent", "/message:send", true},
		{"JSON-RPC", "/jsonrpc", false},
		{"JSON-RPC, length not sent", "/jsonrpc", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = bytes.NewReader(big)
			if tc.chunked {
				body = io.MultiReader(body) // no Len: the request goes out chunked
			}
			req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, e.URL+tc.path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "text/plain")
			req.Header.Set("Authorization", "Bearer "+tokenAlice)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			rb, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if tc.path == "/jsonrpc" {
				var r rpcResponse
				if err := json.Unmarshal(rb, &r); err != nil || r.Error == nil || r.Error.Code != -32005 || r.reason() != "CONTENT_TYPE_NOT_SUPPORTED" {
					t.Fatalf("HTTP %d %s, want -32005 CONTENT_TYPE_NOT_SUPPORTED", resp.StatusCode, rb)
				}
				return
			}
			if _, _, reason := restError(t, rb); resp.StatusCode != http.StatusBadRequest || reason != "CONTENT_TYPE_NOT_SUPPORTED" {
				t.Fatalf("HTTP %d %s, want 400 CONTENT_TYPE_NOT_SUPPORTED", resp.StatusCode, rb)
			}
		})
	}
}

// TestUnsupportedPartMediaTypeIsRefusedAndNothingAccepted: a part whose media type the card does
// not offer is CONTENT_TYPE_NOT_SUPPORTED on both bindings, and nothing is accepted (the same
// messageId is new work afterwards); text and data parts, and file parts of an offered range, pass.
func TestUnsupportedPartMediaTypeIsRefusedAndNothingAccepted(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) { c.DefaultInputModes = []string{"text/plain", "application/json", "image/*"} })
	unsupported := map[string]any{"raw": "dGNr", "mediaType": "application/x-unsupported-tck-type"}
	msg := func(id string, parts ...any) map[string]any {
		return map[string]any{"messageId": id, "role": "ROLE_USER", "parts": parts}
	}
	status, _, body := e.raw(http.MethodPost, "/message:send", tokenAlice, sendBody(t, msg("mt-1", unsupported), nil), nil)
	if status != http.StatusBadRequest {
		t.Fatalf("REST: %d %s", status, body)
	}
	if _, _, reason := restError(t, body); reason != "CONTENT_TYPE_NOT_SUPPORTED" {
		t.Fatalf("REST reason %q: %s", reason, body)
	}
	r := e.rpc(tokenAlice, "SendMessage", map[string]any{"message": msg("mt-2", map[string]any{"text": "hi"},
		map[string]any{"text": "# hi", "mediaType": "text/markdown"})}, nil)
	if r.Error == nil || r.Error.Code != -32005 || r.reason() != "CONTENT_TYPE_NOT_SUPPORTED" {
		t.Fatalf("JSON-RPC error %+v", r.Error)
	}
	list := e.rpc(tokenAlice, "ListTasks", map[string]any{}, nil)
	if !strings.Contains(string(list.Result), `"totalSize":0`) {
		t.Fatalf("refused sends left tasks: %s", list.Result)
	}
	// The same messageId with parts the card offers is new work, not a conflict.
	ok := msg("mt-1", map[string]any{"text": "complete"}, map[string]any{"data": map[string]any{"k": 1}},
		map[string]any{"raw": "dGNr", "mediaType": "image/png"}, map[string]any{"url": "https://example.com/f", "filename": "f"})
	if status, _, body := e.raw(http.MethodPost, "/message:send", tokenAlice, sendBody(t, ok, nil), nil); status != http.StatusOK {
		t.Fatalf("offered media types: %d %s", status, body)
	}
	// The card offers what is checked.
	_, _, card := e.raw(http.MethodGet, "/.well-known/agent-card.json", "", nil, nil)
	if !strings.Contains(string(card), `"defaultInputModes":["text/plain","application/json","image/*"]`) {
		t.Fatalf("card input modes: %s", card)
	}
}

// TestSendToAnUnknownTaskNamesItOnBothBindings: TASK_NOT_FOUND for a message's taskId carries
// that taskId in its ErrorInfo metadata, on REST as on JSON-RPC.
func TestSendToAnUnknownTaskNamesItOnBothBindings(t *testing.T) {
	e := newEnv(t)
	m := wireMsg("unknown-task-1", "complete")
	m["taskId"] = "no-such-task"
	for _, route := range []string{"/message:send", "/message:stream"} {
		m["messageId"] = "unknown-task" + route
		status, _, body := e.raw(http.MethodPost, route, tokenAlice, sendBody(t, m, nil), nil)
		var env struct {
			Error struct {
				Details []struct {
					Reason   string            `json:"reason"`
					Metadata map[string]string `json:"metadata"`
				} `json:"details"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &env); err != nil || status != http.StatusNotFound || len(env.Error.Details) == 0 ||
			env.Error.Details[0].Reason != "TASK_NOT_FOUND" || env.Error.Details[0].Metadata["taskId"] != "no-such-task" {
			t.Fatalf("REST %s: %d %s", route, status, body)
		}
	}
	m["messageId"] = "unknown-task-2"
	r := e.rpc(tokenAlice, "SendMessage", map[string]any{"message": m}, nil)
	if r.Error == nil || r.reason() != "TASK_NOT_FOUND" || r.Error.Data[0]["metadata"].(map[string]any)["taskId"] != "no-such-task" {
		t.Fatalf("JSON-RPC: %+v", r.Error)
	}
}

// TestDuplicateConflictReason pins the wire form of a reused messageId: REST 409
// DUPLICATE_MESSAGE_ID, JSON-RPC an error carrying that reason.
func TestDuplicateConflictReason(t *testing.T) {
	e := newEnv(t)
	status, _, body := e.raw(http.MethodPost, "/message:send", tokenAlice, sendBody(t, wireMsg("dup-1", "complete"), nil), nil)
	if status != http.StatusOK {
		t.Fatalf("first send: %d %s", status, body)
	}
	status, _, body = e.raw(http.MethodPost, "/message:send", tokenAlice, sendBody(t, wireMsg("dup-1", "other"), nil), nil)
	code, st, reason := restError(t, body)
	if status != http.StatusConflict || code != 409 || st != "ALREADY_EXISTS" || reason != "DUPLICATE_MESSAGE_ID" {
		t.Fatalf("REST conflict: %d %d %s %s", status, code, st, reason)
	}
	r := e.rpc(tokenAlice, "SendMessage", map[string]any{"message": wireMsg("dup-1", "third")}, nil)
	if r.reason() != "DUPLICATE_MESSAGE_ID" {
		t.Fatalf("JSON-RPC conflict: %+v", r.Error)
	}
	// Another principal may use the same messageId: identities are per principal.
	status, _, body = e.raw(http.MethodPost, "/message:send", tokenBob, sendBody(t, wireMsg("dup-1", "other"), nil), nil)
	if status != http.StatusOK {
		t.Fatalf("bob with alice's messageId: %d %s", status, body)
	}
	_ = a2awire.Domain
}

// TestASendCannotSetMetadataTheServerWrites: a request whose metadata carries a key the server
// writes (the a2a executor's link to its downstream task) is INVALID_PARAMS on both bindings, and
// no task is made.
func TestASendCannotSetMetadataTheServerWrites(t *testing.T) {
	e := newEnv(t)
	md := map[string]any{"https://channels.dev/a2a/ext/remote-agent/v1": map[string]any{"taskId": "someone-elses", "sent": "md-1"}}
	req, _ := json.Marshal(map[string]any{"message": wireMsg("md-1", "complete"), "metadata": md})
	status, _, body := e.raw(http.MethodPost, "/message:send", tokenAlice, req, nil)
	if _, _, reason := restError(t, body); status != http.StatusBadRequest || reason != "INVALID_PARAMS" {
		t.Fatalf("REST: %d %s", status, body)
	}
	r := e.rpc(tokenAlice, "SendMessage", map[string]any{"message": wireMsg("md-2", "complete"), "metadata": md}, nil)
	if r.Error == nil || r.reason() != "INVALID_PARAMS" {
		t.Fatalf("JSON-RPC: %+v %s", r.Error, r.Result)
	}
	if status, _, body := e.raw(http.MethodGet, "/tasks", tokenAlice, nil, nil); status != http.StatusOK || !strings.Contains(string(body), `"tasks":[]`) {
		t.Fatalf("refused sends left tasks: %d %s", status, body)
	}
}
