package a2ahttp_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
	"github.com/channels-dev/channels/taskplane/executor/echo"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// TestSettleLeavesTheStateAloneOverA2A: the A2A caller settles its finished task by sending to it
// with an outfitter-task/v1 outcome; the task stays COMPLETED and shows the settlement; a
// malformed outcome is invalid params.
func TestSettleLeavesTheStateAloneOverA2A(t *testing.T) {
	e := newEnv(t)
	forEachBinding(t, func(t *testing.T, binding string) {
		c := e.outfitterClient(binding, tokenAlice)
		task := send(t, c, userMessage("complete"), nil)
		if task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("state %s", task.Status.State)
		}
		settle := func(outcome string) (a2a.SendMessageResult, error) {
			m := userMessage("feedback")
			m.TaskID = task.ID
			return c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: m, Metadata: map[string]any{
				a2awire.ExtOutfitterTask: map[string]any{"outcome": outcome, "feedback": "good, a bit long"}}})
		}
		res, err := settle("accepted")
		if err != nil {
			t.Fatal(err)
		}
		got, ok := res.(*a2a.Task)
		if !ok || got.Status.State != a2a.TaskStateCompleted || got.ID != task.ID {
			t.Fatalf("settle answered %+v", res)
		}
		got, err = c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: task.ID})
		if err != nil {
			t.Fatal(err)
		}
		m, _ := got.Metadata[a2awire.ExtOutfitterTask].(map[string]any)
		if got.Status.State != a2a.TaskStateCompleted || m["outcome"] != "accepted" || m["feedback"] != "good, a bit long" {
			t.Fatalf("after settle: %s %v", got.Status.State, got.Metadata)
		}
		if len(got.History) != len(task.History) {
			t.Fatalf("settle added history: %d → %d messages", len(task.History), len(got.History))
		}
		if _, err := settle("Not A Token"); err == nil {
			t.Fatal("a malformed outcome was accepted")
		}
	})
}

// settleReq is a send to task with an outfitter-task/v1 outcome in the request's metadata.
func settleReq(task *a2a.Task, outcome, feedback string) *a2a.SendMessageRequest {
	m := userMessage("feedback")
	m.TaskID = task.ID
	return &a2a.SendMessageRequest{Message: m, Metadata: map[string]any{
		a2awire.ExtOutfitterTask: map[string]any{"outcome": outcome, "feedback": feedback}}}
}

// outfitterOf reads the task's outfitter-task/v1 metadata as a GET shows it.
func outfitterOf(t *testing.T, c *a2aclient.Client, id a2a.TaskID) map[string]any {
	t.Helper()
	got, err := c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	md, _ := got.Metadata[a2awire.ExtOutfitterTask].(map[string]any)
	return md
}

// TestASettlementUnderAnotherContextIDIsInvalidAndStoresNothing: a settlement send naming a
// finished task under a contextId that is not the task's is INVALID_PARAMS, like every other send
// naming a task, and nothing is recorded.
func TestASettlementUnderAnotherContextIDIsInvalidAndStoresNothing(t *testing.T) {
	e := newEnv(t)
	forEachBinding(t, func(t *testing.T, binding string) {
		c := e.outfitterClient(binding, tokenAlice)
		task := send(t, c, userMessage("complete"), nil)
		req := settleReq(task, "accepted", "")
		req.Message.ContextID = "some-other-context"
		_, err := c.SendMessage(ctxT(t), req)
		if md := outfitterOf(t, c, task.ID); !errors.Is(err, a2a.ErrInvalidParams) || md["outcome"] != nil {
			t.Fatalf("mismatched contextId: err=%v, stored outcome=%v (want invalid params, nothing stored)", err, md["outcome"])
		}
		// The same send under the task's own contextId settles it.
		req = settleReq(task, "accepted", "")
		req.Message.ContextID = task.ContextID
		if _, err := c.SendMessage(ctxT(t), req); err != nil {
			t.Fatal(err)
		}
		if md := outfitterOf(t, c, task.ID); md["outcome"] != "accepted" {
			t.Fatalf("settle under the task's contextId stored %v", md)
		}
	})
}

