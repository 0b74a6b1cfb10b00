package a2ahttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/google/go-cmp/cmp"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2ahttp"
	"github.com/channels-dev/channels/taskplane/a2awire"
	"github.com/channels-dev/channels/taskplane/executor/conformance"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// subscribeRequest is the HTTP request of SubscribeToTask of taskID on binding.
func subscribeRequest(binding string, taskID a2a.TaskID) (method, path string, body []byte) {
	if binding == a2awire.BindingJSONRPC {
		body, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "s1", "method": "SubscribeToTask", "params": map[string]any{"id": taskID}})
		return http.MethodPost, "/jsonrpc", body
	}
	return http.MethodGet, "/tasks/" + string(taskID) + ":subscribe", nil
}

// TestResumeLastEventID: a client that reconnects with Last-Event-ID gets every later event
// exactly once, on both bindings and for both stream kinds.
func TestResumeLastEventID(t *testing.T) {
	e := newEnv(t)
	c := e.client(a2awire.BindingHTTPJSON, tokenAlice)

	// The reference: the whole log of a finished "steps" task, replayed from the start.
	ref := send(t, c, userMessage("steps"), nil)
	s, status, body := e.openSSE(ctxT(t), http.MethodGet, "/tasks/"+string(ref.ID)+":subscribe", tokenAlice, nil,
		map[string]string{"Last-Event-ID": "0"})
	if s == nil {
		t.Fatalf("replay: %d %s", status, body)
	}
	full := s.all()
	if len(full) < 5 {
		t.Fatalf("full replay has %d events", len(full))
	}
	if k, _ := kind(t, full[0].Data); k != "task" {
		t.Fatalf("event 1 is %s, want the creation snapshot", k)
	}

	forEachBinding(t, func(t *testing.T, binding string) {
		task := send(t, c, userMessage("gate"), &a2a.SendMessageConfig{ReturnImmediately: true})
		waitHeld(t, c, task.ID)
		method, path, body := subscribeRequest(binding, task.ID)
		headers := map[string]string{}
		// First connection: the snapshot, then drop.
		ctx, cancel := context.WithCancel(ctxT(t))
		s, status, rb := e.openSSE(ctx, method, path, tokenAlice, body, headers)
		if s == nil {
			t.Fatalf("subscribe: %d %s", status, rb)
		}
		first, _ := s.next()
		s.close()
		cancel()
		e.exec.release(string(task.ID))
		waitState(t, c, task.ID, a2a.TaskStateCompleted)

		// Reconnect after the snapshot's id: every later event, once, in order.
		headers["Last-Event-ID"] = first.ID
		s2, status, rb := e.openSSE(ctxT(t), method, path, tokenAlice, body, headers)
		if s2 == nil {
			t.Fatalf("resume: %d %s", status, rb)
		}
		var got []string
		prev := seq(t, first.ID)
		for _, ev := range s2.all() {
			n := seq(t, ev.ID)
			if n <= prev {
				t.Fatalf("event %d after %d: repeated or out of order", n, prev)
			}
			prev = n
			k, st := kind(t, ev.Data)
			got = append(got, k+" "+st)
		}
		want := []string{"statusUpdate TASK_STATE_WORKING", "artifactUpdate ", "statusUpdate TASK_STATE_COMPLETED"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("resumed events (-want +got):\n%s", diff)
		}
		// Nothing after the terminal event: the resume is refused like a terminal subscribe.
		headers["Last-Event-ID"] = s2Last(t, e, task.ID)
		s3, status, _ := e.openSSE(ctxT(t), method, path, tokenAlice, body, headers)
		if binding == a2awire.BindingHTTPJSON && (s3 != nil || status != http.StatusBadRequest) {
			t.Fatalf("resume after the terminal event: stream %v, status %d", s3 != nil, status)
		}
		if binding == a2awire.BindingJSONRPC {
			evs := s3.all()
			if len(evs) != 1 || !strings.Contains(evs[0].Data, "-32004") {
				t.Fatalf("JSON-RPC resume after the terminal event: %+v", evs)
			}
		}
	})

	t.Run("send-stream", func(t *testing.T) {
		// A streaming send resumed by resending it (same messageId and payload) with Last-Event-ID.
		body := sendBody(t, wireMsg("resume-send-1", "gate"), nil)
		ctx, cancel := context.WithCancel(ctxT(t))
		s, status, rb := e.openSSE(ctx, http.MethodPost, "/message:stream", tokenAlice, body, nil)
		if s == nil {
			t.Fatalf("stream: %d %s", status, rb)
		}
		first, _ := s.next()
		var tk a2a.StreamResponse
		if err := json.Unmarshal([]byte(first.Data), &tk); err != nil {
			t.Fatal(err)
		}
		id := tk.Event.(*a2a.Task).ID
		s.close()
		cancel()
		e.exec.release(string(id))
		s2, status, rb := e.openSSE(ctxT(t), http.MethodPost, "/message:stream", tokenAlice, body, map[string]string{"Last-Event-ID": first.ID})
		if s2 == nil {
			t.Fatalf("resume: %d %s", status, rb)
		}
		evs := s2.all()
		if len(evs) == 0 {
			t.Fatal("no events after resume")
		}
		if k, st := kind(t, evs[len(evs)-1].Data); k != "statusUpdate" || st != "TASK_STATE_COMPLETED" {
			t.Fatalf("resumed send stream ends with %s %s", k, st)
		}
		for _, ev := range evs {
			if seq(t, ev.ID) <= seq(t, first.ID) {
				t.Fatalf("event %s repeats", ev.ID)
			}
		}
	})
}

// TestResumeReplaysPastAnInputRequiredTheTaskHasLeft: a stream closes at INPUT_REQUIRED only
// when that is where the task is; a resume whose replay passes an earlier question goes on to the
// task's answer and end, and one that stops at the task's current question closes there.
func TestResumeReplaysPastAnInputRequiredTheTaskHasLeft(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) { c.BlockingTimeout = time.Minute })
	forEachBinding(t, func(t *testing.T, binding string) {
		c := e.client(binding, tokenAlice)
		task := askedTask(t, c, "input")
		method, path, body := subscribeRequest(binding, task.ID)
		replay := func(what string) []string {
			t.Helper()
			s, status, rb := e.openSSE(ctxT(t), method, path, tokenAlice, body, map[string]string{"Last-Event-ID": "0"})
			if s == nil {
				t.Fatalf("%s: %d %s", what, status, rb)
			}
			var got []string
			for _, ev := range s.all() {
				k, st := kind(t, ev.Data)
				got = append(got, k+" "+st)
			}
			return got
		}
		// Waiting for the answer: the replay ends at the question.
		if got := replay("replay of the waiting task"); len(got) == 0 || got[len(got)-1] != "statusUpdate TASK_STATE_INPUT_REQUIRED" {
			t.Fatalf("replay of the waiting task: %v", got)
		}
		m := userMessage("Ada")
		m.TaskID, m.ContextID = task.ID, task.ContextID
		if done := send(t, c, m, nil); done.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("follow-up: %s", done.Status.State)
		}
		// Answered and finished: the replay goes through the old question to the end.
		got := replay("replay of the finished task")
		asked := slices.Index(got, "statusUpdate TASK_STATE_INPUT_REQUIRED")
		if asked < 0 || got[len(got)-1] != "statusUpdate TASK_STATE_COMPLETED" {
			t.Fatalf("replay of the finished task: %v, want the question and then the end", got)
		}
	})
}

