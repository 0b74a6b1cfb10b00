package a2awire_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

func TestFromErrorMapsTaskPlaneSentinels(t *testing.T) {
	cases := []struct {
		err    error
		reason string
		http   int
		rpc    int
	}{
		{taskplane.ErrTaskNotFound, "TASK_NOT_FOUND", 404, -32001},
		{fmt.Errorf("cancel task x: %w", taskplane.ErrTaskNotCancelable), "TASK_NOT_CANCELABLE", 400, -32002},
		{fmt.Errorf("accept: %w", taskplane.ErrTaskTerminal), "UNSUPPORTED_OPERATION", 400, -32004},
		{&taskplane.ConflictError{Source: "a2a", Identity: "m"}, "DUPLICATE_MESSAGE_ID", 409, -32602},
		{taskplane.ErrContextMismatch, "INVALID_PARAMS", 400, -32602},
		{fmt.Errorf("x: %w", taskplane.ErrInvalid), "INVALID_PARAMS", 400, -32602},
		{taskplane.ErrClaimPending, "UNAVAILABLE", 503, -32603},
		{errors.New("disk on fire"), "INTERNAL_ERROR", 500, -32603},
		{a2awire.Errorf(a2awire.ErrVersionNotSupported, "v"), "VERSION_NOT_SUPPORTED", 400, -32009},
		{a2awire.Errorf(a2awire.ErrContentTypeNotSupported, "c"), "CONTENT_TYPE_NOT_SUPPORTED", 400, -32005},
		{a2awire.Errorf(a2awire.ErrExtensionSupportRequired, "e"), "EXTENSION_SUPPORT_REQUIRED", 400, -32008},
		{a2awire.Errorf(a2awire.ErrPushNotificationNotSupported, "p"), "PUSH_NOTIFICATION_NOT_SUPPORTED", 400, -32003},
		{a2awire.Errorf(a2awire.ErrExtendedAgentCardNotConfigured, "p"), "EXTENDED_AGENT_CARD_NOT_CONFIGURED", 400, -32007},
		{a2awire.Errorf(a2awire.ErrInvalidAgentResponse, "p"), "INVALID_AGENT_RESPONSE", 500, -32006},
	}
	for _, tc := range cases {
		we := a2awire.FromError(tc.err)
		k := a2awire.KindOf(we)
		if k.Reason != tc.reason || k.HTTPStatus != tc.http || k.RPCCode != tc.rpc {
			t.Errorf("%v: %s %d %d, want %s %d %d", tc.err, k.Reason, k.HTTPStatus, k.RPCCode, tc.reason, tc.http, tc.rpc)
		}
	}
	// A passing conflict says when to come back, as a store outage does.
	for _, err := range []error{taskplane.ErrClaimPending, fmt.Errorf("x: %w", taskplane.ErrConcurrentModification)} {
		if we := a2awire.FromError(err); we.RetryAfter != a2awire.ConcurrentRetryAfter {
			t.Errorf("%v: Retry-After %s, want %s", err, we.RetryAfter, a2awire.ConcurrentRetryAfter)
		}
	}
	if we := a2awire.FromError(errors.New("secret detail")); we.Message != "internal error" {
		t.Errorf("internal error leaks %q", we.Message)
	}
}

