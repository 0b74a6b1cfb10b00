package push_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

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
	if s.Mark("t1:1", now.Add(time.Hour)) {
		t.Fatal("an id was remembered past its TTL")
	}
}
