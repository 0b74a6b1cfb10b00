package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestEvidenceServerURLIsABaseURL: --server is a base URL whose path the API paths are resolved
// under; one with user information, a query or a fragment is a usage error that does not quote
// it (it may hold a secret), and an error reading the server names its origin only.
func TestEvidenceServerURLIsABaseURL(t *testing.T) {
	for _, server := range []string{"http://127.0.0.1:1/?token=s3cr3t", "http://127.0.0.1:1/#s3cr3t", "http://op:s3cr3t@127.0.0.1:1/"} {
		c := newCLI(t, nil)
		code := c.run(context.Background(), "evidence", "--server", server)
		if msg := c.stderr.String(); code != 2 || strings.Contains(msg, "s3cr3t") || !strings.Contains(msg, "without user information, query or fragment") {
			t.Errorf("--server %s: exit %d, stderr %q; want 2, saying why, without the secret", server, code, msg)
		}
	}

	c := newCLI(t, nil)
	if code := c.run(context.Background(), "evidence", "--server", "http://127.0.0.1:1/prefix", "--source", "hidden-source"); code != 1 {
		t.Fatalf("no server: exit %d, want 1: %s", code, c.stderr.String())
	}
	if msg := c.stderr.String(); !strings.Contains(msg, "from http://127.0.0.1:1:") || strings.Contains(msg, "hidden-source") || strings.Contains(msg, "/prefix") {
		t.Errorf("no server: stderr %q, want the origin alone", msg)
	}

	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"evidence":[],"lastId":0}`))
	}))
	defer srv.Close()
	c = newCLI(t, nil)
	if code := c.run(context.Background(), "evidence", "--server", srv.URL+"/channels/"); code != 0 {
		t.Fatalf("exit %d: %s", code, c.stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[0] != "/channels/admin/api/evidence" {
		t.Errorf("requested %v, want /channels/admin/api/evidence", paths)
	}
}