// TestResumeOfAWaitingTaskDeliversWhatFollowsItsQuestionAndCloses: a question written together
// with an artifact (one update) is the task's state after both; a resume replays them both and
// then closes, as a stream at INPUT_REQUIRED does.
func TestResumeOfAWaitingTaskDeliversWhatFollowsItsQuestionAndCloses(t *testing.T) {
	e := newEnvExec(t, storetest.OpenSQLite(t), nil, askWithDraft(), func(c *a2aConfig) { c.BlockingTimeout = time.Minute })
	forEachBinding(t, func(t *testing.T, binding string) {
		c := e.client(binding, tokenAlice)
		task := askedTask(t, c, "hello")
		method, path, body := subscribeRequest(binding, task.ID)
		resume := func(after string) (got, ids []string) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, status, rb := e.openSSE(ctx, method, path, tokenAlice, body, map[string]string{"Last-Event-ID": after})
			if s == nil {
				t.Fatalf("resume after %s: %d %s", after, status, rb)
			}
			for _, ev := range s.all() {
				k, st := kind(t, ev.Data)
				got, ids = append(got, strings.TrimSpace(k+" "+st)), append(ids, ev.ID)
			}
			if ctx.Err() != nil {
				t.Fatalf("the stream resumed after %s stayed open after %v", after, got)
			}
			return got, ids
		}
		got, ids := resume("0")
		if n := len(got); n < 2 || got[n-2] != "statusUpdate TASK_STATE_INPUT_REQUIRED" || got[n-1] != "artifactUpdate" {
			t.Fatalf("resumed events %v, want the question and then the artifact", got)
		}
		// A client that lost the stream right after the question, or after the artifact.
		question, last := ids[len(ids)-2], ids[len(ids)-1]
		if got, _ := resume(question); !slices.Equal(got, []string{"artifactUpdate"}) {
			t.Errorf("resumed after the question: %v, want the artifact alone", got)
		}
		if got, _ := resume(last); len(got) != 0 {
			t.Errorf("resumed after the last event: %v, want none", got)
		}
	})
}

// TestALiveStreamDeliversTheRestOfTheUpdateThatAsked: a question closes a live stream, but only
// after what the same update wrote after it (an artifact), which a replay of the task also sends:
// two streams of one task deliver the same events.
func TestALiveStreamDeliversTheRestOfTheUpdateThatAsked(t *testing.T) {
	e := newEnvExec(t, storetest.OpenSQLite(t), nil, askWithDraft(), func(c *a2aConfig) { c.BlockingTimeout = time.Minute })
	forEachBinding(t, func(t *testing.T, binding string) {
		path, body := "/message:stream", sendBody(t, wireMsg("live-"+bindingName(binding), "hello"), nil)
		if binding == a2awire.BindingJSONRPC {
			path = "/jsonrpc"
			body = []byte(`{"jsonrpc":"2.0","id":"r1","method":"SendStreamingMessage","params":` + string(body) + `}`)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, status, b := e.openSSE(ctx, http.MethodPost, path, tokenAlice, body, nil)
		if s == nil {
			t.Fatalf("%d %s", status, b)
		}
		var got []string
		for _, ev := range s.all() {
			k, st := kind(t, ev.Data)
			got = append(got, strings.TrimSpace(k+" "+st))
		}
		if ctx.Err() != nil {
			t.Fatalf("the stream stayed open after %v", got)
		}
		if n := len(got); n < 2 || got[n-2] != "statusUpdate TASK_STATE_INPUT_REQUIRED" || got[n-1] != "artifactUpdate" {
			t.Fatalf("live events %v, want the question and then the artifact", got)
		}
	})
}

// askWithDraft asks a question and writes an artifact in one update.
func askWithDraft() taskplane.Executor {
	return taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		return turn.Update(ctx,
			taskplane.SetStatus{State: taskplane.StateInputRequired, Message: &taskplane.Message{ID: "q-" + turn.Task.ID,
				Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("which one?")}}},
			taskplane.AddArtifact{Artifact: taskplane.Artifact{ID: "draft", Parts: []taskplane.Part{taskplane.TextPart("a draft")}}})
	})
}

// TestLastEventIDMattersOnlyToStreams: the header resumes a stream; a malformed one there is
// invalid params, and on any other operation (which an SSE client may send it with) it is
// ignored, on both bindings.
func TestLastEventIDMattersOnlyToStreams(t *testing.T) {
	e := newEnv(t)
	bad := map[string]string{"Last-Event-ID": "not-an-id"}
	if status, _, body := e.raw(http.MethodGet, "/tasks", tokenAlice, nil, bad); status != http.StatusOK {
		t.Fatalf("ListTasks with a malformed Last-Event-ID: %d %s, want 200", status, body)
	}
	status, _, body := e.raw(http.MethodGet, "/tasks/no-such-task:subscribe", tokenAlice, nil, bad)
	if _, _, reason := restError(t, body); status != http.StatusBadRequest || reason != "INVALID_PARAMS" {
		t.Fatalf("subscribe with a malformed Last-Event-ID: %d %s, want 400 INVALID_PARAMS", status, body)
	}
	if r := e.rpc(tokenAlice, "ListTasks", map[string]any{}, bad); r.Error != nil {
		t.Fatalf("JSON-RPC ListTasks with a malformed Last-Event-ID: %+v", r.Error)
	}
	if r := e.rpc(tokenAlice, "SubscribeToTask", map[string]any{"id": "no-such-task"}, bad); r.Error == nil || r.Error.Code != -32602 {
		t.Fatalf("JSON-RPC SubscribeToTask with a malformed Last-Event-ID: %+v, want -32602", r.Error)
	}
}

// s2Last returns the id of the task's last event.
func s2Last(t *testing.T, e *env, id a2a.TaskID) string {
	t.Helper()
	s, status, body := e.openSSE(ctxT(t), http.MethodGet, "/tasks/"+string(id)+":subscribe", tokenAlice, nil,
		map[string]string{"Last-Event-ID": "0"})
	if s == nil {
		t.Fatalf("replay: %d %s", status, body)
	}
	evs := s.all()
	return evs[len(evs)-1].ID
}

func TestAgentCard(t *testing.T) {
	e := newEnv(t)
	status, h, body := e.raw(http.MethodGet, "/.well-known/agent-card.json", "", nil, nil)
	if status != http.StatusOK || h.Get("Content-Type") != "application/json" {
		t.Fatalf("card: %d %s", status, h.Get("Content-Type"))
	}
	if !strings.Contains(h.Get("Cache-Control"), "max-age=") || h.Get("ETag") == "" || h.Get("Last-Modified") == "" {
		t.Fatalf("caching headers: %v", h)
	}
	status, h2, body2 := e.raw(http.MethodGet, "/.well-known/agent-card.json", "", nil, map[string]string{"If-None-Match": h.Get("ETag")})
	if status != http.StatusNotModified || len(body2) != 0 || h2.Get("ETag") != h.Get("ETag") {
		t.Fatalf("If-None-Match: %d", status)
	}
	if status, _, _ := e.raw(http.MethodGet, "/.well-known/agent-card.json", "", nil, map[string]string{"If-None-Match": `"other"`}); status != http.StatusOK {
		t.Fatalf("If-None-Match with another tag: %d", status)
	}

	var card map[string]any
	if err := json.Unmarshal(body, &card); err != nil {
		t.Fatal(err)
	}
	caps := card["capabilities"].(map[string]any)
	if caps["streaming"] != true || caps["pushNotifications"] != false || caps["extendedAgentCard"] != true {
		t.Fatalf("capabilities %v", caps)
	}
	exts := caps["extensions"].([]any)
	if len(exts) != 2 || exts[0].(map[string]any)["uri"] != a2awire.ExtOutfitterTask || exts[1].(map[string]any)["uri"] != a2awire.ExtElicitation {
		t.Fatalf("extensions %v", exts)
	}
	want := []any{
		map[string]any{"url": e.URL, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
		map[string]any{"url": e.URL + "/jsonrpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
	}
	if diff := cmp.Diff(want, card["supportedInterfaces"]); diff != "" {
		t.Fatalf("supportedInterfaces (-want +got):\n%s", diff)
	}
	for _, k := range []string{"name", "description", "version", "defaultInputModes", "defaultOutputModes", "skills", "securitySchemes"} {
		if _, ok := card[k]; !ok {
			t.Fatalf("card has no %s", k)
		}
	}

	if _, ok := card["securityRequirements"]; ok {
		t.Fatal("securityRequirements are listed; a2a-go v2.4.0 cannot parse them (a2aproject/a2a-go#430)")
	}
	// The independent client resolves the card and talks to either interface it lists.
	resolved, err := agentcard.NewResolver(http.DefaultClient).Resolve(ctxT(t), e.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, pref := range []a2a.TransportProtocol{a2a.TransportProtocolHTTPJSON, a2a.TransportProtocolJSONRPC} {
		hc := httpClient(tokenAlice, nil)
		c, err := a2aclient.NewFromCard(ctxT(t), resolved, a2aclient.WithRESTTransport(hc), a2aclient.WithJSONRPCTransport(hc),
			a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []a2a.TransportProtocol{pref}}))
		if err != nil {
			t.Fatal(err)
		}
		task := send(t, c, userMessage("complete"), nil)
		if task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("%s via card: %s", pref, task.Status.State)
		}
		ext, err := c.GetExtendedAgentCard(ctxT(t), &a2a.GetExtendedAgentCardRequest{})
		if err != nil {
			t.Fatalf("%s extended card: %v", pref, err)
		}
		if ext.Name != "test agent" {
			t.Fatalf("extended card %+v", ext)
		}
	}
}

