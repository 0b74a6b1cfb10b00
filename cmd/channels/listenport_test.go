package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// config check refuses a listen port serve cannot bind ("a configuration it passes is one serve
// starts with"), and serve refuses a listen address without a port rather than take any port.
func TestConfigCheckAndServeAgreeOnTheListenPort(t *testing.T) {
	c := newCLI(t, nil)
	if code := c.run(context.Background(), "config", "check", "--listen", "127.0.0.1:70000"); code == 0 {
		c2 := newCLI(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		serveCode := c2.run(ctx, "serve", "--listen", "127.0.0.1:70000")
		t.Errorf("config check passed --listen 127.0.0.1:70000 (exit 0); serve with it exits %d: %s", serveCode, c2.stderr.String())
	}

	// No port: serve must refuse it, not listen on a port the kernel picks.
	c3 := newCLI(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- c3.run(ctx, "serve", "--listen", "127.0.0.1:") }()
	select {
	case code := <-done:
		if code == 0 {
			t.Errorf("serve --listen 127.0.0.1: exited 0: %s", c3.stderr.String())
		}
	case <-time.After(2 * time.Second):
		line := c3.logLine(t, "channels serving")
		cancel()
		<-done
		t.Errorf("serve --listen 127.0.0.1: (no port) is serving on %v", line["listen"])
	}
}

// The operator token is a Bearer token, and the auth scheme is case-insensitive (RFC 9110 §11.1)
// on /metrics and /admin as on the A2A bindings.
func TestOperatorBearerSchemeIsCaseInsensitive(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin_token")
	const token = "0123456789abcdef-admin-from-file"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t, nil)
	base, _ := startServe(t, c, "--admin-token-file", tokenFile)
	client := &http.Client{Timeout: 10 * time.Second}
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", scheme+" "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /metrics with %q scheme and the right token: %d, want 200", scheme, resp.StatusCode)
		}
	}
}

// A listen address without a port is reported once, as the error it is, not also warned of as an
// address off loopback (127.0.0.1 is loopback).
func TestConfigCheckReportsAListenWithoutAPortOnlyAsAnError(t *testing.T) {
	c := newCLI(t, nil)
	if code := c.run(context.Background(), "config", "check", "--listen", "127.0.0.1"); code == 0 {
		t.Fatalf("config check --listen 127.0.0.1 passed: %s", c.stdout.String())
	}
	out := c.stdout.String() + c.stderr.String()
	if !strings.Contains(out, "missing port") {
		t.Errorf("config check --listen 127.0.0.1 does not name the missing port:\n%s", out)
	}
	if strings.Contains(out, "not loopback") {
		t.Errorf("config check --listen 127.0.0.1 warns that it is not loopback:\n%s", out)
	}
}
