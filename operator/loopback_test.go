package operator_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/channels-dev/channels/operator"
)

// TestLoopbackTrustRefusesForeignHostNames: on a loopback listener a request is served only
// under a loopback name or the public URL's host, whatever it carries, so a page re-pointed at
// 127.0.0.1 by DNS rebinding cannot use the listener's trust; the provider webhooks a source
// registered, health and the public card are unaffected, and a path under /sources/ that no
// source registered stays guarded.
func TestLoopbackTrustRefusesForeignHostNames(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux := http.NewServeMux()
	mux.Handle("POST /sources/webhook/ci", ok)
	mux.Handle("GET /healthz", ok)
	mux.Handle("/", ok) // the A2A binding's catch-all
	h := operator.LoopbackHosts(mux, "channels.example.com", nil)
	for _, tc := range []struct {
		method, host, path, auth string
		want                     int
	}{
		{"GET", "127.0.0.1:8788", "/tasks", "", http.StatusNoContent},
		{"GET", "localhost:8788", "/admin", "", http.StatusNoContent},
		{"GET", "LOCALHOST.", "/tasks", "", http.StatusNoContent},
		{"GET", "app.localhost:8788", "/tasks", "", http.StatusNoContent},
		{"POST", "[::1]:8788", "/message:send", "", http.StatusNoContent},
		{"GET", "127.1.2.3", "/tasks", "", http.StatusNoContent},
		{"GET", "channels.example.com", "/tasks", "", http.StatusNoContent},
		{"GET", "rebind.attacker.example:8788", "/tasks", "", http.StatusMisdirectedRequest},
		{"GET", "rebind.attacker.example:8788", "/admin/api/evidence", "", http.StatusMisdirectedRequest},
		{"POST", "rebind.attacker.example:8788", "/message:send", "", http.StatusMisdirectedRequest},
		{"GET", "10.0.0.5:8788", "/tasks", "", http.StatusMisdirectedRequest},
		{"GET", "rebind.attacker.example:8788", "/admin/api/summary", "Bearer made-up", http.StatusMisdirectedRequest},
		{"GET", "rebind.attacker.example", "/sources/tasks", "", http.StatusMisdirectedRequest},
		{"POST", "rebind.attacker.example", "/sources/message:send", "", http.StatusMisdirectedRequest},
		{"POST", "hooks.example.net", "/sources/webhook/ci", "", http.StatusNoContent},
		{"GET", "rebind.attacker.example", "/healthz", "", http.StatusNoContent},
		{"GET", "rebind.attacker.example", "/.well-known/agent-card.json", "", http.StatusNoContent},
	} {
		r := httptest.NewRequest(tc.method, "http://x"+tc.path, nil)
		r.Host = tc.host
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s Host %s %s (auth %q): %d, want %d", tc.method, tc.host, tc.path, tc.auth, w.Code, tc.want)
		}
	}
}
