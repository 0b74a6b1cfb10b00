package slack_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/sources"
	slacksrc "github.com/channels-dev/channels/sources/slack"
)

// docs/sources/slack.md (thread scans): "error responses such as `channel_not_found` fail the
// delivery at once". A split answer's scan of its thread that Slack answers channel_not_found
// (the bot was removed, the channel deleted) must fail the delivery, not be retried.
func TestChannelNotFoundOnAScanFailsAtOnce(t *testing.T) {
	timer := time.AfterFunc(60*time.Second, func() { panic("test timed out") })
	defer timer.Stop()

	h := newHarness(t, slacksrc.ModeEvents, func(o map[string]any) { o["max_message_chars"] = 200 })
	acc := h.work("events", callback("Ev-1", mention("ops", "Ev-1", "hi")))
	h.w.mu.Lock()
	h.w.beforeReplies = func(w http.ResponseWriter, _ url.Values) bool {
		reply(w, map[string]any{"ok": false, "error": "channel_not_found"})
		return true
	}
	h.w.mu.Unlock()
	long := strings.Repeat("A long answer paragraph that needs several parts.\n\n", 20)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := h.src.(sources.Sender).Send(ctx, sources.Delivery{ID: "d-gone", Principal: principal, TaskID: acc.Task.ID,
		ContextID: acc.ContextID, Operation: slacksrc.OpReply, State: acc.Task.Status.State, Locator: acc.Task.Origin.Locator,
		Message: agent("a1", long)})
	var de *delivery.Error
	if !errors.As(err, &de) || de.Kind != delivery.KindPermanent {
		t.Fatalf("Send after conversations.replies answered channel_not_found: %v (kind %v), want a permanent failure", err, func() any {
			if de != nil {
				return de.Kind
			}
			return nil
		}())
	}
}