// TestAResentContinuationIsReplayedNotReadAsASettlement: a send with an outcome to a task that was
// still open continued it (and its executor completed it). The client's retry of that request
// (same messageId, same payload) returns the earlier outcome, and does not settle the task now
// that it has finished; the messageId reused with a different payload is DUPLICATE_MESSAGE_ID,
// not a settlement either.
func TestAResentContinuationIsReplayedNotReadAsASettlement(t *testing.T) {
	e := newEnv(t)
	c := e.outfitterClient(a2awire.BindingHTTPJSON, tokenAlice)
	task := send(t, c, userMessage("input"), nil)
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("state %s", task.Status.State)
	}
	req := settleReq(task, "accepted", "")
	req.Message.Parts = a2a.ContentParts{a2a.NewTextPart("my answer")}
	res, err := c.SendMessage(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if first := res.(*a2a.Task); first.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("continuation: %s", first.Status.State)
	}
	// The client did not see the answer (a lost response) and retries the same request.
	res, err = c.SendMessage(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if again := res.(*a2a.Task); again.ID != task.ID || again.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("resend answered %+v", again)
	}
	if md := outfitterOf(t, c, task.ID); md["outcome"] != nil {
		t.Fatalf("the resend of a continuation settled the task: %v", md)
	}
	// The same messageId with another payload is a conflict, and settles nothing.
	body, err := json.Marshal(map[string]any{
		"message": map[string]any{"messageId": req.Message.ID, "taskId": string(task.ID), "role": "ROLE_USER",
			"parts": []any{map[string]any{"text": "something else"}}},
		"metadata": map[string]any{a2awire.ExtOutfitterTask: map[string]any{"outcome": "rejected"}}})
	if err != nil {
		t.Fatal(err)
	}
	status, _, rb := e.raw(http.MethodPost, "/message:send", tokenAlice, body, map[string]string{"A2A-Extensions": a2awire.ExtOutfitterTask})
	if _, _, reason := restError(t, rb); status != http.StatusConflict || reason != "DUPLICATE_MESSAGE_ID" {
		t.Fatalf("reused messageId with another payload: %d %s", status, rb)
	}
	if md := outfitterOf(t, c, task.ID); md["outcome"] != nil {
		t.Fatalf("the reused messageId settled the task: %v", md)
	}
}

// TestAResentSettlementIsReplayed: a settlement is recorded under its messageId's claim. Its
// retry (same payload) answers with the task and records nothing again (settledAt and the settled
// evidence stay); the messageId reused with another payload is DUPLICATE_MESSAGE_ID and leaves
// the settlement as it was.
func TestAResentSettlementIsReplayed(t *testing.T) {
	e := newEnv(t)
	c := e.outfitterClient(a2awire.BindingHTTPJSON, tokenAlice)
	task := send(t, c, userMessage("complete"), nil)
	req := settleReq(task, "partial", "tone is off")
	if _, err := c.SendMessage(ctxT(t), req); err != nil {
		t.Fatal(err)
	}
	first := outfitterOf(t, c, task.ID)
	if first["outcome"] != "partial" || first["settledAt"] == nil {
		t.Fatalf("settle stored %v", first)
	}
	res, err := c.SendMessage(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := res.(*a2a.Task); !ok || got.ID != task.ID || got.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("resent settlement answered %+v", res)
	}
	if again := outfitterOf(t, c, task.ID); again["settledAt"] != first["settledAt"] {
		t.Fatalf("the resent settlement was recorded again: settledAt %v, then %v", first["settledAt"], again["settledAt"])
	}
	evs, err := e.plane.Store().ListEvidence(ctxT(t), store.EvidenceFilter{Kind: taskplane.EvidenceSettled, TaskID: string(task.ID)})
	if err != nil || len(evs) != 1 {
		t.Fatalf("settled evidence: %v, %d rows, want 1", err, len(evs))
	}
	body, err := json.Marshal(map[string]any{
		"message": map[string]any{"messageId": req.Message.ID, "taskId": string(task.ID), "role": "ROLE_USER",
			"parts": []any{map[string]any{"text": "feedback"}}},
		"metadata": map[string]any{a2awire.ExtOutfitterTask: map[string]any{"outcome": "rejected"}}})
	if err != nil {
		t.Fatal(err)
	}
	status, _, rb := e.raw(http.MethodPost, "/message:send", tokenAlice, body, map[string]string{"A2A-Extensions": a2awire.ExtOutfitterTask})
	if _, _, reason := restError(t, rb); status != http.StatusConflict || reason != "DUPLICATE_MESSAGE_ID" {
		t.Fatalf("reused messageId with another payload: %d %s", status, rb)
	}
	if md := outfitterOf(t, c, task.ID); md["outcome"] != "partial" || md["settledAt"] != first["settledAt"] {
		t.Fatalf("the reused messageId changed the settlement: %v", md)
	}
}

