package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/push"
)

func pushSendBody(messageID, hookURL, token string) string {
	b, _ := json.Marshal(map[string]any{
		"message":       map[string]any{"messageId": messageID, "role": "ROLE_USER", "parts": []any{map[string]any{"text": "hi"}}},
		"configuration": map[string]any{"taskPushNotificationConfig": map[string]any{"url": hookURL, "token": token}},
	})
	return string(b)
}

// The conformance kit's push group, in miniature: with the operator's opt-in a webhook on
// loopback receives the task and every transition, signed; without it the webhook is refused.
func TestServePushNotificationsToALoopbackWebhook(t *testing.T) {
	var (
		mu   sync.Mutex
		got  []string
		errs []error
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, err := push.Verify(r.Header, b, "tck-token", time.Now(), 0)
		var resp map[string]map[string]any
		_ = json.Unmarshal(b, &resp)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
		}
		for k, v := range resp {
			state, _ := dig(v, "status", "state").(string)
			got = append(got, strings.TrimSpace(k+" "+state))
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer hook.Close()

	t.Run("opt-in", func(t *testing.T) {
		c := newCLI(t, nil)
		base, _ := startServe(t, c, "--executor", "conformance", "--push-allow-private-networks")
		if _, card := get(t, base+"/.well-known/agent-card.json"); dig(card, "capabilities", "pushNotifications") != true {
			t.Fatalf("card capabilities: %v", dig(card, "capabilities"))
		}
		code, resp := post(t, base+"/message:send", "", pushSendBody("tck-stream-001-0123abcd", hook.URL+"/a2a", "tck-token"))
		if code != 200 || dig(resp, "task", "status", "state") != "TASK_STATE_COMPLETED" {
			t.Fatalf("send: %d %v", code, resp)
		}
		want := []string{"task TASK_STATE_SUBMITTED", "statusUpdate TASK_STATE_WORKING", "artifactUpdate",
			"statusUpdate TASK_STATE_COMPLETED"}
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			n := len(got)
			mu.Unlock()
			if n >= len(want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		if strings.Join(got, ", ") != strings.Join(want, ", ") || len(errs) != 0 {
			t.Fatalf("webhook got %v (signature errors %v), want %v", got, errs, want)
		}
	})

	t.Run("default", func(t *testing.T) {
		c := newCLI(t, nil)
		base, _ := startServe(t, c, "--executor", "conformance")
		for hookURL, why := range map[string]string{
			hook.URL + "/a2a":          "webhooks must use https",
			"https://127.0.0.1:1/a2a":  "(loopback)",
			"https://[::1]:1/a2a":      "(loopback)",
			"https://192.168.1.20/a2a": "(private)",
		} {
			code, resp := post(t, base+"/message:send", "", pushSendBody("tck-complete-task-"+why, hookURL, "tck-token"))
			msg, _ := dig(resp, "error", "message").(string)
			if code != http.StatusBadRequest || !strings.Contains(msg, why) {
				t.Errorf("%s without the opt-in: %d %v", hookURL, code, resp)
			}
		}
	})
}
