package slack_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/sources"
	slacksrc "github.com/channels-dev/channels/sources/slack"
)

// docs/sources/slack.md: "A 429 is honoured as Retry-After ... its Retry-After may be seconds or
// an HTTP date." An HTTP date must not be turned into a shorter wait than the date says.
func TestRetryAfterDateIsNotShortened(t *testing.T) {
	timer := time.AfterFunc(60*time.Second, func() { panic("test timed out") })
	defer timer.Stop()

	h := newHarness(t, slacksrc.ModeEvents, nil)
	acc := h.work("events", callback("Ev-1", mention("ops", "Ev-1", "hi")))
	// Start half-way through a wall-clock second, so that the date (1 s resolution) is 1.5 s away.
	now := time.Now()
	time.Sleep(time.Second - time.Duration(now.Nanosecond()) + 500*time.Millisecond)
	date := time.Now().Truncate(time.Second).Add(2 * time.Second)
	h.w.beforePost = func(w http.ResponseWriter, _ url.Values) bool {
		w.Header().Set("Retry-After", date.UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusTooManyRequests)
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := h.src.(sources.Sender).Send(ctx, sources.Delivery{ID: "d-ra", Principal: principal, TaskID: acc.Task.ID,
		ContextID: acc.ContextID, Operation: slacksrc.OpReply, State: acc.Task.Status.State, Locator: acc.Task.Origin.Locator,
		Message: agent("a1", "hello")})
	var de *delivery.Error
	if !errors.As(err, &de) || de.Kind != delivery.KindRetryAfter {
		t.Fatalf("Send: %v, want a RetryAfter", err)
	}
	// The wait counts from when the answer came, at the latest now: it must reach the date.
	if retry := time.Now().Add(de.RetryAfter); retry.Before(date) {
		t.Fatalf("Retry-After %s (%s after the send began) became a wait of %s: the retry comes %s before Slack allows it",
			date.UTC().Format(http.TimeFormat), date.Sub(start).Round(time.Millisecond), de.RetryAfter, date.Sub(retry).Round(time.Millisecond))
	}
}
