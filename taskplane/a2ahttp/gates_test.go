package a2ahttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/google/go-cmp/cmp"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

func decodeTask(t *testing.T, b []byte) *a2a.Task {
	t.Helper()
	var task a2a.Task
	if err := json.Unmarshal(b, &task); err != nil {
		t.Fatalf("decode task: %v: %s", err, b)
	}
	return &task
}

func decodeSendResponse(t *testing.T, b []byte) a2a.Event {
	t.Helper()
	var sr a2a.StreamResponse
	if err := json.Unmarshal(b, &sr); err != nil {
		t.Fatalf("decode SendMessageResponse: %v: %s", err, b)
	}
	return sr.Event
}

// counterIDs returns an id generator that yields id-1, id-2, … — two planes given one each mint
// the same ids for the same sequence of operations.
func counterIDs() func() string {
	var n atomic.Int64
	return func() string { return fmt.Sprintf("id-%d", n.Add(1)) }
}

// Gate: equal task ids from two servers do not collide — the outfitter-task/v1 locator tells
// them apart.
func TestGateEqualTaskIDsDoNotCollide(t *testing.T) {
	a := newEnvOn(t, openSQLiteAt(t, filepath.Join(t.TempDir(), "a.db")), []taskplane.Option{taskplane.WithIDs(counterIDs())})
	b := newEnvOn(t, openSQLiteAt(t, filepath.Join(t.TempDir(), "b.db")), []taskplane.Option{taskplane.WithIDs(counterIDs())})
	ext := map[string]string{"A2A-Extensions": a2awire.ExtOutfitterTask}

	type locator struct {
		InterfaceURL    string `json:"interfaceUrl"`
		ProtocolBinding string `json:"protocolBinding"`
		ProtocolVersion string `json:"protocolVersion"`
		TaskID          string `json:"taskId"`
	}
	seen := map[locator]string{}
	var ids []a2a.TaskID
	for i, e := range []*env{a, b} {
		status, h, body := e.raw(http.MethodPost, "/message:send", tokenAlice, sendBody(t, wireMsg("same-message", "complete"), nil), ext)
		if status != http.StatusOK {
			t.Fatalf("server %d: %d %s", i, status, body)
		}
		if h.Get("A2A-Extensions") != a2awire.ExtOutfitterTask {
			t.Fatalf("server %d did not echo the activated extension: %q", i, h.Get("A2A-Extensions"))
		}
		task := decodeSendResponse(t, body).(*a2a.Task)
		ids = append(ids, task.ID)
		raw, err := json.Marshal(task.Metadata[a2awire.ExtOutfitterTask])
		if err != nil {
			t.Fatal(err)
		}
		var loc locator
		if err := json.Unmarshal(raw, &loc); err != nil || loc.TaskID != string(task.ID) {
			t.Fatalf("server %d locator %s", i, raw)
		}
		if loc.InterfaceURL != e.URL || loc.ProtocolBinding != "HTTP+JSON" || loc.ProtocolVersion != "1.0" {
			t.Fatalf("server %d locator %+v", i, loc)
		}
		seen[loc] = e.URL
	}
	if ids[0] != ids[1] {
		t.Fatalf("precondition: the two servers minted different ids %v", ids)
	}
	if len(seen) != 2 {
		t.Fatalf("equal task ids %s collide: %d distinct locators", ids[0], len(seen))
	}
	// Without the extension there is no locator.
	status, _, body := a.raw(http.MethodGet, "/tasks/"+string(ids[0]), tokenAlice, nil, nil)
	if status != http.StatusOK {
		t.Fatalf("GetTask: %d %s", status, body)
	}
	if _, ok := decodeTask(t, body).Metadata[a2awire.ExtOutfitterTask]; ok {
		t.Fatal("locator sent to a caller that did not activate the extension")
	}
	// JSON-RPC locators name the JSON-RPC interface.
	r := a.rpc(tokenAlice, "GetTask", map[string]any{"id": ids[0]}, ext)
	var task a2a.Task
	if err := json.Unmarshal(r.Result, &task); err != nil {
		t.Fatal(err)
	}
	loc, _ := task.Metadata[a2awire.ExtOutfitterTask].(map[string]any)
	if loc["interfaceUrl"] != a.URL+"/jsonrpc" || loc["protocolBinding"] != "JSONRPC" {
		t.Fatalf("JSON-RPC locator %v", loc)
	}
}

