package slack_test

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/channels-dev/channels/delivery"
	slacksrc "github.com/channels-dev/channels/sources/slack"
)

func TestSlackClassifiesSendFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		kind   delivery.Kind
		wait   time.Duration
		status string
	}{
		{"429 with Retry-After", &slack.RateLimitedError{RetryAfter: 12 * time.Second}, delivery.KindRetryAfter, 12 * time.Second, "429"},
		{"429 without Retry-After", slack.StatusCodeError{Code: 429, Status: "429 Too Many Requests"}, delivery.KindRetryable, 0, "429"},
		{"channel_not_found", slack.SlackErrorResponse{Err: "channel_not_found"}, delivery.KindPermanent, 0, "channel_not_found"},
		{"not_in_channel", fmt.Errorf("post: %w", slack.SlackErrorResponse{Err: "not_in_channel"}), delivery.KindPermanent, 0, "not_in_channel"},
		{"invalid_auth", slack.SlackErrorResponse{Err: "invalid_auth"}, delivery.KindPermanent, 0, "invalid_auth"},
		{"service_unavailable", slack.SlackErrorResponse{Err: "service_unavailable"}, delivery.KindRetryable, 0, "service_unavailable"},
		{"internal_error may have posted", slack.SlackErrorResponse{Err: "internal_error"}, delivery.KindIndeterminate, 0, "internal_error"},
		{"a 500", slack.StatusCodeError{Code: 500, Status: "500 Internal Server Error"}, delivery.KindIndeterminate, 0, "500 Internal Server Error"},
		{"a bare 503 may have posted", slack.StatusCodeError{Code: 503, Status: "503 Service Unavailable"}, delivery.KindIndeterminate, 0, "503 Service Unavailable"},
		{"a 404", slack.StatusCodeError{Code: 404, Status: "404 Not Found"}, delivery.KindPermanent, 0, "404 Not Found"},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, delivery.KindRetryable, 0, ""},
		{"a reset after writing", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, delivery.KindIndeterminate, 0, ""},
		{"a timeout", errors.New("context deadline exceeded"), delivery.KindIndeterminate, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, wait, status := delivery.Classify(slacksrc.Classify(tc.err))
			if kind != tc.kind || wait != tc.wait || status != tc.status {
				t.Fatalf("classify(%v) = %s %s %q, want %s %s %q", tc.err, kind, wait, status, tc.kind, tc.wait, tc.status)
			}
		})
	}
}