// TestASendToATerminalTaskWithoutTheExtensionActivatedIsUnsupported: outfitter-task/v1 data acts
// only for a caller that activated the extension (A2A-Extensions) or whose message lists it. A
// send to a COMPLETED task whose metadata merely carries the key with an outcome (a client
// echoing a task's metadata) is UNSUPPORTED_OPERATION, as any send to a finished task, and the
// task does not change; the message listing the extension settles it.
func TestASendToATerminalTaskWithoutTheExtensionActivatedIsUnsupported(t *testing.T) {
	e := newEnv(t)
	task := send(t, e.client(a2awire.BindingHTTPJSON, tokenAlice), userMessage("complete"), nil)
	_, _, before := e.raw(http.MethodGet, "/tasks/"+string(task.ID), tokenAlice, nil, nil)

	msg := wireMsg("settle-no-ext", "thanks")
	msg["taskId"] = string(task.ID)
	md := map[string]any{a2awire.ExtOutfitterTask: map[string]any{"outcome": "accepted", "feedback": "fine"}}
	body, _ := json.Marshal(map[string]any{"message": msg, "metadata": md})
	status, _, b := e.raw(http.MethodPost, "/message:send", tokenAlice, body, nil)
	if status != http.StatusBadRequest {
		t.Errorf("send to a COMPLETED task, extension not activated: HTTP %d %s; want 400 UNSUPPORTED_OPERATION", status, b)
	} else if _, _, reason := restError(t, b); reason != "UNSUPPORTED_OPERATION" {
		t.Errorf("reason %s, want UNSUPPORTED_OPERATION", reason)
	}
	msg["messageId"] = "settle-no-ext-rpc"
	if r := e.rpc(tokenAlice, "SendMessage", map[string]any{"message": msg, "metadata": md}, nil); r.Error == nil || r.Error.Code != -32004 {
		t.Errorf("JSON-RPC send to a COMPLETED task, extension not activated: %s; want -32004", r.Result)
	}
	if _, _, after := e.raw(http.MethodGet, "/tasks/"+string(task.ID), tokenAlice, nil, nil); string(before) != string(after) {
		t.Errorf("the terminal task changed:\nbefore %s\nafter  %s", before, after)
	}

	// The message lists the extension: its data is read, and the task is settled.
	msg["messageId"], msg["extensions"] = "settle-msg-ext", []string{a2awire.ExtOutfitterTask}
	body, _ = json.Marshal(map[string]any{"message": msg, "metadata": md})
	if status, _, b := e.raw(http.MethodPost, "/message:send", tokenAlice, body, nil); status != http.StatusOK {
		t.Fatalf("settle with the extension listed on the message: HTTP %d %s", status, b)
	}
	if m := outfitterOf(t, e.outfitterClient(a2awire.BindingHTTPJSON, tokenAlice), task.ID); m["outcome"] != "accepted" {
		t.Fatalf("after the settlement: %v", m)
	}
}

// TestARedoLinkActsOnlyWithTheExtensionActivated: a new task whose request metadata names a
// finished task under outfitter-task/v1 "supersedes" links the two only when the caller activated
// the extension; without it the key is plain metadata and the finished task is left alone.
func TestARedoLinkActsOnlyWithTheExtensionActivated(t *testing.T) {
	e := newEnv(t)
	forEachBinding(t, func(t *testing.T, binding string) {
		first := send(t, e.client(binding, tokenAlice), userMessage("complete"), nil)
		path := "/tasks/" + string(first.ID) + "?historyLength=0"
		_, _, before := e.raw(http.MethodGet, path, tokenAlice, nil, nil)
		redo := func(c *a2aclient.Client) *a2a.Task {
			res, err := c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: userMessage("complete"),
				Metadata: map[string]any{a2awire.ExtOutfitterTask: map[string]any{"supersedes": string(first.ID)}}})
			if err != nil {
				t.Fatal(err)
			}
			return res.(*a2a.Task)
		}
		redo(e.client(binding, tokenAlice))
		if _, _, after := e.raw(http.MethodGet, path, tokenAlice, nil, nil); string(before) != string(after) {
			t.Errorf("the COMPLETED task changed although the extension was not activated:\nbefore %s\nafter  %s", before, after)
		}
		oc := e.outfitterClient(binding, tokenAlice)
		second := redo(oc)
		if m := outfitterOf(t, oc, first.ID); fmt.Sprint(m["supersededBy"]) != fmt.Sprint([]any{string(second.ID)}) {
			t.Fatalf("with the extension activated, the first task's links: %v", m)
		}
		if m := outfitterOf(t, oc, second.ID); m["supersedes"] != string(first.ID) {
			t.Fatalf("with the extension activated, the new task's links: %v", m)
		}
	})
}

// TestAReturnImmediatelySendAnswersWithTheTaskItsInlineTurnSettled: with an agent whose first
// turn runs in the acceptance (the echo), the send's task is committed settled, so even a
// returnImmediately send answers with it settled, as GetTask then reads it, not with the
// SUBMITTED snapshot that no longer is.
func TestAReturnImmediatelySendAnswersWithTheTaskItsInlineTurnSettled(t *testing.T) {
	e := newEnvExec(t, storetest.OpenSQLite(t), nil, echo.New())
	forEachBinding(t, func(t *testing.T, binding string) {
		c := e.client(binding, tokenAlice)
		// A blocking send settles once the Dispatcher runs, and it offers its inline turn
		// before it runs any.
		if task := send(t, c, userMessage("warm up"), nil); task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("blocking send: %s", task.Status.State)
		}
		task := send(t, c, userMessage("right away"), &a2a.SendMessageConfig{ReturnImmediately: true})
		if task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("returnImmediately send: %s, want COMPLETED (settled in the acceptance)", task.Status.State)
		}
		if m := task.Status.Message; m == nil || len(m.Parts) != 1 || m.Parts[0].Text() != "right away" {
			t.Fatalf("status message %+v, want the echo", m)
		}
		got, err := c.GetTask(ctxT(t), &a2a.GetTaskRequest{ID: task.ID})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.State != task.Status.State || !got.Status.Timestamp.Equal(*task.Status.Timestamp) {
			t.Fatalf("GetTask: %s at %v; the send answered %s at %v", got.Status.State, got.Status.Timestamp, task.Status.State, task.Status.Timestamp)
		}
	})
}