func openSQLiteAt(t *testing.T, path string) store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := store.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Gate: a foreign contextId does not join local work. Contexts belong to their principal: bob
// naming alice's contextId gets a fresh context of his own under that id (the server never
// substitutes a contextId), holding only his work, and alice's context is unchanged.
func TestGateForeignContextDoesNotJoin(t *testing.T) {
	e := newEnv(t)
	forEachBinding(t, func(t *testing.T, binding string) {
		alice, bob := e.client(binding, tokenAlice), e.client(binding, tokenBob)
		mine := send(t, alice, userMessage("input"), nil)

		m := userMessage("complete")
		m.ContextID = mine.ContextID
		theirs := send(t, bob, m, nil)
		if theirs.ContextID != mine.ContextID {
			t.Fatalf("bob's contextId %s was replaced by %s", mine.ContextID, theirs.ContextID)
		}
		list, err := alice.ListTasks(ctxT(t), &a2a.ListTasksRequest{ContextID: mine.ContextID})
		if err != nil {
			t.Fatal(err)
		}
		if list.TotalSize != 1 || list.Tasks[0].ID != mine.ID {
			t.Fatalf("alice's context holds %d tasks", list.TotalSize)
		}
		list, err = bob.ListTasks(ctxT(t), &a2a.ListTasksRequest{ContextID: mine.ContextID})
		if err != nil {
			t.Fatal(err)
		}
		if list.TotalSize != 1 || list.Tasks[0].ID != theirs.ID {
			t.Fatalf("bob's context of that id holds %d tasks, want his 1", list.TotalSize)
		}
		got, err := alice.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: mine.ID})
		if err != nil || len(got.History) != 2 {
			t.Fatalf("alice's task changed: %v %+v", err, got)
		}
		// An unknown contextId names a fresh context of the caller's, under that id.
		m = userMessage("complete")
		m.ContextID = "made-up-context-" + binding
		if fresh := send(t, alice, m, nil); fresh.ContextID != m.ContextID {
			t.Fatalf("unknown contextId %q became %q", m.ContextID, fresh.ContextID)
		}
		// The server's own contextId joins: same principal, same context.
		m = userMessage("complete")
		m.ContextID = mine.ContextID
		if again := send(t, alice, m, nil); again.ContextID != mine.ContextID {
			t.Fatalf("alice's own context was not joined: %s", again.ContextID)
		}
	})
}