func TestExtendedCard(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) {
		c.PrincipalSkills = map[string][]a2awire.AgentSkill{"bob": {{ID: "bob-only", Name: "Bob's", Description: "for bob", Tags: []string{"x"}}}}
	})
	status, h, body := e.raw(http.MethodGet, "/extendedAgentCard", "", nil, nil)
	if status != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("anonymous: %d %v", status, h)
	}
	if _, st, reason := restError(t, body); st != "UNAUTHENTICATED" || reason != "UNAUTHENTICATED" {
		t.Fatalf("anonymous error %s %s", st, reason)
	}
	skills := func(token string) []string {
		status, h, body := e.raw(http.MethodGet, "/extendedAgentCard", token, nil, nil)
		if status != http.StatusOK || !strings.HasPrefix(h.Get("Cache-Control"), "private") || h.Get("ETag") == "" {
			t.Fatalf("extended card: %d %v", status, h)
		}
		var card a2awire.AgentCard
		if err := json.Unmarshal(body, &card); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range card.Skills {
			ids = append(ids, s.ID)
		}
		return ids
	}
	if diff := cmp.Diff([]string{"channels"}, skills(tokenAlice)); diff != "" {
		t.Fatalf("alice's skills (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"channels", "bob-only"}, skills(tokenBob)); diff != "" {
		t.Fatalf("bob's skills (-want +got):\n%s", diff)
	}
	r := e.rpc(tokenBob, "GetExtendedAgentCard", nil, nil)
	if r.Error != nil || !strings.Contains(string(r.Result), "bob-only") {
		t.Fatalf("JSON-RPC extended card: %+v %s", r.Error, r.Result)
	}
}

