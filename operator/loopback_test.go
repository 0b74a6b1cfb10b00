package operator_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/channels-dev/channels/operator"
)

// TestLoopbackTrustRefusesForeignHostNames: on a loopback listener a request without credentials
// is served only under a loopback name or the public URL's host, so a page re-pointed at
// 127.0.0.1 by DNS rebinding cannot use the trust; credentials, provider webhooks, health and
// the public card are unaffected.
func TestLoopbackTrustRefusesForeignHostNames(t *testing.T) {
	h := operator.LoopbackHosts(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), "channels.example.com")
	for _, tc := range []struct {
		host, path, auth string
		want             int
	}{
		{"127.0.0.1:8788", "/tasks", "", http.StatusNoContent},
		{"localhost:8788", "/admin", "", http.StatusNoContent},
		{"LOCALHOST.", "/tasks", "", http.StatusNoContent},
		{"app.localhost:8788", "/tasks", "", http.StatusNoContent},
		{"[::1]:8788", "/message:send", "", http.StatusNoContent},
		{"127.1.2.3", "/tasks", "", http.StatusNoContent},
		{"channels.example.com", "/tasks", "", http.StatusNoContent},
		{"rebind.attacker.example:8788", "/tasks", "", http.StatusMisdirectedRequest},
		{"rebind.attacker.example:8788", "/admin/api/evidence", "", http.StatusMisdirectedRequest},
		{"rebind.attacker.example:8788", "/message:send", "", http.StatusMisdirectedRequest},
		{"10.0.0.5:8788", "/tasks", "", http.StatusMisdirectedRequest},
		{"rebind.attacker.example:8788", "/tasks", "Bearer t", http.StatusNoContent},
		{"hooks.example.net", "/sources/webhook/ci", "", http.StatusNoContent},
		{"rebind.attacker.example", "/healthz", "", http.StatusNoContent},
		{"rebind.attacker.example", "/.well-known/agent-card.json", "", http.StatusNoContent},
	} {
		r := httptest.NewRequest(http.MethodGet, "http://x"+tc.path, nil)
		r.Host = tc.host
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("Host %s %s (auth %q): %d, want %d", tc.host, tc.path, tc.auth, w.Code, tc.want)
		}
	}
}