// Gate: a reconnect can miss transient messages without losing critical state. A subscriber
// that reconnects without Last-Event-ID gets the current Task — state and artifacts — and not
// the transient progress it missed; with Last-Event-ID it gets every missed event once.
func TestGateReconnectMissesTransientKeepsCriticalState(t *testing.T) {
	e := newEnv(t)
	c := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	task := send(t, c, userMessage("progress"), &a2a.SendMessageConfig{ReturnImmediately: true})
	waitHeld(t, c, task.ID)

	// Subscribe, read the snapshot, disconnect.
	ctx, cancel := context.WithCancel(ctxT(t))
	s, status, body := e.openSSE(ctx, http.MethodGet, "/tasks/"+string(task.ID)+":subscribe", tokenAlice, nil, nil)
	if s == nil {
		t.Fatalf("subscribe: %d %s", status, body)
	}
	first, ok := s.next()
	if k, st := kind(t, first.Data); !ok || k != "task" || st != "TASK_STATE_WORKING" {
		t.Fatalf("first event %+v", first)
	}
	s.close()
	cancel()

	// While nobody listens: transient progress, an artifact, then INPUT_REQUIRED.
	e.exec.release(string(task.ID))
	waitState(t, c, task.ID, a2a.TaskStateInputRequired)

	// Reconnect without Last-Event-ID: the snapshot holds the critical state.
	ctx2, cancel2 := context.WithCancel(ctxT(t))
	defer cancel2()
	s2, status, body := e.openSSE(ctx2, http.MethodGet, "/tasks/"+string(task.ID)+":subscribe", tokenAlice, nil, nil)
	if s2 == nil {
		t.Fatalf("resubscribe: %d %s", status, body)
	}
	defer s2.close()
	snap, _ := s2.next()
	var sr a2a.StreamResponse
	if err := json.Unmarshal([]byte(snap.Data), &sr); err != nil {
		t.Fatal(err)
	}
	st, ok := sr.Event.(*a2a.Task)
	if !ok || st.Status.State != a2a.TaskStateInputRequired || len(st.Artifacts) != 1 {
		t.Fatalf("snapshot after reconnect: %s", snap.Data)
	}
	if seq(t, snap.ID) <= seq(t, first.ID) {
		t.Fatalf("snapshot id %s does not advance past %s", snap.ID, first.ID)
	}

	// With Last-Event-ID from the first connection, every missed event arrives, once.
	ctx3, cancel3 := context.WithCancel(ctxT(t))
	defer cancel3()
	s3, status, body := e.openSSE(ctx3, http.MethodGet, "/tasks/"+string(task.ID)+":subscribe", tokenAlice, nil,
		map[string]string{"Last-Event-ID": first.ID})
	if s3 == nil {
		t.Fatalf("resume: %d %s", status, body)
	}
	var got []string
	for _, ev := range s3.all() {
		k, state := kind(t, ev.Data)
		got = append(got, k+" "+state)
		if seq(t, ev.ID) <= seq(t, first.ID) {
			t.Fatalf("replayed event %s is not after Last-Event-ID %s", ev.ID, first.ID)
		}
	}
	want := []string{"statusUpdate TASK_STATE_WORKING", "artifactUpdate ", "statusUpdate TASK_STATE_INPUT_REQUIRED"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("resumed events (-want +got):\n%s", diff)
	}

	// The reconnected subscriber stays open on INPUT_REQUIRED and sees the continuation through.
	m := userMessage("here you go")
	m.TaskID = task.ID
	send(t, c, m, &a2a.SendMessageConfig{ReturnImmediately: true})
	var last string
	for _, ev := range s2.all() {
		k, state := kind(t, ev.Data)
		last = k + " " + state
	}
	if last != "statusUpdate TASK_STATE_COMPLETED" {
		t.Fatalf("reconnected stream ended with %q", last)
	}
}

// Gate: a direct Message and its duplicate. The duplicate, and a reuse of its messageId with
// another payload, are answered from the claim: the agent is asked for a direct reply once.
func TestGateDirectMessageAndDuplicate(t *testing.T) {
	e := newEnv(t)
	forEachBinding(t, func(t *testing.T, binding string) {
		c := e.client(binding, tokenAlice)
		asked := e.exec.direct.Load()
		m := userMessage("direct")
		var replies []*a2a.Message
		for range 2 {
			res, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m})
			if err != nil {
				t.Fatal(err)
			}
			reply, ok := res.(*a2a.Message)
			if !ok {
				t.Fatalf("got %T, want a direct Message", res)
			}
			replies = append(replies, reply)
		}
		if diff := cmp.Diff(replies[0], replies[1]); diff != "" {
			t.Fatalf("duplicate is not verbatim (-first +second):\n%s", diff)
		}
		if replies[0].Role != a2a.MessageRoleAgent || replies[0].ContextID == "" || replies[0].TaskID != "" {
			t.Fatalf("reply %+v", replies[0])
		}
		list, err := c.ListTasks(ctxT(t), &a2a.ListTasksRequest{ContextID: replies[0].ContextID})
		if err != nil || list.TotalSize != 0 {
			t.Fatalf("a direct reply made a task: %v %+v", err, list)
		}
		other := *m
		other.Parts = a2a.ContentParts{a2a.NewTextPart("complete")}
		if _, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: &other}); err == nil {
			t.Fatal("the direct reply's messageId was reused with another payload")
		}
		if n := e.exec.direct.Load() - asked; n != 1 {
			t.Fatalf("the agent was asked for a direct reply %d times, want once", n)
		}
	})
}

