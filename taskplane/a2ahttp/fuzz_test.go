package a2ahttp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2aservice"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// FuzzRESTDecode feeds arbitrary bodies, paths and queries to the HTTP+JSON request decoding.
// Decoding never panics, every refusal is a protocol error, and an accepted message survives a
// round trip through the domain and back to the wire unchanged.
func FuzzRESTDecode(f *testing.F) {
	seeds := []struct{ path, query, body string }{
		{"/message:send", "", `{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}}`},
		{"/message:stream", "", `{"message":{"message_id":"m2","role":1,"parts":[{"raw":"dGNr","filename":"a.txt","mediaType":"text/plain"},{"data":{"k":[1,2.5,"x",null]}}],"metadata":{"a":{"b":1e3}}},"configuration":{"historyLength":"3","returnImmediately":true}}`},
		{"/acme/message:send", "", `{"message":{"messageId":"m3","role":"ROLE_USER","parts":[{"url":"https://example.com/x"}],"taskId":"t","contextId":"c","referenceTaskIds":["a"],"extensions":["u"]}}`},
		{"/tasks/abc:cancel", "", `{"metadata":{"why":"because"}}`},
		{"/tasks/abc:cancel", "", `null`},
		{"/tasks", "pageSize=10&status=TASK_STATE_WORKING&statusTimestampAfter=2025-10-28T10:30:00.000Z&includeArtifacts=true&historyLength=0", ""},
		{"/tasks/abc", "historyLength=2", ""},
		{"/tasks/abc:subscribe", "", ""},
		{"/message:send", "", `{"message":{"messageId":"m4","role":"ROLE_USER","parts":[{"text":"a","url":"https://x"}]}}`},
		{"/message:send", "", `{"message":`},
		{"/message:send", "", `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`},
		{"/tasks/a/pushNotificationConfigs/b", "", ""},
		{"/acme%2Feu/tasks/a%2Fb%3Ac:cancel", "", ""},
	}
	for _, s := range seeds {
		f.Add(s.path, s.query, []byte(s.body))
	}
	plane := taskplane.New(nil)
	svc, err := a2aservice.New(plane, nil, nil, a2aservice.Config{Loopback: true})
	if err != nil {
		f.Fatal(err)
	}
	s := &Server{svc: svc}
	f.Fuzz(func(t *testing.T, path, query string, body []byte) {
		if raw, segs, ok := pathSegments(path); ok {
			restRoute(raw, segs) // must not panic
		}
		if q, err := url.ParseQuery(query); err == nil {
			if _, werr := a2awire.ListTasksFromQuery(q, svc.Limits()); werr != nil && werr.Kind == nil {
				t.Fatalf("error without kind: %v", werr)
			}
			_, _ = a2awire.HistoryLengthFromQuery(q)
		}
		r := httptest.NewRequest(http.MethodPost, "/message:send", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		call := a2aservice.Call{}
		req, werr := s.decodeSend(r, &call)
		if werr != nil {
			if werr.Kind == nil || a2awire.KindOf(werr).HTTPStatus < 400 {
				t.Fatalf("refusal is not a protocol error: %#v", werr)
			}
		} else {
			roundTrip(t, req)
		}
		r = httptest.NewRequest(http.MethodPost, "/tasks/x:cancel", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if b, werr := s.readBody(r); werr == nil {
			_, _ = a2awire.DecodeCancelTaskRequest(b, svc.Limits())
		}
	})
}

// roundTrip checks that a decoded message converts to the domain and back to the wire without
// change.
func roundTrip(t *testing.T, req *a2awire.SendMessageRequest) {
	t.Helper()
	m1 := a2awire.ToMessage(req.Message)
	if _, ok := m1.Metadata[a2awire.ExtElicitation]; ok {
		return // stripped on output for callers that did not activate the extension
	}
	wire, err := json.Marshal(map[string]any{"message": a2awire.FromMessage(m1, a2awire.View{})})
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	req2, werr := a2awire.DecodeSendMessageRequest(wire, a2awire.Limits{})
	if werr != nil {
		t.Fatalf("re-decode of %s: %v", wire, werr)
	}
	m2 := a2awire.ToMessage(req2.Message)
	if diff := cmp.Diff(m1, m2, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("round trip changed the message (-first +second):\n%s", diff)
	}
}
