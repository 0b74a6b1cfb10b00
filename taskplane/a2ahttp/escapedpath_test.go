package a2ahttp_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/channels-dev/channels/taskplane/a2awire"
)

// errorTaskID is the taskId an AIP-193 error body's ErrorInfo names ("" for none).
func errorTaskID(t *testing.T, body []byte) string {
	t.Helper()
	var env struct {
		Error struct {
			Details []struct {
				Type     string            `json:"@type"`
				Metadata map[string]string `json:"metadata"`
			} `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatalf("error body: %v: %s", err, body)
	}
	for _, d := range env.Error.Details {
		if d.Type == a2awire.ErrorInfoType {
			return d.Metadata["taskId"]
		}
	}
	return ""
}

// TestAPercentEncodedSlashStaysInsideItsPathSegment: {tenant} and {id} are one path segment
// each, so a client whose tenant or task id holds a "/" sends it as %2F. The server routes on
// the path as sent, segment by segment, and decodes each: /acme%2Feu/message:send is a send
// under tenant acme/eu (not a send under tenant acme to the unknown route eu/message:send), and
// /tasks/a%2Fb is the task a/b (unknown: TASK_NOT_FOUND, not an unknown route). So is a %3A: the
// colon of a custom verb is the one written as a colon.
func TestAPercentEncodedSlashStaysInsideItsPathSegment(t *testing.T) {
	for _, base := range []string{"", "/agents"} {
		t.Run("public URL path "+base+"/", func(t *testing.T) {
			e := newEnv(t, func(c *a2aConfig) { c.PublicURL += base })
			ext := map[string]string{"A2A-Extensions": a2awire.ExtOutfitterTask}

			for _, c := range []struct{ method, path, id string }{
				{http.MethodGet, "/tasks/a%2Fb", "a/b"},
				{http.MethodGet, "/acme%2Feu/tasks/a%2Fb", "a/b"},
				{http.MethodPost, "/tasks/a%2Fb:cancel", "a/b"},
				{http.MethodGet, "/tasks/a%3Ab", "a:b"},
			} {
				status, _, b := e.raw(c.method, base+c.path, tokenAlice, nil, nil)
				_, _, reason := restError(t, b)
				if status != http.StatusNotFound || reason != "TASK_NOT_FOUND" || errorTaskID(t, b) != c.id {
					t.Errorf("%s %s%s: HTTP %d %s naming task %q, want TASK_NOT_FOUND naming %q: %s",
						c.method, base, c.path, status, reason, errorTaskID(t, b), c.id, b)
				}
			}

			status, _, b := e.raw(http.MethodPost, base+"/acme%2Feu/message:send", tokenAlice,
				sendBody(t, wireMsg("escaped-tenant", "complete"), nil), ext)
			if status != http.StatusOK {
				t.Fatalf("POST %s/acme%%2Feu/message:send: HTTP %d: %s", base, status, b)
			}
			var resp struct {
				Task struct {
					ID       string                    `json:"id"`
					Metadata map[string]map[string]any `json:"metadata"`
				} `json:"task"`
			}
			if err := json.Unmarshal(b, &resp); err != nil {
				t.Fatal(err)
			}
			if got := resp.Task.Metadata[a2awire.ExtOutfitterTask]["tenant"]; got != "acme/eu" {
				t.Fatalf("the task's locator names tenant %v, want acme/eu", got)
			}
			// The task is read back under the same tenant, and by its id.
			status, _, b = e.raw(http.MethodGet, base+"/acme%2Feu/tasks/"+resp.Task.ID, tokenAlice, nil, ext)
			if status != http.StatusOK {
				t.Fatalf("GET %s/acme%%2Feu/tasks/{id}: HTTP %d: %s", base, status, b)
			}
		})
	}
}

// TestAPercentEncodedSlashStaysInsideItsSegmentBesideBytesSentUnescaped: a client may send
// bytes of a tenant or id unescaped that an escaping client would escape (a "|", UTF-8), next
// to the %2F of a "/". The path is still split as sent: net/url's EscapedPath, which re-escapes
// the decoded path once the path as sent holds such a byte, would turn the %2F into a slash.
func TestAPercentEncodedSlashStaysInsideItsSegmentBesideBytesSentUnescaped(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ path, id string }{
		{"/tasks/a%2Fb|c", "a/b|c"},
		{"/tasks/é%2Fb", "é/b"},
		{"/équipe%2Feu/tasks/a", "a"},
	} {
		r := httptest.NewRequest(http.MethodGet, c.path, nil) // the request line as a server reads it
		r.Header.Set("Authorization", "Bearer "+tokenAlice)
		w := httptest.NewRecorder()
		e.srv.ServeHTTP(w, r)
		b := w.Body.Bytes()
		_, _, reason := restError(t, b)
		if w.Code != http.StatusNotFound || reason != "TASK_NOT_FOUND" || errorTaskID(t, b) != c.id {
			t.Errorf("GET %s: HTTP %d %s naming task %q, want TASK_NOT_FOUND naming %q: %s",
				c.path, w.Code, reason, errorTaskID(t, b), c.id, b)
		}
	}
}