// Gate: an unsupported version fails.
func TestGateUnsupportedVersionFails(t *testing.T) {
	e := newEnv(t)
	for _, v := range []string{"99.0", "0.3", "1.1", "2", "one"} {
		status, h, body := e.raw(http.MethodGet, "/tasks", tokenAlice, nil, map[string]string{"A2A-Version": v})
		code, st, reason := restError(t, body)
		if status != http.StatusBadRequest || code != 400 || st != "FAILED_PRECONDITION" || reason != "VERSION_NOT_SUPPORTED" || h.Get("Content-Type") != "application/json" {
			t.Fatalf("A2A-Version %s: %d %d %s %s", v, status, code, st, reason)
		}
	}
	// A service parameter's name is case-insensitive (SPEC §3.2.6), as a query parameter too.
	for _, name := range []string{"A2A-Version", "a2a-version", "A2A-VERSION"} {
		status, _, body := e.raw(http.MethodGet, "/tasks?"+name+"=99.0", tokenAlice, nil, nil)
		if _, _, reason := restError(t, body); status != http.StatusBadRequest || reason != "VERSION_NOT_SUPPORTED" {
			t.Fatalf("query parameter %s=99.0: %d %s", name, status, reason)
		}
	}
	for _, v := range []string{"1.0", "1.0.7", ""} {
		if status, _, body := e.raw(http.MethodGet, "/tasks", tokenAlice, nil, map[string]string{"A2A-Version": v}); status != http.StatusOK {
			t.Fatalf("A2A-Version %q: %d %s", v, status, body)
		}
	}
	r := e.rpc(tokenAlice, "ListTasks", map[string]any{}, map[string]string{"A2A-Version": "99.0"})
	if r.Error == nil || r.Error.Code != -32009 || r.reason() != "VERSION_NOT_SUPPORTED" || string(r.ID) != "7" {
		t.Fatalf("JSON-RPC 99.0: id %s error %+v", r.ID, r.Error)
	}
}

// Gate: subscribe uses GET, streams, and rejects terminal tasks.
func TestGateSubscribeUsesGETStreamsRejectsTerminal(t *testing.T) {
	e := newEnv(t)
	c := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	task := send(t, c, userMessage("input"), nil)
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("state %s", task.Status.State)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	s, status, body := e.openSSE(ctx, http.MethodGet, "/tasks/"+string(task.ID)+":subscribe", tokenAlice, nil, nil)
	if s == nil {
		t.Fatalf("GET subscribe: %d %s", status, body)
	}
	if ct := s.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	first, _ := s.next()
	if k, st := kind(t, first.Data); k != "task" || st != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("first event %s %s", k, st)
	}
	m := userMessage("bob")
	m.TaskID = task.ID
	send(t, c, m, &a2a.SendMessageConfig{ReturnImmediately: true})
	var states []string
	for _, ev := range s.all() {
		k, st := kind(t, ev.Data)
		if k == "statusUpdate" {
			states = append(states, st)
		}
	}
	// The continuation returns the task to SUBMITTED; the wake queue's grant makes it WORKING.
	if diff := cmp.Diff([]string{"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"}, states); diff != "" {
		t.Fatalf("streamed states (-want +got):\n%s", diff)
	}
	// Terminal now: an ordinary HTTP error, not a stream.
	s, status, body = e.openSSE(ctxT(t), http.MethodGet, "/tasks/"+string(task.ID)+":subscribe", tokenAlice, nil, nil)
	if s != nil {
		t.Fatal("subscribe to a terminal task opened a stream")
	}
	if _, _, reason := restError(t, body); status != http.StatusBadRequest || reason != "UNSUPPORTED_OPERATION" {
		t.Fatalf("terminal subscribe: %d %s", status, body)
	}
	r := e.rpc(tokenAlice, "SubscribeToTask", map[string]any{"id": task.ID}, nil)
	if r.Error == nil || r.Error.Code != -32004 {
		t.Fatalf("JSON-RPC terminal subscribe: %+v", r.Error)
	}
}

// askedTask sends text, which the agent answers with a question (the test agent's "input"),
// blocking, and returns the task: INPUT_REQUIRED.
func askedTask(t *testing.T, c *a2aclient.Client, text string) *a2a.Task {
	t.Helper()
	task := send(t, c, userMessage(text), nil)
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("blocking send returned %s, want INPUT_REQUIRED", task.Status.State)
	}
	return task
}

