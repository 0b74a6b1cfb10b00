package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// workerCall makes one worker API call.
func workerCall(t *testing.T, url, token, lease, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if lease != "" {
		req.Header.Set("Channels-Lease", lease)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// workerTokens writes a worker tokens file with one worker, "bot", whose token is
// worker-token-0123456789 and who serves every principal, and returns its path.
func workerTokens(t *testing.T) string {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "workers.json")
	if err := os.WriteFile(tokens, []byte(`{"workers":[{"name":"bot","token":"worker-token-0123456789","principals":["*"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return tokens
}

// TestServeWorkerExecutor: `serve --executor worker` mounts the worker API; a resident agent
// claims the task an A2A caller sent, completes it with an output, and the caller sees it; the
// turn is timed in channels_executor_turn_duration_seconds.
func TestServeWorkerExecutor(t *testing.T) {
	tokens := workerTokens(t)
	c := newCLI(t, nil)
	base, _ := startServe(t, c, "--executor", "worker", "--worker-tokens", tokens, "--task-timeout", "1h")
	body := `{"message":{"messageId":"m-w1","role":"ROLE_USER","parts":[{"text":"summarize"}]},"configuration":{"returnImmediately":true}}`
	code, resp := post(t, base+"/message:send", "", body)
	if code != 200 || dig(resp, "task", "status", "state") != "TASK_STATE_SUBMITTED" {
		t.Fatalf("send: %d %v", code, resp)
	}
	taskID := dig(resp, "task", "id").(string)
	code, claim := workerCall(t, base+"/worker/v1/claim?wait=5s", "worker-token-0123456789", "", "")
	if code != 200 || claim["taskId"] != taskID {
		t.Fatalf("claim: %d %v", code, claim)
	}
	lease := claim["lease"].(string)
	code, done := workerCall(t, base+"/worker/v1/tasks/"+taskID+"/complete", "worker-token-0123456789", lease,
		`{"response":"a summary","outputs":[{"name":"summary","value":{"words":2}}]}`)
	if code != 200 || done["state"] != "completed" {
		t.Fatalf("complete: %d %v", code, done)
	}
	code, got := get(t, base+"/tasks/"+taskID)
	if code != 200 || dig(got, "status", "state") != "TASK_STATE_COMPLETED" ||
		dig(got, "status", "message", "parts", 0, "text") != "a summary" || dig(got, "artifacts", 0, "name") != "summary" {
		t.Fatalf("GET task: %d %v", code, got)
	}
	if strings.Contains(c.stderr.String(), "worker-token-0123456789") {
		t.Fatal("a worker token reached the log")
	}
	// The worker's turn, claim to complete, is timed as a turn of the worker executor.
	if code, m := getText(t, base+"/metrics", ""); code != 200 ||
		!strings.Contains(m, "\n"+`channels_executor_turn_duration_seconds_count{executor="worker",outcome="ok"} 1`+"\n") {
		t.Errorf("/metrics = %d, want one worker turn in channels_executor_turn_duration_seconds:\n%s", code, m)
	}
}

// A worker waiting in a claim when the server shuts down is answered at once (503 shutting-down,
// claim again) instead of holding the shutdown: without that, the claim would go on waiting until
// half the shutdown timeout cancels it, and be answered 204 (no work).
func TestAWaitingWorkerClaimEndsWhenTheServerShutsDown(t *testing.T) {
	tokens := workerTokens(t)
	c := newCLI(t, nil)
	base, stop := startServe(t, c, "--executor", "worker", "--worker-tokens", tokens, "--shutdown-timeout", "20s")
	type answer struct {
		code int
		body map[string]any
		err  error
	}
	// The claim carries a body behind "Expect: 100-continue": the server asks for it when the
	// claim's handler reads it, so the 100 Continue says the claim is in the worker API, past
	// the server's accept, and not a connection a shutdown could still refuse.
	running := make(chan struct{})
	req, err := http.NewRequestWithContext(
		httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got100Continue: func() { close(running) }}),
		http.MethodPost, base+"/worker/v1/claim?wait=30s", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer worker-token-0123456789")
	req.Header.Set("Expect", "100-continue")
	tr := &http.Transport{ExpectContinueTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	claimed := make(chan answer, 1)
	go func() {
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			claimed <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		claimed <- answer{code: resp.StatusCode, body: m}
	}()
	select {
	case <-running:
	case a := <-claimed:
		t.Fatalf("the claim was answered before the shutdown: %d %v %v", a.code, a.body, a.err)
	case <-time.After(20 * time.Second):
		t.Fatal("the claim never reached the worker API")
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	select {
	case a := <-claimed:
		if a.err != nil {
			t.Fatalf("the waiting claim: %v, want a 503 answer", a.err)
		}
		if a.code != http.StatusServiceUnavailable || dig(a.body, "error", "code") != "shutting-down" {
			t.Errorf("the waiting claim was answered %d %v, want 503 shutting-down", a.code, a.body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting claim was never answered")
	}
	if strings.Contains(c.stderr.String(), "after half the shutdown timeout") {
		t.Error("the shutdown waited half its timeout for requests still running")
	}
}

// TestServeExecExecutor: `serve --executor exec` runs the command per wake.
func TestServeExecExecutor(t *testing.T) {
	script := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncat >/dev/null\necho '{\"result\":\"complete\",\"response\":\"from exec\"}'\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t, nil)
	base, _ := startServe(t, c, "--executor", "exec", "--exec-command", script)
	code, resp := post(t, base+"/message:send", "", sendBody("m-e1", "hi"))
	if code != 200 || dig(resp, "task", "status", "message", "parts", 0, "text") != "from exec" {
		t.Fatalf("send: %d %v", code, resp)
	}
}

func TestServeRefusesAnExecutorWithoutItsSettings(t *testing.T) {
	for _, args := range [][]string{{"--executor", "a2a"}, {"--executor", "exec"}, {"--executor", "worker"},
		{"--executor", "a2a", "--agent-url", "http://agent.example.com"}} {
		c := newCLI(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if code := c.run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...); code == 0 {
			t.Errorf("serve %v started", args)
		}
		cancel()
	}
}