func TestErrorEnvelopes(t *testing.T) {
	e := a2awire.Errorf(a2awire.ErrTaskNotFound, "task not found").WithTask("t-1")
	var rest struct {
		Error struct {
			Code    int              `json:"code"`
			Status  string           `json:"status"`
			Message string           `json:"message"`
			Details []map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(e.RESTBody(), &rest); err != nil {
		t.Fatal(err)
	}
	info := rest.Error.Details[0]
	if rest.Error.Code != 404 || rest.Error.Status != "NOT_FOUND" || info["@type"] != a2awire.ErrorInfoType ||
		info["reason"] != "TASK_NOT_FOUND" || info["domain"] != "a2a-protocol.org" || info["metadata"].(map[string]any)["taskId"] != "t-1" {
		t.Fatalf("REST envelope %s", e.RESTBody())
	}
	rpc, _ := json.Marshal(e.RPC())
	var r struct {
		Code int              `json:"code"`
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal(rpc, &r); err != nil || r.Code != -32001 || r.Data[0]["reason"] != "TASK_NOT_FOUND" {
		t.Fatalf("JSON-RPC error %s", rpc)
	}
	inv := a2awire.Invalid("message.parts", "is required")
	b := string(inv.RESTBody())
	if want := `"fieldViolations":[{"field":"message.parts","description":"is required"}]`; !contains(b, want) {
		t.Fatalf("BadRequest detail missing in %s", b)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestDecodeSendMessageRequestProtoJSON(t *testing.T) {
	body := `{"tenant":"t","message":{"message_id":"m","context_id":"c","task_id":"k","role":1,
		"parts":[{"text":"a"},{"raw":"dGNr"},{"raw":"dGNr_-8"},{"url":"https://example.com/f","filename":"f","media_type":"text/plain"},{"data":null},{"data":[1, 2]}],
		"metadata":{"n":12345678901234567890},"extensions":["u"],"reference_task_ids":["r"]},
		"configuration":{"accepted_output_modes":["text/plain"],"history_length":"2","blocking":false},
		"metadata":{"x":true}}`
	req, err := a2awire.DecodeSendMessageRequest([]byte(body), a2awire.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	m := a2awire.ToMessage(req.Message)
	if m.ID != "m" || m.ContextID != "c" || m.TaskID != "k" || m.Role != taskplane.RoleUser || req.Tenant != "t" {
		t.Fatalf("message %+v", m)
	}
	if string(m.Parts[1].Raw) != "tck" || m.Parts[2].Raw == nil || m.Parts[3].URL != "https://example.com/f" || m.Parts[3].MediaType != "text/plain" {
		t.Fatalf("parts %+v", m.Parts)
	}
	if string(m.Parts[4].Data) != "null" || string(m.Parts[5].Data) != "[1,2]" {
		t.Fatalf("data parts %q %q", m.Parts[4].Data, m.Parts[5].Data)
	}
	if n, _ := json.Marshal(m.Metadata["n"]); string(n) != "12345678901234567890" {
		t.Fatalf("metadata number lost precision: %s", n)
	}
	cfg := req.Configuration
	if *cfg.HistoryLength != 2 || !cfg.ReturnImmediately || cfg.AcceptedOutputModes[0] != "text/plain" {
		t.Fatalf("configuration %+v", cfg)
	}
	if req.Metadata["x"] != true {
		t.Fatalf("request metadata %v", req.Metadata)
	}
}

func TestDecodeRejects(t *testing.T) {
	lim := a2awire.Limits{MaxParts: 1, MaxDataDepth: 2}
	for _, body := range []string{
		`{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"a"},{"text":"b"}]}}`,
		`{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"data":[[[1]]]}]}}`,
		`{"message":{"messageId":"m","role":"ROLE_USER","parts":[{}]}}`,
		`{"message":{"messageId":"m","role":"user","parts":[{"text":"a"}]}}`,
		`{"message":{"messageId":"m","role":9,"parts":[{"text":"a"}]}}`,
		`{"message":{"messageId":5,"role":"ROLE_USER","parts":[{"text":"a"}]}}`,
		`{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"a"}],"metadata":[1]}}`,
		`{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"url":"ftp://x/y"}]}}`,
		`{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"a"}]},"configuration":{"historyLength":1.5}}`,
		`{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"a"}]},"configuration":{"returnImmediately":"yes"}}`,
		`"just a string"`,
	} {
		if _, err := a2awire.DecodeSendMessageRequest([]byte(body), lim); err == nil {
			t.Errorf("accepted %s", body)
		} else if !errors.Is(err, a2awire.ErrInvalidParams) && !errors.Is(err, a2awire.ErrParse) {
			t.Errorf("%s: kind %v", body, err.Kind)
		}
	}
}

func TestPartMarshalOneof(t *testing.T) {
	s := "hi"
	u := "https://example.com"
	cases := []struct {
		p    a2awire.Part
		want string
	}{
		{a2awire.Part{Text: &s}, `{"text":"hi"}`},
		{a2awire.Part{}, `{"text":""}`},
		{a2awire.Part{Raw: []byte("tck"), Filename: "f"}, `{"raw":"dGNr","filename":"f"}`},
		{a2awire.Part{URL: &u, MediaType: "text/html"}, `{"url":"https://example.com","mediaType":"text/html"}`},
		{a2awire.Part{Data: json.RawMessage(`null`)}, `{"data":null}`},
		{a2awire.Part{Data: json.RawMessage(`{"a":1}`)}, `{"data":{"a":1}}`},
	}
	for _, tc := range cases {
		b, err := json.Marshal(tc.p)
		if err != nil || string(b) != tc.want {
			t.Errorf("%+v: %s, want %s (%v)", tc.p, b, tc.want, err)
		}
	}
}

func TestFromTaskView(t *testing.T) {
	ts := time.Date(2025, 10, 28, 10, 30, 0, 123456000, time.UTC)
	q := &taskplane.Message{ID: "q", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("name?")},
		Metadata: map[string]any{a2awire.ExtElicitation: map[string]any{"requestedSchema": map[string]any{"type": "object"}}, "keep": 1}}
	task := &taskplane.Task{ID: "t", ContextID: "c",
		Status:    taskplane.Status{State: taskplane.StateInputRequired, Message: q, Timestamp: ts},
		History:   []taskplane.Message{{ID: "u1", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("a")}}, *q},
		Artifacts: []taskplane.Artifact{{ID: "a", Parts: []taskplane.Part{taskplane.TextPart("x")}}},
	}
	plain := a2awire.FromTask(task, a2awire.View{History: 1})
	if plain.Status.State != a2awire.TaskStateInputRequired || plain.Status.Timestamp != "2025-10-28T10:30:00.123Z" {
		t.Fatalf("status %+v", plain.Status)
	}
	if len(plain.History) != 1 || plain.History[0].MessageID != "q" || plain.Artifacts != nil {
		t.Fatalf("history %+v artifacts %+v", plain.History, plain.Artifacts)
	}
	if _, ok := plain.Status.Message.Metadata[a2awire.ExtElicitation]; ok || len(plain.Status.Message.Parts) != 1 {
		t.Fatalf("elicitation leaked to a caller without the extension: %+v", plain.Status.Message)
	}
	if _, ok := q.Metadata[a2awire.ExtElicitation]; !ok {
		t.Fatal("conversion modified the domain message")
	}
	loc := &a2awire.Locator{InterfaceURL: "https://h", ProtocolBinding: "HTTP+JSON", ProtocolVersion: "1.0"}
	full := a2awire.FromTask(task, a2awire.View{History: 0, Artifacts: true, Locator: loc,
		Extensions: a2awire.Extensions{a2awire.ExtElicitation, a2awire.ExtOutfitterTask}})
	if full.History != nil || len(full.Artifacts) != 1 {
		t.Fatalf("historyLength 0 / artifacts: %+v", full)
	}
	sm := full.Status.Message
	if len(sm.Parts) != 2 || string(sm.Parts[1].Data) != `{"requestedSchema":{"type":"object"}}` || sm.Extensions[0] != a2awire.ExtElicitation {
		t.Fatalf("elicitation part %+v", sm)
	}
	got := full.Metadata[a2awire.ExtOutfitterTask].(a2awire.Locator)
	if diff := cmp.Diff(a2awire.Locator{InterfaceURL: "https://h", ProtocolBinding: "HTTP+JSON", ProtocolVersion: "1.0", TaskID: "t"}, got); diff != "" {
		t.Fatalf("locator (-want +got):\n%s", diff)
	}
}

// A failure's reason (outfitter-task/v1 data) reaches only a caller that activated the extension,
// and the message then lists the extension.
func TestFailureReasonOnlyWithTheExtension(t *testing.T) {
	m := taskplane.Message{ID: "f", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("rejected")},
		Metadata: map[string]any{taskplane.MetaReason: "executor-error", "other": 1}}
	plain := a2awire.FromMessage(m, a2awire.View{})
	if _, ok := plain.Metadata[taskplane.MetaReason]; ok || plain.Metadata["other"] != 1 || len(plain.Extensions) != 0 {
		t.Fatalf("without the extension: metadata %v, extensions %v", plain.Metadata, plain.Extensions)
	}
	if _, ok := m.Metadata[taskplane.MetaReason]; !ok {
		t.Fatal("conversion modified the domain message")
	}
	ext := a2awire.FromMessage(m, a2awire.View{Extensions: a2awire.Extensions{a2awire.ExtOutfitterTask}})
	if ext.Metadata[taskplane.MetaReason] != "executor-error" || !slices.Contains(ext.Extensions, a2awire.ExtOutfitterTask) {
		t.Fatalf("with the extension: metadata %v, extensions %v", ext.Metadata, ext.Extensions)
	}
}

func TestStatesRoundTrip(t *testing.T) {
	for _, s := range taskplane.States {
		w := a2awire.FromState(s)
		back, ok := a2awire.ToState(w)
		if !ok || back != s {
			t.Errorf("%s → %s → %s", s, w, back)
		}
	}
	for in, want := range map[string]a2awire.TaskState{"TASK_STATE_CANCELED": a2awire.TaskStateCanceled, "6": a2awire.TaskStateInputRequired, "": a2awire.TaskStateUnspecified} {
		if got, ok := a2awire.ParseTaskState(in); !ok || got != want {
			t.Errorf("ParseTaskState(%q) = %s %v", in, got, ok)
		}
	}
	for _, in := range []string{"working", "9", "-1", "TASK_STATE_CANCELLED"} {
		if _, ok := a2awire.ParseTaskState(in); ok {
			t.Errorf("ParseTaskState(%q) accepted", in)
		}
	}
}

func TestJSONDepth(t *testing.T) {
	for in, want := range map[string]int{`1`: 0, `{}`: 1, `[[]]`: 2, `{"a":"[[[["}`: 1, `{"a":"\"[[","b":[{}]}`: 3} {
		if got := a2awire.JSONDepth([]byte(in)); got != want {
			t.Errorf("JSONDepth(%s) = %d, want %d", in, got, want)
		}
	}
}

// TestListTasksStatusUnrecognized: @a2a-js/sdk 1.3.0 sends {"status":"UNRECOGNIZED"} for an
// unset status filter; it reads as no filter. Any other unknown state is still refused.
func TestListTasksStatusUnrecognized(t *testing.T) {
	req, err := a2awire.DecodeListTasksRequest(json.RawMessage(`{"contextId":"c","status":"UNRECOGNIZED","pageSize":1}`), a2awire.Limits{})
	if err != nil || req.Status != "" || req.ContextID != "c" {
		t.Fatalf("UNRECOGNIZED: %+v %v, want no status filter", req, err)
	}
	req, err = a2awire.DecodeListTasksRequest(json.RawMessage(`{"status":"TASK_STATE_WORKING"}`), a2awire.Limits{})
	if err != nil || req.Status != a2awire.TaskStateWorking {
		t.Fatalf("WORKING: %+v %v", req, err)
	}
	if _, err := a2awire.DecodeListTasksRequest(json.RawMessage(`{"status":"TASK_STATE_BOGUS"}`), a2awire.Limits{}); err == nil {
		t.Fatal("an unknown state name was accepted")
	}
}

// A query boolean reads as gRPC transcoders read it: true/false, 1/0, t/f, in any case.
func TestListTasksQueryBooleansReadAsTranscodersReadThem(t *testing.T) {
	for v, want := range map[string]bool{"true": true, "1": true, "TRUE": true, "t": true, "false": false, "0": false, "False": false, "": false} {
		req, err := a2awire.ListTasksFromQuery(url.Values{"includeArtifacts": {v}}, a2awire.DefaultLimits())
		if err != nil || req.IncludeArtifacts != want {
			t.Errorf("includeArtifacts=%q: %v, %v; want %v", v, req, err, want)
		}
	}
	if _, err := a2awire.ListTasksFromQuery(url.Values{"includeArtifacts": {"maybe"}}, a2awire.DefaultLimits()); err == nil {
		t.Error("includeArtifacts=maybe was accepted")
	}
}

// A ListTasks status of "UNRECOGNIZED" reads as no filter on both bindings (docs/a2a.md), and
// an unknown state name is refused on both.
func TestListTasksQueryReadsUnrecognizedStatusAsNoFilter(t *testing.T) {
	req, err := a2awire.ListTasksFromQuery(url.Values{"status": {"UNRECOGNIZED"}}, a2awire.DefaultLimits())
	if err != nil || req.Status != "" {
		t.Fatalf("status=UNRECOGNIZED: %+v, %v; want no filter", req, err)
	}
	if _, err := a2awire.ListTasksFromQuery(url.Values{"status": {"TASK_STATE_BOGUS"}}, a2awire.DefaultLimits()); err == nil {
		t.Fatal("an unknown state name was accepted")
	}
}

// A query parameter over its bound is refused naming it; a whole-request limit names no field
// (an empty field violation says nothing).
func TestOverlongQueryParametersAreNamed(t *testing.T) {
	long := strings.Repeat("a", 2000)
	for _, name := range []string{"contextId", "tenant", "pageToken"} {
		_, err := a2awire.ListTasksFromQuery(url.Values{name: {long}}, a2awire.DefaultLimits())
		if err == nil || len(err.Violations) != 1 || err.Violations[0].Field != name {
			t.Errorf("ListTasks %s of 2000 bytes: %+v; want INVALID_PARAMS naming %s", name, err, name)
		}
		if name == "contextId" {
			continue
		}
		_, err = a2awire.ListTaskPushConfigsFromQuery("t-1", url.Values{name: {long}}, a2awire.DefaultLimits())
		if err == nil || len(err.Violations) != 1 || err.Violations[0].Field != name {
			t.Errorf("ListTaskPushConfigs %s of 2000 bytes: %+v; want INVALID_PARAMS naming %s", name, err, name)
		}
	}
	if err := a2awire.Invalid("", "request body larger than %d bytes", 10); len(err.Violations) != 0 {
		t.Errorf("a whole-request limit has field violations %+v", err.Violations)
	}
}