// Gate: input-required settles a blocking send and a follow-up continues it.
func TestGateInputRequiredSettlesAndFollowUpContinues(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) { c.BlockingTimeout = time.Minute })
	forEachBinding(t, func(t *testing.T, binding string) {
		c := e.client(binding, tokenAlice)
		task := askedTask(t, c, "input")
		if task.Status.Message == nil || len(task.Status.Message.Parts) != 1 {
			t.Fatalf("question without elicitation activated: %+v", task.Status.Message)
		}
		m := userMessage("Ada")
		m.TaskID = task.ID
		m.ContextID = task.ContextID
		done := send(t, c, m, nil)
		if done.ID != task.ID || done.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("follow-up: task %s %s", done.ID, done.Status.State)
		}
		if len(done.History) != 4 {
			t.Fatalf("history has %d messages, want 4", len(done.History))
		}
		if got := done.Status.Message.Parts[0].Text(); got != "thanks: Ada" {
			t.Fatalf("answer %q", got)
		}
	})
	// With elicitation/v1 activated the question carries its requestedSchema as a data part.
	status, _, body := e.raw(http.MethodPost, "/message:send", tokenAlice, sendBody(t, wireMsg("elicit-1", "input"), nil),
		map[string]string{"A2A-Extensions": a2awire.ExtElicitation})
	if status != http.StatusOK {
		t.Fatalf("%d %s", status, body)
	}
	task := decodeSendResponse(t, body).(*a2a.Task)
	q := task.Status.Message
	if len(q.Parts) != 2 || q.Parts[1].Data() == nil {
		t.Fatalf("question parts %+v, want text and data", q.Parts)
	}
	if _, ok := q.Parts[1].Data().(map[string]any)["requestedSchema"]; !ok {
		t.Fatalf("data part %v has no requestedSchema", q.Parts[1].Data())
	}
}

// AUTH_REQUIRED, like INPUT_REQUIRED, is interrupted, not terminal: it settles a blocking send
// (on each binding), a subscription to it (over HTTP+JSON) opens with the snapshot and stays
// open, and a follow-up continues the task, which the open subscription then sees complete.
func TestGateAuthRequiredSettlesStaysSubscribableAndContinues(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) { c.BlockingTimeout = time.Minute })
	forEachBinding(t, func(t *testing.T, binding string) {
		c := e.client(binding, tokenAlice)
		task := send(t, c, userMessage("auth"), nil)
		if task.Status.State != a2a.TaskStateAuthRequired {
			t.Fatalf("blocking send returned %s, want AUTH_REQUIRED", task.Status.State)
		}
		s, status, body := e.openSSE(ctxT(t), http.MethodGet, "/tasks/"+string(task.ID)+":subscribe", tokenAlice, nil, nil)
		if s == nil {
			t.Fatalf("subscribe to an AUTH_REQUIRED task: %d %s", status, body)
		}
		defer s.close()
		first, ok := s.next()
		if k, st := kind(t, first.Data); !ok || k != "task" || st != "TASK_STATE_AUTH_REQUIRED" {
			t.Fatalf("first event %q (%v), want the AUTH_REQUIRED task", first.Data, ok)
		}
		m := userMessage("signed in")
		m.TaskID, m.ContextID = task.ID, task.ContextID
		done := send(t, c, m, nil)
		if done.ID != task.ID || done.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("follow-up: task %s %s, want %s COMPLETED", done.ID, done.Status.State, task.ID)
		}
		var last string
		for _, ev := range s.all() { // the stream closes at COMPLETED
			_, last = kind(t, ev.Data)
		}
		if last != "TASK_STATE_COMPLETED" {
			t.Fatalf("the subscription ended at %q, want COMPLETED", last)
		}
	})
}

// Gate: a refused continuation does not persist the message.
func TestGateRefusedContinuationNotPersisted(t *testing.T) {
	e := newEnv(t)
	forEachBinding(t, func(t *testing.T, binding string) {
		c := e.client(binding, tokenAlice)
		task := send(t, c, userMessage("complete"), nil)
		m := userMessage("too late")
		m.TaskID = task.ID
		_, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m})
		if !errors.Is(err, a2a.ErrUnsupportedOperation) {
			t.Fatalf("message to a terminal task: %v, want UnsupportedOperation", err)
		}
		got, err := c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: task.ID})
		if err != nil || len(got.History) != len(task.History) {
			t.Fatalf("history after refusal: %v %d, want %d", err, len(got.History), len(task.History))
		}
		// The refused messageId was not claimed: it may start new work.
		m.TaskID = ""
		if fresh := send(t, c, m, nil); fresh.ID == task.ID {
			t.Fatal("the refused message continued the terminal task")
		}

		// A mismatched contextId is invalid params, and changes nothing either.
		waiting := send(t, c, userMessage("input"), nil)
		m = userMessage("answer")
		m.TaskID, m.ContextID = waiting.ID, "another-context"
		_, err = c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m})
		if !errors.Is(err, a2a.ErrInvalidParams) {
			t.Fatalf("contextId mismatch: %v, want invalid params", err)
		}
		got, err = c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: waiting.ID})
		if err != nil || len(got.History) != 2 || got.Status.State != a2a.TaskStateInputRequired {
			t.Fatalf("task after a mismatched continuation: %v %+v", err, got)
		}
	})
}

