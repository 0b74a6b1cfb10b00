package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestThePublicURLHostDoesNotOpenTheOperatorPages: on a loopback listener without admin_token,
// behind a reverse proxy that passes the public URL's host, the A2A bindings answer under that
// host, but /admin, /admin/api and /metrics refuse it and /readyz gives it the status alone; under
// a loopback Host they stay open, and a foreign name still meets the DNS-rebinding guard.
func TestThePublicURLHostDoesNotOpenTheOperatorPages(t *testing.T) {
	c := newCLI(t, nil)
	base, _ := startServe(t, c, "--public-url", "https://channels.example.com")
	do := func(method, path, host, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s as %s: %v", method, path, host, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		method, path, host, body string
		code                     int
		want                     string
	}{
		{"POST", "/message:send", "channels.example.com", sendBody("via-proxy-1", "hello"), http.StatusOK, `"id"`},
		{"GET", "/admin", "channels.example.com", "", http.StatusForbidden, "operator token"},
		{"GET", "/admin/api/summary", "channels.example.com", "", http.StatusForbidden, "operator token"},
		{"GET", "/admin/api/evidence", "channels.example.com", "", http.StatusForbidden, "operator token"},
		{"GET", "/metrics", "channels.example.com", "", http.StatusForbidden, "operator token"},
		{"GET", "/readyz", "channels.example.com", "", http.StatusOK, `{"status":"ready"}`},
		{"GET", "/admin/api/summary", "", "", http.StatusOK, `"sources"`},
		{"GET", "/metrics", "localhost", "", http.StatusOK, "channels_intake_events_total"},
		{"GET", "/readyz", "", "", http.StatusOK, `"store":"sqlite"`},
		{"GET", "/admin/api/summary", "rebind.attacker.example", "", http.StatusMisdirectedRequest, ""},
	} {
		if code, body := do(tc.method, tc.path, tc.host, tc.body); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s as %q: %d %.200s, want %d with %s", tc.method, tc.path, tc.host, code, body, tc.code, tc.want)
		}
	}
}

// TestConfigCheckWarnsOfAPublicURLWithoutAnAdminToken: a loopback listener with a public URL on
// another name (a reverse proxy in front) and no admin_token draws a warning naming the fix; a
// token, a loopback public URL, or a listener off loopback (warned about already) draw none.
func TestConfigCheckWarnsOfAPublicURLWithoutAnAdminToken(t *testing.T) {
	const warning = "public_url host channels.example.com is not loopback and admin_token is unset"
	for _, tc := range []struct {
		name, yaml string
		warn       bool
	}{
		{"proxied without a token", "listen: 127.0.0.1:8788\npublic_url: https://channels.example.com\n", true},
		{"proxied with a token", "listen: 127.0.0.1:8788\npublic_url: https://channels.example.com\nadmin_token_env: TEST_ADMIN_TOKEN\n", false},
		{"public URL on loopback", "listen: 127.0.0.1:8788\npublic_url: http://localhost:8788\n", false},
		{"default public URL", "listen: 127.0.0.1:8788\n", false},
		{"off loopback", "listen: 0.0.0.0:8788\nallow_anonymous: true\npublic_url: https://channels.example.com\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, path := operatorCLI(t, tc.yaml)
			if code := c.run(context.Background(), "config", "check", "--config", path); code != 0 {
				t.Fatalf("exit %d:\n%s%s", code, c.stdout.String(), c.stderr.String())
			}
			out := c.stdout.String()
			if got := strings.Contains(out, "warning: "+warning); got != tc.warn {
				t.Fatalf("warned %v, want %v:\n%s", got, tc.warn, out)
			}
			if tc.warn && !strings.Contains(out, "set admin_token_env or admin_token_file") {
				t.Errorf("the warning does not say what to do:\n%s", out)
			}
		})
	}
}