// TestExtendedCardNeedsAnAuthenticatedCaller: the extended card goes only to a caller
// authenticated with a scheme the public card declares. With credentials and allow_anonymous, an
// anonymous caller is refused like a bad token; a server without credentials declares no
// extended card, and the operation is UnsupportedOperation on both bindings.
func TestExtendedCardNeedsAnAuthenticatedCaller(t *testing.T) {
	mixed := newEnv(t, func(c *a2aConfig) { c.AllowAnonymous = true })
	for _, token := range []string{"", "not-a-token"} {
		status, h, _ := mixed.raw(http.MethodGet, "/extendedAgentCard", token, nil, nil)
		if status != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" {
			t.Fatalf("extended card with allow_anonymous, token %q: %d %v", token, status, h)
		}
	}
	if status, _, body := mixed.raw(http.MethodGet, "/extendedAgentCard", tokenAlice, nil, nil); status != http.StatusOK {
		t.Fatalf("extended card with a token: %d %s", status, body)
	}
	// JSON-RPC refuses the same way: 401 with the challenge, and the request's id in the error.
	for _, token := range []string{"", "not-a-token"} {
		status, h, body := mixed.raw(http.MethodPost, "/jsonrpc", token,
			[]byte(`{"jsonrpc":"2.0","id":41,"method":"GetExtendedAgentCard"}`), nil)
		var r rpcResponse
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		if status != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" || string(r.ID) != "41" || r.reason() != "UNAUTHENTICATED" {
			t.Fatalf("JSON-RPC extended card with allow_anonymous, token %q: %d %v %s", token, status, h, body)
		}
	}

	loopback := newEnv(t, func(c *a2aConfig) {
		c.Credentials = nil
		c.Loopback = true
	})
	_, _, body := loopback.raw(http.MethodGet, "/.well-known/agent-card.json", "", nil, nil)
	var card a2awire.AgentCard
	if err := json.Unmarshal(body, &card); err != nil {
		t.Fatal(err)
	}
	if card.Capabilities.ExtendedAgentCard == nil || *card.Capabilities.ExtendedAgentCard {
		t.Fatalf("a server without credentials declares extendedAgentCard: %s", body)
	}
	status, h, body := loopback.raw(http.MethodGet, "/extendedAgentCard", "", nil, nil)
	if _, _, reason := restError(t, body); status != http.StatusBadRequest || reason != "UNSUPPORTED_OPERATION" {
		t.Fatalf("extended card without credentials: %d %s", status, body)
	}
	if c := h.Get("WWW-Authenticate"); c != "" {
		t.Fatalf("a server with no bearer scheme challenges for one: WWW-Authenticate %q", c)
	}
	if r := loopback.rpc("", "GetExtendedAgentCard", nil, nil); r.Error == nil || r.reason() != "UNSUPPORTED_OPERATION" {
		t.Fatalf("JSON-RPC extended card without credentials: %+v %s", r.Error, r.Result)
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t)
	status, h, body := e.raw(http.MethodGet, "/tasks", "", nil, nil)
	if status != http.StatusUnauthorized || h.Get("WWW-Authenticate") != `Bearer realm="channels"` {
		t.Fatalf("no token: %d %q", status, h.Get("WWW-Authenticate"))
	}
	if code, st, _ := restError(t, body); code != 401 || st != "UNAUTHENTICATED" {
		t.Fatalf("no token body %d %s", code, st)
	}
	status, h, _ = e.raw(http.MethodGet, "/tasks", "wrong-token", nil, nil)
	if status != http.StatusUnauthorized || !strings.Contains(h.Get("WWW-Authenticate"), "invalid_token") {
		t.Fatalf("bad token: %d %q", status, h.Get("WWW-Authenticate"))
	}
	// Credentials of another scheme are not a bearer token at all: no error code (RFC 6750 §3.1).
	status, h, _ = e.raw(http.MethodGet, "/tasks", "", nil, map[string]string{"Authorization": "Basic YWxpY2U6eA=="})
	if status != http.StatusUnauthorized || h.Get("WWW-Authenticate") != `Bearer realm="channels"` {
		t.Fatalf("Basic credentials: %d %q", status, h.Get("WWW-Authenticate"))
	}
	status, h, _ = e.raw(http.MethodPost, "/jsonrpc", "wrong-token", []byte(`{"jsonrpc":"2.0","id":1,"method":"ListTasks"}`), nil)
	if status != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" {
		t.Fatalf("JSON-RPC bad token: %d", status)
	}
	_, err := e.client(a2awire.BindingHTTPJSON, "").ListTasks(ctxT(t), &a2a.ListTasksRequest{})
	if !errors.Is(err, a2a.ErrUnauthenticated) {
		t.Fatalf("a2a-go without a token: %v", err)
	}
	// The public card needs no token.
	if status, _, _ := e.raw(http.MethodGet, "/.well-known/agent-card.json", "", nil, nil); status != http.StatusOK {
		t.Fatalf("card: %d", status)
	}

	t.Run("anonymous", func(t *testing.T) {
		// foreign: an anonymous caller under another Host name (DNS rebinding: a web page whose
		// name was re-pointed at 127.0.0.1) is trusted only where anonymous access was allowed
		// outright, not where it comes from listening on loopback.
		cases := []struct {
			name                 string
			cfg                  func(*a2aConfig)
			anon, foreign, alice bool
		}{
			{"loopback without credentials", func(c *a2aConfig) { c.Credentials, c.Loopback = nil, true }, true, false, false},
			{"not loopback without credentials", func(c *a2aConfig) { c.Credentials = nil }, false, false, false},
			{"loopback with credentials", func(c *a2aConfig) { c.Loopback = true }, false, false, true},
			{"allow_anonymous with credentials", func(c *a2aConfig) { c.AllowAnonymous = true }, true, true, true},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, tc.cfg)
				status, _, _ := e.raw(http.MethodGet, "/tasks", "", nil, nil)
				if (status == http.StatusOK) != tc.anon {
					t.Fatalf("anonymous ListTasks: %d", status)
				}
				// Authorization is read whole on both bindings: an empty one, or two of them
				// (whatever the first holds), is refused, never taken as anonymous or as the
				// first token alone.
				for name, hs := range map[string][]string{
					"empty":          {""},
					"empty then bad": {"", "Bearer wrong-token"},
					"good then bad":  {"Bearer " + tokenAlice, "Bearer wrong-token"},
					"good twice":     {"Bearer " + tokenAlice, "Bearer " + tokenAlice},
				} {
					for _, path := range []string{"/tasks", "/jsonrpc"} {
						method, body := http.MethodGet, io.Reader(nil)
						if path == "/jsonrpc" {
							method, body = http.MethodPost, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}`)
						}
						req, err := http.NewRequestWithContext(ctxT(t), method, e.URL+path, body)
						if err != nil {
							t.Fatal(err)
						}
						req.Header.Set("Content-Type", "application/json")
						req.Header["Authorization"] = hs
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							t.Fatal(err)
						}
						resp.Body.Close()
						if resp.StatusCode != http.StatusUnauthorized {
							t.Fatalf("%s Authorization on %s: %d, want 401", name, path, resp.StatusCode)
						}
						if ch := resp.Header.Get("WWW-Authenticate"); len(hs) > 1 && ch != `Bearer realm="channels", error="invalid_request"` {
							t.Fatalf("%s Authorization on %s: challenge %q", name, path, ch)
						}
					}
				}
				for _, host := range []string{"localhost:8788", "[::1]", "app.localhost"} {
					if status, _, _ := e.raw(http.MethodGet, "/tasks", "", nil, map[string]string{"Host": host}); (status == http.StatusOK) != tc.anon {
						t.Fatalf("anonymous ListTasks under Host %s: %d", host, status)
					}
				}
				for _, path := range []string{"/tasks", "/jsonrpc"} {
					var body []byte
					method := http.MethodGet
					if path == "/jsonrpc" {
						method, body = http.MethodPost, []byte(`{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}`)
					}
					status, h, b := e.raw(method, path, "", body, map[string]string{"Host": "rebound.example.com:8788"})
					var r rpcResponse
					if path == "/jsonrpc" && json.Unmarshal(b, &r) == nil && r.Error != nil {
						status = http.StatusUnauthorized // JSON-RPC answers its error in the body
					}
					if (status == http.StatusOK) != tc.foreign {
						t.Fatalf("anonymous %s under a foreign Host: %d %s", path, status, b)
					}
					if !tc.foreign && h.Get("WWW-Authenticate") == "" {
						t.Fatalf("anonymous %s under a foreign Host: no challenge", path)
					}
				}
				status, _, _ = e.raw(http.MethodGet, "/tasks", tokenAlice, nil, nil)
				if (status == http.StatusOK) != tc.alice {
					t.Fatalf("alice ListTasks: %d", status)
				}
				// The public URL's host passes as a loopback name does (a proxy on this machine
				// forwarding it): the env's public URL is 127.0.0.1, so serve under another one.
				if tc.anon && !tc.foreign {
					e := newEnv(t, tc.cfg, func(c *a2aConfig) { c.PublicURL = "https://agents.example.com/" })
					if status, _, b := e.raw(http.MethodGet, "/tasks", "", nil, map[string]string{"Host": "agents.example.com"}); status != http.StatusOK {
						t.Fatalf("anonymous ListTasks under the public URL's host: %d %s", status, b)
					}
					if status, _, _ := e.raw(http.MethodGet, "/tasks", "", nil, map[string]string{"Host": "other.example.com"}); status == http.StatusOK {
						t.Fatal("anonymous ListTasks under a foreign host, public URL set: 200")
					}
				}
			})
		}
	})
}

func TestExtensionsNegotiation(t *testing.T) {
	e := newEnv(t)
	_, h, _ := e.raw(http.MethodGet, "/tasks", tokenAlice, nil, map[string]string{
		"A2A-Extensions": "https://example.com/unknown/v1, " + a2awire.ExtElicitation,
	})
	if h.Get("A2A-Extensions") != a2awire.ExtElicitation {
		t.Fatalf("activated %q, want only the supported one", h.Get("A2A-Extensions"))
	}
	req := e.raw
	_, h, _ = req(http.MethodGet, "/tasks", tokenAlice, nil, nil)
	if h.Get("A2A-Extensions") != "" {
		t.Fatalf("activated %q without a request", h.Get("A2A-Extensions"))
	}

	strict := newEnv(t, func(c *a2aConfig) { c.RequiredExtensions = []string{a2awire.ExtOutfitterTask} })
	status, _, body := strict.raw(http.MethodGet, "/tasks", tokenAlice, nil, nil)
	if _, st, reason := restError(t, body); status != http.StatusBadRequest || st != "FAILED_PRECONDITION" || reason != "EXTENSION_SUPPORT_REQUIRED" {
		t.Fatalf("required extension missing: %d %s", status, body)
	}
	r := strict.rpc(tokenAlice, "ListTasks", nil, nil)
	if r.Error == nil || r.Error.Code != -32008 {
		t.Fatalf("JSON-RPC required extension missing: %+v", r.Error)
	}
	if status, _, _ := strict.raw(http.MethodGet, "/tasks", tokenAlice, nil, map[string]string{"A2A-Extensions": a2awire.ExtOutfitterTask}); status != http.StatusOK {
		t.Fatalf("required extension activated: %d", status)
	}
	var card a2awire.AgentCard
	_, _, body = strict.raw(http.MethodGet, "/.well-known/agent-card.json", "", nil, nil)
	if err := json.Unmarshal(body, &card); err != nil || !card.Capabilities.Extensions[0].Required {
		t.Fatalf("card does not mark the extension required: %v %s", err, body)
	}
	if _, err := a2ahttp.NewServer(strict.plane, nil, nil, a2ahttp.Config{RequiredExtensions: []string{"https://example.com/x"}}); err == nil {
		t.Fatal("an unsupported required extension was accepted")
	}
}

func TestLimitsAndValidation(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) {
		c.Limits = a2awire.Limits{MaxBodyBytes: 4096, MaxParts: 2, MaxTextBytes: 16, MaxDataDepth: 3, MaxHistoryLength: 1}
	})
	part := func(p map[string]any) []byte {
		return sendBody(t, map[string]any{"messageId": "lim", "role": "ROLE_USER", "parts": []any{p}}, nil)
	}
	cases := []struct {
		name  string
		body  []byte
		field string
	}{
		{"body too large", sendBody(t, wireMsg("big", strings.Repeat("x", 5000)), nil), ""},
		{"text too long", part(map[string]any{"text": strings.Repeat("x", 17)}), "message.parts[0].text"},
		{"too many parts", sendBody(t, map[string]any{"messageId": "p", "role": "ROLE_USER", "parts": []any{
			map[string]any{"text": "a"}, map[string]any{"text": "b"}, map[string]any{"text": "c"}}}, nil), "message.parts"},
		{"data too deep", part(map[string]any{"data": map[string]any{"a": map[string]any{"b": map[string]any{"c": []any{1}}}}}), "message.parts[0].data"},
		{"two contents", part(map[string]any{"text": "a", "url": "https://example.com/"}), "message.parts[0]"},
		{"url not http", part(map[string]any{"url": "file:///etc/passwd"}), "message.parts[0].url"},
		{"bad base64", part(map[string]any{"raw": "%%%"}), "message.parts[0].raw"},
		{"no messageId", sendBody(t, map[string]any{"role": "ROLE_USER", "parts": []any{map[string]any{"text": "a"}}}, nil), "message.messageId"},
		{"agent role", sendBody(t, map[string]any{"messageId": "r", "role": "ROLE_AGENT", "parts": []any{map[string]any{"text": "a"}}}, nil), "message.role"},
		{"no parts", sendBody(t, map[string]any{"messageId": "r", "role": "ROLE_USER", "parts": []any{}}, nil), "message.parts"},
		{"negative historyLength", sendBody(t, wireMsg("h", "a"), map[string]any{"historyLength": -1}), "configuration.historyLength"},
		{"no message", []byte(`{}`), "message"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := e.raw(http.MethodPost, "/message:send", tokenAlice, tc.body, nil)
			_, st, reason := restError(t, body)
			if status != http.StatusBadRequest || st != "INVALID_ARGUMENT" || reason != "INVALID_PARAMS" {
				t.Fatalf("%d %s", status, body)
			}
			if tc.field != "" && !strings.Contains(string(body), `"field":"`+tc.field+`"`) {
				t.Fatalf("no violation of %s: %s", tc.field, body)
			}
		})
	}
	// Malformed JSON is a parse error, whatever its first byte; valid JSON that is not an object
	// is invalid params.
	for _, path := range []string{"/message:send", "/tasks/x:cancel"} {
		for _, b := range []string{`{"message":`, `hello`, `[1,`} {
			status, _, body := e.raw(http.MethodPost, path, tokenAlice, []byte(b), nil)
			if _, _, reason := restError(t, body); status != http.StatusBadRequest || reason != "PARSE_ERROR" {
				t.Fatalf("POST %s %s: %d %s, want PARSE_ERROR", path, b, status, body)
			}
		}
		status, _, body := e.raw(http.MethodPost, path, tokenAlice, []byte(`[1]`), nil)
		if _, _, reason := restError(t, body); status != http.StatusBadRequest || reason != "INVALID_PARAMS" {
			t.Fatalf("POST %s [1]: %d %s, want INVALID_PARAMS", path, status, body)
		}
	}
	// Snake_case names, numeric enums and quoted int32 are accepted (ProtoJSON).
	status, _, body := e.raw(http.MethodPost, "/message:send", tokenAlice,
		[]byte(`{"message":{"message_id":"snake-1","role":1,"parts":[{"text":"complete"}]},"configuration":{"history_length":"5"}}`), nil)
	if status != http.StatusOK {
		t.Fatalf("ProtoJSON variants: %d %s", status, body)
	}
	// MaxHistoryLength bounds the history whatever the caller asks for.
	task := decodeSendResponse(t, body).(*a2a.Task)
	if len(task.History) != 1 {
		t.Fatalf("history %d, want the server maximum 1", len(task.History))
	}
	// Unknown routes and methods; an empty custom verb is no route.
	for _, path := range []string{"/nothing/here/at/all", "/tasks/" + string(task.ID) + ":", "/tasks/" + string(task.ID) + ":nope"} {
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			if status, _, body := e.raw(m, path, tokenAlice, nil, nil); status != http.StatusNotFound {
				t.Fatalf("%s %s: %d %s, want 404", m, path, status, body)
			}
		}
	}
	if status, h, _ := e.raw(http.MethodDelete, "/tasks", tokenAlice, nil, nil); status != http.StatusMethodNotAllowed || h.Get("Allow") != "GET" {
		t.Fatalf("DELETE /tasks: %d %q", status, h.Get("Allow"))
	}
	// ListTasks query validation.
	for _, q := range []string{"pageSize=0", "pageSize=101", "status=TASK_STATE_NOPE", "historyLength=-1", "statusTimestampAfter=yesterday", "includeArtifacts=maybe"} {
		status, _, body := e.raw(http.MethodGet, "/tasks?"+q, tokenAlice, nil, nil)
		if _, _, reason := restError(t, body); status != http.StatusBadRequest || reason != "INVALID_PARAMS" {
			t.Fatalf("ListTasks %s: %d %s", q, status, body)
		}
	}
	// A token this server did not issue: not base64, or an encoded cursor that names nothing.
	for _, tok := range []string{"garbage", "e30", "eyJpIjoieCJ9"} {
		status, _, body := e.raw(http.MethodGet, "/tasks?pageToken="+tok, tokenAlice, nil, nil)
		if _, _, reason := restError(t, body); status != http.StatusBadRequest || reason != "INVALID_PARAMS" {
			t.Fatalf("pageToken %s: %d %s, want 400 INVALID_PARAMS", tok, status, body)
		}
	}
	// JSON-RPC envelope errors.
	v1 := map[string]string{"A2A-Version": "1.0"}
	for _, tc := range []struct {
		body    string
		code    int
		headers map[string]string
	}{
		{`{"jsonrpc":"2.0","id":1`, -32700, nil},
		{`1`, -32600, nil}, // valid JSON, not a Request object
		{`"GetTask"`, -32600, nil},
		{`null`, -32600, nil},
		{`[{"jsonrpc":"2.0","id":1,"method":"GetTask"}]`, -32600, nil},
		{`{"jsonrpc":"1.0","id":1,"method":"GetTask"}`, -32600, nil},
		{`{"jsonrpc":"2.0","id":{},"method":"GetTask"}`, -32600, nil},
		// A v0.3 method: with A2A-Version 1.0, a method v1 lacks; naming no version, a v0.3
		// request (SPEC §3.6), which this server does not speak.
		{`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}`, -32601, v1},
		{`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}`, -32009, nil},
		{`{"jsonrpc":"2.0","id":1,"method":"message/send","params":[1]}`, -32009, nil},
		{`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{}}`, -32602, nil},
		{`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":[1]}`, -32602, nil},
		// A method this server lacks is that, whatever its params.
		{`{"jsonrpc":"2.0","id":1,"method":"NoSuchMethod","params":[1,2]}`, -32601, nil},
		{`{"jsonrpc":"2.0","id":1,"method":"NoSuchMethod","params":"x"}`, -32601, v1},
		{`{"jsonrpc":"2.0","id":1,"method":"CreateTaskPushNotificationConfig","params":{"taskId":"x","url":"https://example.com"}}`, -32003, nil},
	} {
		status, _, body := e.raw(http.MethodPost, "/jsonrpc", tokenAlice, []byte(tc.body), tc.headers)
		var r rpcResponse
		if err := json.Unmarshal(body, &r); err != nil || status != http.StatusOK || r.Error == nil || r.Error.Code != tc.code {
			t.Fatalf("%s: %d %s, want code %d", tc.body, status, body, tc.code)
		}
	}
	// An unknown method's name comes back as an excerpt, not whole.
	long := `{"jsonrpc":"2.0","id":1,"method":"` + strings.Repeat("M", 3_900) + `"}` // within this server's 4 KiB body limit
	if status, _, body := e.raw(http.MethodPost, "/jsonrpc", tokenAlice, []byte(long), v1); status != http.StatusOK || len(body) > 1024 ||
		!strings.Contains(string(body), "-32601") {
		t.Fatalf("a long unknown method: %d, %d bytes: %.300s", status, len(body), body)
	}
	// Every v1 method checks its params' shape: none is taken for a method this server lacks.
	for _, m := range []string{"SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask",
		"SubscribeToTask", "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
		"ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig", "GetExtendedAgentCard"} {
		status, _, body := e.raw(http.MethodPost, "/jsonrpc", tokenAlice, []byte(`{"jsonrpc":"2.0","id":1,"method":"`+m+`","params":[1]}`), nil)
		var r rpcResponse
		if err := json.Unmarshal(body, &r); err != nil || status != http.StatusOK || r.Error == nil || r.Error.Code != -32602 {
			t.Fatalf("%s with params [1]: %d %s, want code -32602", m, status, body)
		}
	}
}

func TestPushNotificationsNotSupported(t *testing.T) {
	e := newEnv(t)
	for _, rt := range []struct{ method, path string }{
		{http.MethodPost, "/tasks/t1/pushNotificationConfigs"},
		{http.MethodGet, "/tasks/t1/pushNotificationConfigs"},
		{http.MethodGet, "/tasks/t1/pushNotificationConfigs/c1"},
		{http.MethodDelete, "/tasks/t1/pushNotificationConfigs/c1"},
	} {
		var body []byte
		if rt.method == http.MethodPost {
			body = []byte(`{"url":"https://example.com/hook"}`)
		}
		status, _, rb := e.raw(rt.method, rt.path, tokenAlice, body, nil)
		if _, _, reason := restError(t, rb); status != http.StatusBadRequest || reason != "PUSH_NOTIFICATION_NOT_SUPPORTED" {
			t.Fatalf("%s %s: %d %s", rt.method, rt.path, status, rb)
		}
	}
	c := e.client(a2awire.BindingJSONRPC, tokenAlice)
	if _, err := c.ListTaskPushConfigs(ctxT(t), &a2a.ListTaskPushConfigRequest{TaskID: "t1"}); !errors.Is(err, a2a.ErrPushNotificationNotSupported) {
		t.Fatalf("JSON-RPC: %v", err)
	}
	// A send asking for push delivery is refused the same way.
	status, _, rb := e.raw(http.MethodPost, "/message:send", tokenAlice, sendBody(t, wireMsg("push-1", "complete"),
		map[string]any{"taskPushNotificationConfig": map[string]any{"url": "https://example.com/hook"}}), nil)
	if _, _, reason := restError(t, rb); status != http.StatusBadRequest || reason != "PUSH_NOTIFICATION_NOT_SUPPORTED" {
		t.Fatalf("send with push config: %d %s", status, rb)
	}
}

func TestTenantPrefix(t *testing.T) {
	e := newEnv(t)
	status, _, body := e.raw(http.MethodPost, "/acme/message:send", tokenAlice, sendBody(t, wireMsg("tenant-1", "complete"), nil),
		map[string]string{"A2A-Extensions": a2awire.ExtOutfitterTask})
	if status != http.StatusOK {
		t.Fatalf("%d %s", status, body)
	}
	task := decodeSendResponse(t, body).(*a2a.Task)
	loc := task.Metadata[a2awire.ExtOutfitterTask].(map[string]any)
	if loc["tenant"] != "acme" {
		t.Fatalf("locator %v", loc)
	}
	if status, _, body := e.raw(http.MethodGet, "/acme/tasks/"+string(task.ID), tokenAlice, nil, nil); status != http.StatusOK {
		t.Fatalf("tenant GetTask: %d %s", status, body)
	}
}

// A REST tenant — path prefix or ?tenant= — is bounded by MaxIDBytes on every route, as the
// body's is: it is copied into every task's locator, so an unbounded one made a ListTasks answer
// twenty times its length. The refusal is the body tenant's INVALID_PARAMS, does not echo the
// tenant, and stores nothing.
func TestRESTTenantIsBoundedByMaxIDBytes(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("t", 513)
	ext := map[string]string{"A2A-Extensions": a2awire.ExtOutfitterTask}
	body, _ := json.Marshal(map[string]any{"tenant": long, "message": wireMsg("ten-body", "complete")})
	status, _, b := e.raw(http.MethodPost, "/message:send", tokenAlice, body, ext)
	_, _, want := restError(t, b)
	if status != http.StatusBadRequest || want == "" {
		t.Fatalf("body tenant of 513 bytes: %d %s (control: want 400)", status, b)
	}
	task := send(t, e.client(a2awire.BindingHTTPJSON, tokenAlice), userMessage("complete"), nil)
	for _, c := range []struct {
		method, path string
		body         []byte
	}{
		{http.MethodPost, "/" + long + "/message:send", sendBody(t, wireMsg("ten-path", "complete"), nil)},
		{http.MethodPost, "/message:send?tenant=" + long, sendBody(t, wireMsg("ten-query", "complete"), nil)},
		{http.MethodPost, "/" + long + "/message:stream", sendBody(t, wireMsg("ten-stream", "complete"), nil)},
		{http.MethodGet, "/tasks/" + string(task.ID) + "?tenant=" + long, nil},
		{http.MethodGet, "/" + long + "/tasks/" + string(task.ID), nil},
		{http.MethodGet, "/" + long + "/tasks?pageSize=20", nil},
		{http.MethodPost, "/" + long + "/tasks/" + string(task.ID) + ":cancel", nil},
		{http.MethodGet, "/" + long + "/tasks/" + string(task.ID) + ":subscribe", nil},
		{http.MethodGet, "/" + long + "/extendedAgentCard", nil},
	} {
		status, _, b := e.raw(c.method, c.path, tokenAlice, c.body, ext)
		if status != http.StatusBadRequest {
			t.Errorf("%s %s…: %d, want 400 (echoed: %v)", c.method, c.path[:40], status, strings.Contains(string(b), long))
			continue
		}
		if _, _, reason := restError(t, b); reason != want || strings.Contains(string(b), long) {
			t.Errorf("%s %s…: %s, want %s without the tenant echoed", c.method, c.path[:40], b, want)
		}
	}
	if _, n, err := e.store.ListTasks(context.Background(), "alice", store.TaskFilter{}); err != nil || n != 1 {
		t.Fatalf("alice's tasks after the refused sends: %d (%v), want only the one sent without a tenant", n, err)
	}
	// MaxIDBytes itself is allowed.
	status, _, b = e.raw(http.MethodGet, "/"+long[:512]+"/tasks/"+string(task.ID), tokenAlice, nil, ext)
	if status != http.StatusOK || !strings.Contains(string(b), long[:512]) {
		t.Fatalf("a tenant of 512 bytes: %d %.200s", status, b)
	}
}

// TestShutdownEndsStreams: closing the server ends open streams and blocking sends.
func TestShutdownEndsStreams(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) { c.BlockingTimeout = time.Hour })
	c := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	task := send(t, c, userMessage("gate"), &a2a.SendMessageConfig{ReturnImmediately: true})
	s, status, body := e.openSSE(ctxT(t), http.MethodGet, "/tasks/"+string(task.ID)+":subscribe", tokenAlice, nil, nil)
	if s == nil {
		t.Fatalf("%d %s", status, body)
	}
	s.next()
	blocked := make(chan *a2a.Task, 1)
	go func() {
		res, err := c.SendMessage(context.Background(), &a2a.SendMessageRequest{Message: userMessage("gate")})
		if err != nil {
			blocked <- nil
			return
		}
		blocked <- res.(*a2a.Task)
	}()
	time.Sleep(100 * time.Millisecond)
	ended := make(chan struct{})
	go func() {
		s.all()
		close(ended)
	}()
	e.srv.Close()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end on Close")
	}
	select {
	case tk := <-blocked:
		if tk == nil || tk.Status.State.Terminal() {
			t.Fatalf("blocking send after Close: %+v", tk)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocking send did not return on Close")
	}
}