// Gate: no artifacts after a terminal state.
func TestGateNoArtifactsAfterTerminal(t *testing.T) {
	e := newEnv(t)
	c := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	// A turn that outlives its cancel cannot add an artifact.
	held := send(t, c, userMessage("hold"), &a2a.SendMessageConfig{ReturnImmediately: true})
	// The executor's own WORKING update, not the hand-off's: the turn is holding now.
	waitHeld(t, c, held.ID)
	if _, err := c.CancelTask(ctxT(t), &a2a.CancelTaskRequest{ID: held.ID}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-e.exec.afterHold:
		if !errors.Is(err, taskplane.ErrTaskTerminal) {
			t.Fatalf("late artifact: %v, want ErrTaskTerminal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the canceled turn did not return")
	}
	if e.exec.canceled.Load() == 0 {
		t.Fatal("the executor's Canceler was not told")
	}
	// A completed task refuses an artifact too.
	done := send(t, c, userMessage("complete"), nil)
	_, err := e.plane.Apply(ctxT(t), "alice", string(done.ID), taskplane.AnyVersion,
		taskplane.AddArtifact{Artifact: taskplane.Artifact{ID: "late", Parts: []taskplane.Part{text("late")}}})
	if !errors.Is(err, taskplane.ErrTaskTerminal) {
		t.Fatalf("artifact on a completed task: %v", err)
	}
	for _, id := range []a2a.TaskID{held.ID, done.ID} {
		// Replay the whole log: nothing follows the terminal status.
		s, status, body := e.openSSE(ctxT(t), http.MethodGet, "/tasks/"+string(id)+":subscribe", tokenAlice, nil,
			map[string]string{"Last-Event-ID": "0"})
		if s == nil {
			t.Fatalf("replay: %d %s", status, body)
		}
		evs := s.all()
		k, st := kind(t, evs[len(evs)-1].Data)
		if k != "statusUpdate" || (st != "TASK_STATE_CANCELED" && st != "TASK_STATE_COMPLETED") {
			t.Fatalf("task %s: last event %s %s", id, k, st)
		}
	}
	got, err := c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: held.ID})
	if err != nil || len(got.Artifacts) != 0 {
		t.Fatalf("canceled task artifacts: %v %d", err, len(got.Artifacts))
	}
	got, err = c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: done.ID})
	if err != nil || len(got.Artifacts) != 1 {
		t.Fatalf("completed task artifacts: %v %d", err, len(got.Artifacts))
	}
}

// Gate: the store survives restart — tasks, their state and their event ids, and an
// interrupted task continues on the new process.
func TestGateStoreSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "channels.db")
	ctx := ctxT(t)
	s1, err := store.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	e1 := newEnvOn(t, s1, nil)
	c1 := e1.client(a2awire.BindingJSONRPC, tokenAlice)
	waiting := send(t, c1, userMessage("input"), nil)
	done := send(t, c1, userMessage("complete"), nil)
	e1.stop()
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := openSQLiteAt(t, path)
	e2 := newEnvOn(t, s2, nil)
	c2 := e2.client(a2awire.BindingHTTPJSON, tokenAlice)
	for _, want := range []*a2a.Task{waiting, done} {
		got, err := c2.GetTask(ctx, &a2a.GetTaskRequest{ID: want.ID})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.State != want.Status.State || len(got.History) != len(want.History) || len(got.Artifacts) != len(want.Artifacts) {
			t.Fatalf("after restart %s: %s/%d/%d, before %s/%d/%d", want.ID, got.Status.State, len(got.History), len(got.Artifacts),
				want.Status.State, len(want.History), len(want.Artifacts))
		}
	}
	m := userMessage("after restart")
	m.TaskID = waiting.ID
	if got := send(t, c2, m, nil); got.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("continuation after restart: %s", got.Status.State)
	}
	// Event ids survive too: a replay from the first event yields the whole log in order.
	s, status, body := e2.openSSE(ctx, http.MethodGet, "/tasks/"+string(waiting.ID)+":subscribe", tokenAlice, nil,
		map[string]string{"Last-Event-ID": "1"})
	if s == nil {
		t.Fatalf("replay after restart: %d %s", status, body)
	}
	var prev int64 = 1
	for _, ev := range s.all() {
		n, _ := strconv.ParseInt(ev.ID, 10, 64)
		if n <= prev {
			t.Fatalf("event id %d after %d", n, prev)
		}
		prev = n
	}
}

