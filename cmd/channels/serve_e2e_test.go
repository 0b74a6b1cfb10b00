package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// post sends a JSON body and decodes the JSON answer.
func post(t *testing.T, url, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("POST %s: %d %q is not JSON", url, resp.StatusCode, b)
	}
	return resp.StatusCode, m
}

// dig walks nested JSON objects and arrays by key or index.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func sendBody(messageID, text string) string {
	b, _ := json.Marshal(map[string]any{"message": map[string]any{
		"messageId": messageID, "role": "ROLE_USER", "parts": []any{map[string]any{"text": text}}}})
	return string(b)
}

func TestServeEchoesOverBothBindings(t *testing.T) {
	c := newCLI(t, nil)
	base, _ := startServe(t, c)

	code, resp := post(t, base+"/message:send", "", sendBody("m-rest-1", "hello channels"))
	if code != 200 || dig(resp, "task", "status", "state") != "TASK_STATE_COMPLETED" ||
		dig(resp, "task", "status", "message", "parts", 0, "text") != "hello channels" {
		t.Fatalf("REST send: %d %v", code, resp)
	}
	taskID, _ := dig(resp, "task", "id").(string)
	if code, got := get(t, base+"/tasks/"+taskID); code != 200 || dig(got, "status", "state") != "TASK_STATE_COMPLETED" {
		t.Fatalf("GET task: %d %v", code, got)
	}

	rpc := `{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":` + sendBody("m-rpc-1", "over json-rpc") + `}`
	code, resp = post(t, base+"/jsonrpc", "", rpc)
	if code != 200 || dig(resp, "result", "task", "status", "message", "parts", 0, "text") != "over json-rpc" {
		t.Fatalf("JSON-RPC send: %d %v", code, resp)
	}
	if code, card := get(t, base+"/.well-known/agent-card.json"); code != 200 ||
		dig(card, "supportedInterfaces", 0, "url") != base {
		t.Fatalf("card: %d %v", code, card)
	}
}

func TestServeConformanceAgent(t *testing.T) {
	c := newCLI(t, nil)
	base, _ := startServe(t, c, "--executor", "conformance")
	code, resp := post(t, base+"/message:send", "", sendBody("tck-message-response-0123abcd", "hi"))
	if code != 200 || dig(resp, "message", "parts", 0, "text") != "Direct message response" || dig(resp, "task") != nil {
		t.Fatalf("direct message: %d %v", code, resp)
	}
	code, resp = post(t, base+"/message:send", "", sendBody("tck-complete-task-0123abcd", "hi"))
	if code != 200 || dig(resp, "task", "status", "message", "parts", 0, "text") != "Hello from TCK" {
		t.Fatalf("complete task: %d %v", code, resp)
	}
	code, resp = post(t, base+"/message:send", "", sendBody("tck-input-required-0123abcd", "hi"))
	if code != 200 || dig(resp, "task", "status", "state") != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("input required settles a blocking send: %d %v", code, resp)
	}
	// The conformance kit reuses a messageId within a run and expects new work each time: with
	// this executor a messageId is no idempotency key (message_id_dedupe auto).
	first := dig(resp, "task", "id")
	code, resp = post(t, base+"/message:send", "", sendBody("tck-input-required-0123abcd", "hi"))
	if code != 200 || dig(resp, "task", "id") == first || dig(resp, "task", "status", "state") != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("a resent messageId: %d %v, want a new task (the first was %v)", code, resp, first)
	}
}

func TestServeCredentialsFromFile(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "creds.json")
	if err := os.WriteFile(creds, []byte(`{"credentials":[{"token":"s3cret-token","principal":"alice"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t, nil)
	base, _ := startServe(t, c, "--credentials", creds)
	if code, _ := post(t, base+"/message:send", "", sendBody("m-anon", "hi")); code != http.StatusUnauthorized {
		t.Fatalf("anonymous send with credentials configured: %d", code)
	}
	if code, resp := post(t, base+"/message:send", "s3cret-token", sendBody("m-alice", "hi")); code != 200 {
		t.Fatalf("send with token: %d %v", code, resp)
	}
	if strings.Contains(c.stderr.String(), "s3cret-token") {
		t.Fatal("a token reached the log")
	}
}

func TestShutdownEndsOpenStreamsAndDrains(t *testing.T) {
	c := newCLI(t, nil)
	base, stop := startServe(t, c, "--executor", "conformance", "--shutdown-timeout", "20s")
	req, err := http.NewRequest(http.MethodPost, base+"/message:stream",
		strings.NewReader(sendBody("test-resubscribe-message-id-0123abcd", "hold")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	for { // the first event (the task) arrived: the stream is open
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before its first event: %v", err)
		}
		if strings.HasPrefix(line, "data:") {
			break
		}
	}
	began := time.Now()
	streamEnded := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, r)
		close(streamEnded)
	}()
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d; stderr:\n%s", code, c.stderr.String())
	}
	select {
	case <-streamEnded:
	case <-time.After(5 * time.Second):
		t.Fatal("open stream not closed by shutdown")
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Fatalf("shutdown took %s with one open stream", d)
	}
}

func TestServeOnPostgres(t *testing.T) {
	storeURL := storetest.PostgresURL(t)
	c := newCLI(t, map[string]string{"CHANNELS_STORE": storeURL})
	base, stop := startServe(t, c)
	if code, body := get(t, base+"/readyz"); code != 200 || body["store"] != "postgres" {
		t.Fatalf("readyz %d %v", code, body)
	}
	code, resp := post(t, base+"/message:send", "", sendBody("m-pg-1", "hello postgres"))
	if code != 200 || dig(resp, "task", "status", "message", "parts", 0, "text") != "hello postgres" {
		t.Fatalf("send: %d %v", code, resp)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d; stderr:\n%s", code, c.stderr.String())
	}
}

// With turn_drain_timeout, a turn running when serve is told to stop finishes before the process
// exits, instead of being interrupted and run again after the restart.
func TestAShutdownLetsARunningTurnFinishWithinTheDrain(t *testing.T) {
	c := newCLI(t, nil)
	base, stop := startServe(t, c, "--executor", "conformance", "--shutdown-timeout", "20s", "--turn-drain-timeout", "10s")
	b, _ := json.Marshal(map[string]any{"message": map[string]any{"messageId": "tck-delayed-complete-drain-1", "role": "ROLE_USER",
		"parts": []any{map[string]any{"text": "hold"}}}, "configuration": map[string]any{"returnImmediately": true}})
	code, resp := post(t, base+"/message:send", "", string(b))
	id, _ := dig(resp, "task", "id").(string)
	if code != 200 || id == "" {
		t.Fatalf("send: %d %v", code, resp)
	}
	// Stop once the turn runs (a turn not yet claimed is not the drain's).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, task := get(t, base+"/tasks/"+id); dig(task, "status", "state") == "TASK_STATE_WORKING" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the turn did not start")
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d; stderr:\n%s", code, c.stderr.String())
	}
	before := len(c.stdout.String())
	if code := c.run(context.Background(), "tasks", "get", id, "--principal", "anonymous", "--json"); code != 0 {
		t.Fatalf("tasks get: %d %s", code, c.stderr.String())
	}
	if out := c.stdout.String()[before:]; !strings.Contains(out, "TASK_STATE_COMPLETED") && !strings.Contains(out, `"completed"`) {
		t.Fatalf("the turn running at the shutdown did not finish within the drain:\n%s", out)
	}
}
