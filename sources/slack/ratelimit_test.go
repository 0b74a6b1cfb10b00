package slack_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/sources"
	slacksrc "github.com/channels-dev/channels/sources/slack"
	"github.com/channels-dev/channels/taskplane"
)

// A split answer first reads the thread (conversations.replies). A 429 there carries
// Retry-After; the delivery waits as long as Slack asks, without spending an attempt.
func TestARateLimitedPartScanWaitsAsSlackAsks(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/auth.test", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "user_id": botUser, "bot_id": botID, "team_id": team})
	})
	mux.HandleFunc("/conversations.replies", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	src := newInstance(t, map[string]any{"mode": "events", "bot_token_file": secretFile(t, "bot", botToken),
		"signing_secret_file": secretFile(t, "signing", signing), "api_url": srv.URL + "/", "max_message_chars": 200})
	loc, _ := json.Marshal(slacksrc.Locator{Team: team, Channel: "C1", ThreadTS: "1.1", TS: "1.1"})
	long := strings.Repeat("word ", 200) // > 200 chars: split into parts
	_, err := src.(sources.Sender).Send(context.Background(), sources.Delivery{ID: "d1", Principal: principal,
		Operation: slacksrc.OpReply, State: taskplane.StateCompleted, Locator: loc,
		Message: taskplane.Message{Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart(long)}}})
	kind, wait, _ := delivery.Classify(err)
	t.Logf("err=%v kind=%s wait=%s", err, kind, wait)
	if kind != delivery.KindRetryAfter || wait != 30*time.Second {
		t.Errorf("a 429 with Retry-After: 30 came back as %s (wait %s): it spends an attempt and ignores Retry-After", kind, wait)
	}
}

// A lookup made before the instance knows its bot (the engine recovers deliveries left in
// sending before Run's auth.test) asks auth.test first. A 429 there carries Retry-After too: the
// lookup waits as Slack asks instead of being spent, for the thread read and the reaction read.
func TestARateLimitedLookupWaitsAsSlackAsksEvenForItsIdentity(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/auth.test", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "20")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	src := newInstance(t, map[string]any{"mode": "events", "bot_token_file": secretFile(t, "bot", botToken),
		"signing_secret_file": secretFile(t, "signing", signing), "api_url": srv.URL + "/"})
	loc, _ := json.Marshal(slacksrc.Locator{Team: team, Channel: "C1", ThreadTS: "1.1", TS: "1.1"})
	for _, op := range []string{slacksrc.OpReply, slacksrc.OpHandled} {
		_, found, err := src.(sources.Reconciler).Lookup(context.Background(), sources.Delivery{ID: "d1", Principal: principal,
			Operation: op, State: taskplane.StateCompleted, Locator: loc})
		kind, wait, _ := delivery.Classify(err)
		if found || kind != delivery.KindRetryAfter || wait != 20*time.Second {
			t.Errorf("%s: a 429 from auth.test (Retry-After: 20) during a lookup came back as found=%v %s (wait %s): %v", op, found, kind, wait, err)
		}
	}
}