// TestAStreamingSendAcceptedAfterCloseStillSendsTheTask: a streaming send accepted once the
// service has closed (a request in flight at shutdown) answers a stream that ends at once, but
// its first event, the Task it made, is always there.
func TestAStreamingSendAcceptedAfterCloseStillSendsTheTask(t *testing.T) {
	e := newEnv(t)
	e.srv.Close()
	const sends = 1000
	empty := 0
	for i := 0; i < sends; i++ {
		s, status, body := e.openSSE(ctxT(t), http.MethodPost, "/message:stream", tokenAlice,
			sendBody(t, wireMsg(fmt.Sprintf("after-close-%d", i), "complete"), nil), nil)
		if s == nil {
			t.Fatalf("%d %s", status, body)
		}
		evs := s.all()
		s.close()
		if len(evs) == 0 {
			empty++
			continue
		}
		if k, st := kind(t, evs[0].Data); k != "task" || st != "TASK_STATE_SUBMITTED" {
			t.Fatalf("first event %s %s, want the task as accepted (SUBMITTED)", k, st)
		}
	}
	if empty > 0 {
		t.Fatalf("%d of %d accepted streaming sends answered an empty stream (no Task event)", empty, sends)
	}
}

// TestConformanceAgent runs part of the tck-sut-contract through both bindings with the
// conformance executor.
func TestConformanceAgent(t *testing.T) {
	ce := newEnvExec(t, openSQLiteAt(t, filepath.Join(t.TempDir(), "c.db")), nil, conformance.New())
	forEachBinding(t, func(t *testing.T, binding string) {
		c := ce.client(binding, tokenAlice)
		id := func(prefix string) string {
			return prefix + "-" + strings.ToLower(bindingName(binding)) + "-" + a2a.NewMessageID()[:8]
		}
		m := userMessage("hi")
		m.ID = id("tck-complete-task")
		task := send(t, c, m, nil)
		if task.Status.State != a2a.TaskStateCompleted || task.Status.Message.Parts[0].Text() != "Hello from TCK" {
			t.Fatalf("tck-complete-task: %+v", task.Status)
		}
		m = userMessage("hi")
		m.ID = id("tck-message-response")
		res, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m})
		if err != nil {
			t.Fatal(err)
		}
		if msg, ok := res.(*a2a.Message); !ok || msg.Parts[0].Text() != "Direct message response" {
			t.Fatalf("tck-message-response: %#v", res)
		}
		m = userMessage("hi")
		m.ID = id("tck-artifact-file")
		task = send(t, c, m, nil)
		if len(task.Artifacts) != 1 || string(task.Artifacts[0].Parts[0].Raw()) != "tck" {
			t.Fatalf("tck-artifact-file: %+v", task.Artifacts)
		}
		m = userMessage("hi")
		m.ID = id("tck-stream-artifact-chunked")
		var appends []bool
		for ev, err := range c.SendStreamingMessage(ctxT(t), &a2a.SendMessageRequest{Message: m}) {
			if err != nil {
				t.Fatal(err)
			}
			if au, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok {
				appends = append(appends, au.Append)
			}
		}
		if len(appends) != 2 {
			t.Fatalf("chunked artifact events %v", appends)
		}
		m = userMessage("hi")
		m.ID = id("tck-input-required")
		task = send(t, c, m, nil)
		if task.Status.State != a2a.TaskStateInputRequired {
			t.Fatalf("tck-input-required: %s", task.Status.State)
		}
		canceled, err := c.CancelTask(ctxT(t), &a2a.CancelTaskRequest{ID: task.ID})
		if err != nil || canceled.Status.State != a2a.TaskStateCanceled {
			t.Fatalf("cancel: %v %+v", err, canceled)
		}
		m = userMessage("hi")
		m.ID = id("tck-reject-task")
		task = send(t, c, m, nil)
		if !task.Status.State.Terminal() {
			t.Fatalf("tck-reject-task: %s", task.Status.State)
		}
	})
}

