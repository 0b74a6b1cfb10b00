package a2ahttp_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/channels-dev/channels/push"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// TestARESTPathTaskIDIsBoundedLikeJSONRPCs: JSON-RPC refuses a task id over MaxIDBytes with
// INVALID_PARAMS (field id) and echoes nothing; REST, whose task id comes from the path, must
// answer the same way instead of looking it up and echoing it back in the error's metadata.
func TestARESTPathTaskIDIsBoundedLikeJSONRPCs(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("x", 64<<10)
	r := e.rpc(tokenAlice, "GetTask", map[string]any{"id": long}, nil)
	if r.Error == nil {
		t.Fatal("jsonrpc GetTask with a 64 KiB id: no error")
	}
	rpcReason := r.reason()
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/tasks/" + long},
		{http.MethodPost, "/tasks/" + long + ":cancel"},
		{http.MethodGet, "/tasks/" + long + ":subscribe"},
	} {
		status, _, b := e.raw(c.method, c.path, tokenAlice, nil, nil)
		_, _, reason := restError(t, b)
		if status != http.StatusBadRequest || reason != rpcReason || strings.Contains(string(b), long) {
			t.Errorf("%s %s…: HTTP %d reason %q (%d bytes, id echoed: %v); JSON-RPC answers %q",
				c.method, c.path[:12], status, reason, len(b), strings.Contains(string(b), long), rpcReason)
		}
	}
}

// TestALongPathIsNotEchoedInARefusal: an unknown operation or a wrong method under a long path (a
// long tenant, say) quotes at most the path's first 128 bytes, not all of it (up to the 1 MiB
// header limit).
func TestALongPathIsNotEchoedInARefusal(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("t", 64<<10)
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/" + long + "/message:send"}, // wrong method: 405
		{http.MethodGet, "/" + long + "/nope"},         // unknown route: 404
	} {
		status, _, b := e.raw(c.method, c.path, tokenAlice, nil, map[string]string{"A2A-Extensions": a2awire.ExtOutfitterTask})
		if strings.Contains(string(b), long) {
			t.Errorf("%s /%s…/…: HTTP %d echoes the %d-byte path (%d bytes answered)", c.method, long[:8], status, len(c.path), len(b))
		}
	}
}

// TestARESTPushConfigIDIsBoundedLikeJSONRPCs: a push config id over MaxIDBytes is INVALID_PARAMS
// on JSON-RPC; on REST, where it comes from the path, it is looked up (GET: not found, echoing
// nothing or the id) or "deleted" with a 200.
func TestARESTPushConfigIDIsBoundedLikeJSONRPCs(t *testing.T) {
	e, _ := newPushEnv(t, push.Options{AllowPrivateNetworks: true}, false)
	task := send(t, e.client(a2awire.BindingHTTPJSON, tokenAlice), userMessage("input"), nil)
	long := strings.Repeat("c", 4096)
	r := e.rpc(tokenAlice, "GetTaskPushNotificationConfig", map[string]any{"taskId": task.ID, "id": long}, nil)
	if r.reason() != "INVALID_PARAMS" {
		t.Fatalf("jsonrpc control: %+v", r.Error)
	}
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		status, _, b := e.raw(m, "/tasks/"+string(task.ID)+"/pushNotificationConfigs/"+long, tokenAlice, nil, nil)
		_, _, reason := restError(t, b)
		if status != http.StatusBadRequest || reason != "INVALID_PARAMS" {
			t.Errorf("REST %s a %d-byte push config id: HTTP %d %q, JSON-RPC answers INVALID_PARAMS", m, len(long), status, reason)
		}
	}
}

// TestPushOperationsAreUnsupportedWhateverTheirPathIDs: with push notifications off, all four
// push-config operations answer PUSH_NOTIFICATION_NOT_SUPPORTED (A2A §3.3.4), as JSON-RPC does
// whatever ids its params carry; REST refused a path task id or config id over MaxIDBytes with
// INVALID_PARAMS instead, so the two bindings answered the same request differently.
func TestPushOperationsAreUnsupportedWhateverTheirPathIDs(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("x", 4096)
	r := e.rpc(tokenAlice, "GetTaskPushNotificationConfig", map[string]any{"taskId": long, "id": long}, nil)
	if r.reason() != "PUSH_NOTIFICATION_NOT_SUPPORTED" {
		t.Fatalf("jsonrpc control: %+v", r.Error)
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/tasks/" + long + "/pushNotificationConfigs"},
		{http.MethodPost, "/tasks/" + long + "/pushNotificationConfigs"},
		{http.MethodGet, "/tasks/t1/pushNotificationConfigs/" + long},
		{http.MethodDelete, "/tasks/" + long + "/pushNotificationConfigs/c1"},
		// A tenant too long to hold, as JSON-RPC's params.tenant is never read by a push method
		// there: in the path and in the query.
		{http.MethodGet, "/" + long + "/tasks/t1/pushNotificationConfigs"},
		{http.MethodGet, "/tasks/t1/pushNotificationConfigs?tenant=" + long},
	} {
		var body []byte
		if c.method == http.MethodPost {
			body = []byte(`{"url":"https://example.com/hook"}`)
		}
		status, _, b := e.raw(c.method, c.path, tokenAlice, body, nil)
		if _, _, reason := restError(t, b); status != http.StatusBadRequest || reason != "PUSH_NOTIFICATION_NOT_SUPPORTED" {
			t.Errorf("%s %s…: HTTP %d %q, want 400 PUSH_NOTIFICATION_NOT_SUPPORTED", c.method, c.path[:20], status, reason)
		}
	}
}
