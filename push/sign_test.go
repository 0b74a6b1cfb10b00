package push_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/push"
)

func signed(token string, at time.Time, id string, body []byte) http.Header {
	h := http.Header{}
	h.Set(push.HeaderID, id)
	h.Set(push.HeaderSignature, push.Sign(token, at, id, body))
	return h
}

func TestVerifyAcceptsGenuineAndRejectsForgeriesAndReplays(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	body := []byte(`{"statusUpdate":{"taskId":"t1"}}`)
	h := signed("s3cret", now, "t1:4", body)

	n, err := push.Verify(h, body, "s3cret", now.Add(time.Minute), 0)
	if err != nil || n.ID != "t1:4" || !n.Time.Equal(now) {
		t.Fatalf("genuine: %+v, %v", n, err)
	}
	if _, err := push.Verify(h, []byte(`{"statusUpdate":{"taskId":"t2"}}`), "s3cret", now, 0); !errors.Is(err, push.ErrBadSignature) {
		t.Errorf("tampered body: err = %v", err)
	}
	if _, err := push.Verify(h, body, "guess", now, 0); !errors.Is(err, push.ErrBadSignature) {
		t.Errorf("wrong token: err = %v", err)
	}
	moved := h.Clone()
	moved.Set(push.HeaderID, "t1:5")
	if _, err := push.Verify(moved, body, "s3cret", now, 0); !errors.Is(err, push.ErrBadSignature) {
		t.Errorf("body replayed under another id: err = %v", err)
	}
	if _, err := push.Verify(h, body, "s3cret", now.Add(10*time.Minute), 0); !errors.Is(err, push.ErrStale) {
		t.Errorf("replay after the window: err = %v", err)
	}
	if _, err := push.Verify(h, body, "s3cret", now.Add(-10*time.Minute), 0); !errors.Is(err, push.ErrStale) {
		t.Errorf("timestamp from the future: err = %v", err)
	}
	if _, err := push.Verify(http.Header{}, body, "s3cret", now, 0); !errors.Is(err, push.ErrNoSignature) {
		t.Errorf("unsigned: err = %v", err)
	}
	for _, v := range []string{"garbage", "t=abc,v1=00", "t=1", "v1=zz"} {
		bad := h.Clone()
		bad.Set(push.HeaderSignature, v)
		if _, err := push.Verify(bad, body, "s3cret", now, 0); !errors.Is(err, push.ErrBadSignature) {
			t.Errorf("header %q: err = %v", v, err)
		}
	}
}

func TestSeenIDsActsOnEachIDOnce(t *testing.T) {
	var s push.SeenIDs
	now := time.Now()
	if s.Mark("t1:1", now) {
		t.Fatal("a new id was seen")
	}
	if !s.Mark("t1:1", now.Add(time.Second)) {
		t.Fatal("a retry was not seen")
	}
	if s.Mark("t1:2", now) {
		t.Fatal("another id was seen")
	}
	if s.Mark("t1:1", now.Add(push.SeenTTL+time.Minute)) {
		t.Fatal("an id was remembered past its TTL")
	}
}

// A receiver using SeenIDs acts on an id once for as long as Channels may retry it: every retry is
// signed afresh, so Verify accepts the last one however late it comes, and SeenIDs must still
// remember the id then — after the longest backoff of DefaultPolicy (each wait at its most, with
// jitter), Retry-After waits up to the total and one more of the longest (granted whole), and
// every attempt taking the longest push_timeout.
func TestSeenIDsOutlastChannelsRetriesOfOneID(t *testing.T) {
	pol := push.DefaultPolicy
	longest := pol.MaxRetryAfter
	if longest == 0 {
		longest = delivery.DefaultPolicy.MaxRetryAfter
	}
	span := pol.MaxRetryAfterTotal + longest + time.Duration(pol.MaxAttempts)*30*time.Second
	wait := pol.InitialInterval
	for range pol.MaxAttempts - 1 {
		span += time.Duration(float64(min(wait, pol.MaxInterval)) * (1 + delivery.DefaultPolicy.RandomizationFactor))
		wait *= 2
	}
	var seen push.SeenIDs
	t0 := time.Now()
	if seen.Mark("task-1:7", t0) {
		t.Fatal("a new id was taken for seen")
	}
	seen.Mark("other:1", t0.Add(span)) // sweeps what it has forgotten
	if !seen.Mark("task-1:7", t0.Add(span)) {
		t.Fatalf("a retry %s after the first attempt is not recognised: the receiver acts twice", span)
	}
}