// TestLoadCredentials reads the credentials file format.
func TestLoadCredentials(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "creds.json")
	if err := os.WriteFile(path, []byte(`{"credentials":[{"token":"t1","principal":"p1"},{"token":"t2","principal":"p2"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := a2ahttp.LoadCredentials(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]a2ahttp.Credential{{Token: "t1", Principal: "p1"}, {Token: "t2", Principal: "p2"}}, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if err := os.WriteFile(path, []byte(`{"credentials":[{"token":"","principal":"p1"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a2ahttp.LoadCredentials(path); err == nil {
		t.Fatal("an empty token was accepted")
	}
	if _, err := a2ahttp.LoadCredentials(filepath.Join(dir, "missing.json")); err == nil {
		t.Fatal("a missing file was accepted")
	}
}

// TestLoadCredentialsRefusesAFileThatYieldsNoCredentials: a misspelt key, an unknown field in
// an entry, an empty object or an empty list is an error, never "no credentials" (which opens a
// loopback server to anonymous callers); so are a repeated token and the reserved anonymous
// principal, which the service refuses too. No error quotes a token.
func TestLoadCredentialsRefusesAFileThatYieldsNoCredentials(t *testing.T) {
	const token = "s3cr3t-token-0123456789"
	cases := map[string]string{
		"misspelt key":          `{"credential":[{"token":"` + token + `","principal":"alice"}]}`,
		"unknown entry field":   `{"credentials":[{"token":"` + token + `","principal":"alice","principle":"bob"}]}`,
		"empty object":          `{}`,
		"empty list":            `{"credentials":[]}`,
		"null list":             `{"credentials":null}`,
		"repeated token":        `{"credentials":[{"token":"` + token + `","principal":"alice"},{"token":"` + token + `","principal":"bob"}]}`,
		"anonymous principal":   `{"credentials":[{"token":"` + token + `","principal":"anonymous"}]}`,
		"trailing second value": `{"credentials":[{"token":"` + token + `","principal":"alice"}]} {"credentials":[]}`,
	}
	dir := t.TempDir()
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := a2ahttp.LoadCredentials(path)
			if err == nil {
				t.Fatalf("loaded %d credentials", len(got))
			}
			if strings.Contains(err.Error(), token) {
				t.Fatalf("the error quotes the token: %v", err)
			}
		})
	}
}

// TestLoadCredentialsNamesEveryBadEntry: a file with several bad entries is refused with each
// of them named, so fixing one does not merely reveal the next.
func TestLoadCredentialsNamesEveryBadEntry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "credentials.json")
	body := `{"credentials":[{"token":"t0","principal":"alice"},{"token":"","principal":"bob"},{"token":"t2"},{"token":"t0","principal":"carol"},{"token":"t4","principal":"anonymous"}]}`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := a2ahttp.LoadCredentials(path)
	if err == nil {
		t.Fatal("loaded a file with four bad entries")
	}
	for _, want := range []string{"credential 1 has no token", "credential 2 has no principal", "credential 3 repeats the token of credential 0", "credential 4: principal"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q spans lines", err)
	}
}

