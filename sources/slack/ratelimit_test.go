package slack_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
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

// With a strict conversations.replies limit (one call a minute, 15 messages a page) the thread
// scan of a split answer is refused every page after the first. Each try goes on from the page
// the last one was refused, not from page 1 again, so the scan of a long thread completes and the
// answer is posted; no page is read twice.
func TestARateLimitedThreadScanGoesOnWhereItStopped(t *testing.T) {
	h := newHarness(t, slacksrc.ModeEvents, func(o map[string]any) { o["max_message_chars"] = 200 })
	acc := h.work("events", callback("Ev-1", mention("ops", "Ev-1", "deploy")))
	h.w.pageSize = 15
	for range 40 {
		h.w.addHumanMessage(channelOf("ops"), rootOf("ops"), "chatter")
	}
	calls, pages := 0, map[string]int{}
	h.w.beforeReplies = func(w http.ResponseWriter, f url.Values) bool {
		calls++
		if calls%2 == 0 { // one call per window: the second one is refused
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}
		pages[f.Get("cursor")]++
		return false
	}
	d := sources.Delivery{ID: "d-long", Principal: principal, TaskID: acc.Task.ID, Operation: slacksrc.OpReply,
		State: taskplane.StateCompleted, Locator: acc.Task.Origin.Locator, Message: agent("a-long", strings.Repeat("word ", 100))}
	for try := 1; ; try++ {
		_, err := h.src.(sources.Sender).Send(context.Background(), d)
		if err == nil {
			break
		}
		if kind, wait, _ := delivery.Classify(err); kind != delivery.KindRetryAfter || wait != time.Minute {
			t.Fatalf("try %d: %s (wait %s), want Slack's Retry-After: %v", try, kind, wait, err)
		}
		if try == 6 {
			t.Fatalf("after %d tries the split answer is still not posted (%d conversations.replies calls, pages read %v): every try starts the scan again", try, calls, pages)
		}
	}
	if h.w.postCount() < 2 {
		t.Fatalf("%d posts, want the answer's parts", h.w.postCount())
	}
	for cursor, n := range pages {
		if n > 1 {
			t.Errorf("the page at cursor %q was read %d times", cursor, n)
		}
	}
}