// With FreshSends (the conformance executor's default: its test kit reuses messageIds within a
// run) every send is new work: the same messageId twice makes two tasks, also with another
// payload, over both bindings.
func TestFreshSendsMakeNewWorkOfAResentMessageID(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) { c.FreshSends = true })
	forEachBinding(t, func(t *testing.T, binding string) {
		c := e.client(binding, tokenAlice)
		m := userMessage("complete")
		first, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m})
		if err != nil {
			t.Fatal(err)
		}
		second, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m})
		if err != nil {
			t.Fatal(err)
		}
		t1, ok1 := first.(*a2a.Task)
		t2, ok2 := second.(*a2a.Task)
		if !ok1 || !ok2 || t1.ID == t2.ID {
			t.Fatalf("the same messageId sent twice: %T %T, one task (%v)", first, second, ok1 && ok2)
		}
		other := *m
		other.Parts = a2a.ContentParts{a2a.NewTextPart("complete, differently")}
		if _, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: &other}); err != nil {
			t.Fatalf("the messageId with another payload: %v, want new work", err)
		}
	})
}

// busyCanceler keeps adding an artifact to its task until an update is refused, and counts the
// Cancel calls it gets per task.
type busyCanceler struct {
	mu      sync.Mutex
	cancels map[string]int
}

func (b *busyCanceler) Execute(ctx context.Context, turn *taskplane.Turn) error {
	for {
		if err := turn.Update(context.WithoutCancel(ctx), taskplane.AddArtifact{Artifact: taskplane.Artifact{
			ID: "a", Parts: []taskplane.Part{taskplane.TextPart("x")}}}); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (b *busyCanceler) Cancel(_ context.Context, t *taskplane.Task) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cancels[t.ID]++
	return nil
}

// Gate: a cancel of a WORKING task reaches a Canceler executor exactly once, also when the
// executor's update is refused (and its turn tells it) between the cancel's commit and the
// dispatcher stopping the turn.
func TestGateCancelTellsACancelerExecutorOnceWhileItsTurnKeepsUpdating(t *testing.T) {
	bx := &busyCanceler{cancels: map[string]int{}}
	e := newEnvExec(t, storetest.OpenSQLite(t), nil, bx)
	c := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	var ids []string
	for i := 0; i < 20; i++ {
		task := send(t, c, userMessage("go"), &a2a.SendMessageConfig{ReturnImmediately: true})
		waitState(t, c, task.ID, a2a.TaskStateWorking)
		time.Sleep(10 * time.Millisecond)
		if _, err := c.CancelTask(ctxT(t), &a2a.CancelTaskRequest{ID: task.ID}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, string(task.ID))
	}
	// Every task is told (bounded wait), then none a second time: a second Cancel would follow
	// the first within the dispatcher's stop of the turn, well inside the settle time.
	told := func() (untold, twice []string) {
		bx.mu.Lock()
		defer bx.mu.Unlock()
		for _, id := range ids {
			switch n := bx.cancels[id]; {
			case n == 0:
				untold = append(untold, id)
			case n > 1:
				twice = append(twice, fmt.Sprintf("%s (%d times)", id, n))
			}
		}
		return untold, twice
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		untold, twice := told()
		if len(twice) > 0 {
			t.Fatalf("canceled tasks told more than once: %v", twice)
		}
		if len(untold) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d canceled tasks were never told within 20s: %v", len(untold), len(ids), untold)
		}
	}
	time.Sleep(200 * time.Millisecond) // the settle time: a late second Cancel would show here
	if _, twice := told(); len(twice) > 0 {
		t.Fatalf("canceled tasks told more than once: %v", twice)
	}
}