// TestAnEmptyCredentialsListDoesNotOpenLoopbackToAnonymousCallers: anonymous access on loopback
// depends on whether credentials are configured (Credentials nil), not on how many there are.
func TestAnEmptyCredentialsListDoesNotOpenLoopbackToAnonymousCallers(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) { c.Credentials, c.Loopback = []a2ahttp.Credential{}, true })
	if status, _, _ := e.raw(http.MethodGet, "/tasks", "", nil, nil); status != http.StatusUnauthorized {
		t.Fatalf("anonymous ListTasks with an empty credentials list on loopback: %d", status)
	}
}

// TestServerRefusesAPublicURLWithUserinfoQueryOrFragment: the card's URLs are built from the
// public URL, so one with a user and password, a query or a fragment is refused, and the error
// does not quote the password.
func TestServerRefusesAPublicURLWithUserinfoQueryOrFragment(t *testing.T) {
	plane := taskplane.New(storetest.OpenSQLite(t))
	for _, raw := range []string{
		"https://user:PUBPASSWORD@agents.example.com/a2a",
		"https://agents.example.com/a2a?x=1",
		"https://agents.example.com/a2a#frag",
		"https://agents.example.com/a2a#",
		"ftp://user:PUBPASSWORD@agents.example.com/",
	} {
		_, err := a2ahttp.NewServer(plane, nil, nil, a2ahttp.Config{PublicURL: raw, Loopback: true})
		if err == nil {
			t.Errorf("%q accepted", raw)
		} else if strings.Contains(err.Error(), "PUBPASSWORD") {
			t.Errorf("the error quotes the password: %v", err)
		}
	}
	if _, err := a2ahttp.NewServer(plane, nil, nil, a2ahttp.Config{PublicURL: "https://agents.example.com/a2a/", Loopback: true}); err != nil {
		t.Fatalf("a base URL with a path: %v", err)
	}
}

// TestStreamsKeepAliveAndFanOut: keep-alive comments flow while a task is quiet, several
// subscribers see the same events in the same order, and a stream stays open through
// AUTH_REQUIRED.
func TestStreamsKeepAliveAndFanOut(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) { c.KeepAlive = 50 * time.Millisecond })
	c := e.client(a2awire.BindingHTTPJSON, tokenAlice)

	t.Run("keep-alive", func(t *testing.T) {
		task := send(t, c, userMessage("gate"), &a2a.SendMessageConfig{ReturnImmediately: true})
		defer e.exec.release(string(task.ID))
		s, status, body := e.openSSE(ctxT(t), http.MethodGet, "/tasks/"+string(task.ID)+":subscribe", tokenAlice, nil, nil)
		if s == nil {
			t.Fatalf("%d %s", status, body)
		}
		defer s.close()
		for s.sc.Scan() {
			if s.sc.Text() == ": keep-alive" {
				return
			}
		}
		t.Fatal("no keep-alive comment")
	})

	t.Run("fan-out", func(t *testing.T) {
		task := send(t, c, userMessage("gate"), &a2a.SendMessageConfig{ReturnImmediately: true})
		waitHeld(t, c, task.ID)
		const n = 4
		results := make(chan []string, n)
		for i := 0; i < n; i++ {
			s, status, body := e.openSSE(ctxT(t), http.MethodGet, "/tasks/"+string(task.ID)+":subscribe", tokenAlice, nil, nil)
			if s == nil {
				t.Fatalf("%d %s", status, body)
			}
			s.next() // the snapshot
			go func() {
				var got []string
				for _, ev := range s.all() {
					got = append(got, ev.ID+" "+ev.Data)
				}
				results <- got
			}()
		}
		e.exec.release(string(task.ID))
		var first []string
		for i := 0; i < n; i++ {
			got := <-results
			if i == 0 {
				first = got
				continue
			}
			if diff := cmp.Diff(first, got); diff != "" {
				t.Fatalf("subscriber %d saw another sequence (-first +got):\n%s", i, diff)
			}
		}
		if len(first) != 3 {
			t.Fatalf("events %v", first)
		}
	})

	t.Run("auth-required stays open", func(t *testing.T) {
		body := sendBody(t, wireMsg("auth-stream-1", "auth"), nil)
		s, status, rb := e.openSSE(ctxT(t), http.MethodPost, "/message:stream", tokenAlice, body, nil)
		if s == nil {
			t.Fatalf("%d %s", status, rb)
		}
		defer s.close()
		var taskID string
		for {
			ev, ok := s.next()
			if !ok {
				t.Fatal("the stream closed at AUTH_REQUIRED")
			}
			k, st := kind(t, ev.Data)
			if k == "task" {
				var sr a2a.StreamResponse
				_ = json.Unmarshal([]byte(ev.Data), &sr)
				taskID = string(sr.Event.(*a2a.Task).ID)
			}
			if st == "TASK_STATE_AUTH_REQUIRED" {
				break
			}
		}
		m := userMessage("signed in")
		m.TaskID = a2a.TaskID(taskID)
		send(t, c, m, &a2a.SendMessageConfig{ReturnImmediately: true})
		var last string
		for _, ev := range s.all() {
			_, st := kind(t, ev.Data)
			last = st
		}
		if last != "TASK_STATE_COMPLETED" {
			t.Fatalf("stream ended at %q", last)
		}
	})
}

// Another principal's task answers exactly as a missing one does — status, headers that matter
// and body, the id aside — on every task operation of both bindings.
func TestForeignTaskLooksExactlyLikeAMissingOne(t *testing.T) {
	e := newEnv(t)
	c := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	task := send(t, c, userMessage("complete"), nil)
	foreign, missing := string(task.ID), "no-such-task-0000000000000000000"
	// The error's timestamp is the second it was made: two answers a second boundary apart differ
	// there and nowhere else.
	stamp := regexp.MustCompile(`"timestamp":"[^"]*"`)
	same := func(what string, a, b []byte) {
		t.Helper()
		x := stamp.ReplaceAllString(strings.ReplaceAll(string(a), foreign, "ID"), `"timestamp":"T"`)
		y := stamp.ReplaceAllString(strings.ReplaceAll(string(b), missing, "ID"), `"timestamp":"T"`)
		if x != y {
			t.Errorf("%s: foreign task answered\n%s\nmissing task answered\n%s", what, x, y)
		}
	}
	for _, rt := range []struct{ method, path string }{
		{http.MethodGet, "/tasks/%s"},
		{http.MethodPost, "/tasks/%s:cancel"},
		{http.MethodGet, "/tasks/%s:subscribe"},
	} {
		fs, fh, fb := e.raw(rt.method, fmt.Sprintf(rt.path, foreign), tokenBob, nil, nil)
		ms, mh, mb := e.raw(rt.method, fmt.Sprintf(rt.path, missing), tokenBob, nil, nil)
		if fs != ms || fh.Get("Content-Type") != mh.Get("Content-Type") || fs != http.StatusNotFound {
			t.Errorf("%s %s: foreign %d %s, missing %d %s", rt.method, rt.path, fs, fh.Get("Content-Type"), ms, mh.Get("Content-Type"))
		}
		same(rt.method+" "+rt.path, fb, mb)
	}
	for _, m := range []string{"GetTask", "CancelTask", "SubscribeToTask"} {
		fr := e.rpc(tokenBob, m, map[string]any{"id": foreign}, nil)
		mr := e.rpc(tokenBob, m, map[string]any{"id": missing}, nil)
		fj, _ := json.Marshal(fr)
		mj, _ := json.Marshal(mr)
		if fr.Error == nil {
			t.Errorf("JSON-RPC %s of a foreign task succeeded", m)
		}
		same("JSON-RPC "+m, fj, mj)
	}
	// A continuation naming the foreign task is refused the same way as one naming a missing task.
	for _, id := range []string{foreign, missing} {
		m := userMessage("hijack-" + id[:8])
		m.TaskID = a2a.TaskID(id)
		_, err := e.client(a2awire.BindingHTTPJSON, tokenBob).SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m})
		if !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("continuation of %s: %v, want TaskNotFound", id, err)
		}
	}
}

// TestStreamsAreBoundedPerCallerAndInTotal: a stream past max_streams_per_principal or
// max_streams is refused before it opens (RESOURCE_EXHAUSTED: HTTP 429 on HTTP+JSON, an error
// event on JSON-RPC) and accepts nothing; a closed stream gives its slot back.
func TestStreamsAreBoundedPerCallerAndInTotal(t *testing.T) {
	const tokenCarol = "carol-token-0123456789"
	e := newEnv(t, func(c *a2aConfig) {
		c.Limits.MaxStreams, c.Limits.MaxStreamsPerPrincipal = 2, 1
		c.Credentials = append(c.Credentials, a2ahttp.Credential{Token: tokenCarol, Principal: "carol"})
	})
	alice, bob := e.client(a2awire.BindingHTTPJSON, tokenAlice), e.client(a2awire.BindingHTTPJSON, tokenBob)
	aTask := send(t, alice, userMessage("gate"), &a2a.SendMessageConfig{ReturnImmediately: true})
	defer e.exec.release(string(aTask.ID))
	bTask := send(t, bob, userMessage("gate"), &a2a.SendMessageConfig{ReturnImmediately: true})
	defer e.exec.release(string(bTask.ID))
	subscribe := func(ctx context.Context, token string, id a2a.TaskID) (*sseStream, int, []byte) {
		return e.openSSE(ctx, http.MethodGet, "/tasks/"+string(id)+":subscribe", token, nil, nil)
	}
	wantExhausted := func(what string, s *sseStream, status int, body []byte) {
		t.Helper()
		if s != nil || status != http.StatusTooManyRequests || !strings.Contains(string(body), `"reason":"RESOURCE_EXHAUSTED"`) {
			t.Fatalf("%s: stream %v, status %d, body %s; want 429 RESOURCE_EXHAUSTED", what, s != nil, status, body)
		}
	}

	ctxA, cancelA := context.WithCancel(ctxT(t))
	sA, status, body := subscribe(ctxA, tokenAlice, aTask.ID)
	if sA == nil {
		t.Fatalf("alice's first stream: %d %s", status, body)
	}
	sA.next()
	// Alice is at her bound: a second subscribe, and a streaming send, are refused, and the
	// refused send accepted nothing.
	s, status, body := subscribe(ctxT(t), tokenAlice, aTask.ID)
	wantExhausted("alice's second subscribe", s, status, body)
	s, status, body = e.openSSE(ctxT(t), http.MethodPost, "/message:stream", tokenAlice, sendBody(t, wireMsg("bounded-1", "hello"), nil), nil)
	wantExhausted("alice's streaming send", s, status, body)
	if _, err := alice.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: aTask.ID}); err != nil {
		t.Fatal(err)
	}
	rpc, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "s1", "method": "SubscribeToTask", "params": map[string]any{"id": aTask.ID}})
	if s, status, body := e.openSSE(ctxT(t), http.MethodPost, "/jsonrpc", tokenAlice, rpc, nil); s == nil {
		t.Fatalf("JSON-RPC subscribe: %d %s", status, body)
	} else if evs := s.all(); len(evs) != 1 || !strings.Contains(evs[0].Data, "RESOURCE_EXHAUSTED") {
		t.Fatalf("JSON-RPC subscribe past the bound: %+v; want one RESOURCE_EXHAUSTED error event", evs)
	}
	// Bob takes the last slot of the server; then even a caller under their own bound is refused.
	ctxB, cancelB := context.WithCancel(ctxT(t))
	defer cancelB()
	sB, status, body := subscribe(ctxB, tokenBob, bTask.ID)
	if sB == nil {
		t.Fatalf("bob's stream: %d %s", status, body)
	}
	sB.next()
	s, status, body = subscribe(ctxT(t), tokenCarol, "any-task")
	wantExhausted("carol's first stream while the server is at its bound", s, status, body)
	cancelA()
	sA.close()
	// Alice's slot comes back once her stream has ended on the server.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, status, body := subscribe(ctxT(t), tokenAlice, aTask.ID)
		if s != nil {
			s.close()
			break
		}
		if status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("alice after closing her stream: %d %s", status, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
