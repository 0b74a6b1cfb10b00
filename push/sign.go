package push

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Headers of a notification request.
const (
	// HeaderToken carries the config's token (a2a-go's name).
	HeaderToken = "A2A-Notification-Token"
	// HeaderTokenLegacy carries the token again, for receivers written against a2a-python.
	HeaderTokenLegacy = "X-A2A-Notification-Token"
	// HeaderID is the notification's stable id: "<taskId>:<seq>" for the event with that
	// sequence in the task's event log, "<taskId>:<seq>:task:<digest>" for the task snapshot sent
	// when a config is registered (digest: 12 hex digits of the body's SHA-256). Every retry of a
	// notification carries the same id, and one id one body.
	HeaderID = "A2A-Notification-Id"
	// HeaderSignature is "t=<unix seconds>,v1=<hex HMAC-SHA256>" (see Sign).
	HeaderSignature = "A2A-Notification-Signature"
	// HeaderDelivery is the Channels delivery ID of the notification, as `channels deliveries`
	// lists it.
	HeaderDelivery = "X-Channels-Delivery"
	// ContentType is the notification body's media type.
	ContentType = "application/a2a+json"
)

// DefaultTolerance is how far a signature's timestamp may be from the receiver's clock.
const DefaultTolerance = 5 * time.Minute

// Errors of Verify. Test them with errors.Is.
var (
	// ErrNoSignature: the request has no A2A-Notification-Signature header, or no id.
	ErrNoSignature = errors.New("push: notification is not signed")
	// ErrBadSignature: the header is malformed or no v1 signature matches: a forgery, a
	// tampered body or id, or the wrong token.
	ErrBadSignature = errors.New("push: notification signature does not match")
	// ErrStale: the signature's timestamp is outside the tolerance: a replay of an old request,
	// or a clock far off.
	ErrStale = errors.New("push: notification timestamp outside the tolerance")
)

// Sign returns the A2A-Notification-Signature value of a notification: the timestamp t in unix
// seconds and the HMAC-SHA256, keyed with the config's token, of
//
//	<t> "." <notification id> "." <body>
//
// as "t=1700000000,v1=5f2b…" (lowercase hex). The id is signed with the body so a captured
// body cannot be replayed under another id.
func Sign(token string, t time.Time, id string, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(token, ts, id, body))
}

func mac(token, ts, id string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Notification is what Verify read from a genuine notification request.
type Notification struct {
	// ID is the notification's stable id (HeaderID); a receiver acts on each id once.
	ID string
	// Time is when this attempt was signed.
	Time time.Time
}

// Verify checks a notification request as its receiver: h and body are the request's headers
// and the exact body bytes, token the token the receiver registered, now the receiver's clock,
// and tolerance the accepted clock distance (DefaultTolerance when ≤ 0). It returns
// ErrNoSignature, ErrBadSignature or ErrStale, or the notification's id and time.
//
// A signature proves the request came from a holder of the token and that neither body nor id
// was changed; the timestamp bounds replays to the tolerance window. Within the window, remember
// the ids you acted on (see SeenIDs): a retry and a replay carry the same id, and acting on an id
// once makes both harmless.
func Verify(h http.Header, body []byte, token string, now time.Time, tolerance time.Duration) (Notification, error) {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	sig, id := h.Get(HeaderSignature), h.Get(HeaderID)
	if sig == "" || id == "" {
		return Notification{}, ErrNoSignature
	}
	var ts string
	var sums [][]byte
	for _, part := range strings.Split(sig, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Notification{}, fmt.Errorf("%w: malformed header", ErrBadSignature)
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil {
				return Notification{}, fmt.Errorf("%w: malformed v1 value", ErrBadSignature)
			}
			sums = append(sums, b)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sums) == 0 {
		return Notification{}, fmt.Errorf("%w: header needs t and v1", ErrBadSignature)
	}
	want := mac(token, ts, id, body)
	ok := false
	for _, s := range sums {
		if hmac.Equal(s, want) {
			ok = true
		}
	}
	if !ok {
		return Notification{}, ErrBadSignature
	}
	t := time.Unix(sec, 0).UTC()
	if d := now.Sub(t); d > tolerance || d < -tolerance {
		return Notification{}, fmt.Errorf("%w: signed at %s", ErrStale, t.Format(time.RFC3339))
	}
	return Notification{ID: id, Time: t}, nil
}

// SeenTTL is how long SeenIDs remembers an id by default: longer than Channels retries one
// notification (DefaultPolicy: about 10 minutes of backoff, 15 attempts of up to 30 s each, and
// Retry-After waits granted while less than an hour has gone into them, the last of up to an
// hour: under two and a half hours in all), with room to spare.
const SeenTTL = 3 * time.Hour

// SeenIDs remembers notification ids for a while, so a receiver acts on each id once: retries
// and replays carry an id it has seen. It is safe for concurrent use. It lives in memory; a
// receiver that must not act twice across its own restarts keeps the ids in its database instead
// (a unique key on the id, next to the effect).
type SeenIDs struct {
	// TTL is how long an id is remembered (default SeenTTL). Each retry is signed afresh, so
	// Verify's window does not end them: the TTL must outlast the sender's retries of one id.
	TTL time.Duration

	mu   sync.Mutex
	seen map[string]time.Time
	next time.Time
}

// Mark records id at now and reports whether it was already there (act only when false).
func (s *SeenIDs) Mark(id string, now time.Time) (seen bool) {
	ttl := s.TTL
	if ttl <= 0 {
		ttl = SeenTTL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]time.Time{}
	}
	if now.After(s.next) {
		for k, at := range s.seen {
			if now.Sub(at) > ttl {
				delete(s.seen, k)
			}
		}
		s.next = now.Add(ttl / 4)
	}
	if at, ok := s.seen[id]; ok && now.Sub(at) <= ttl {
		return true
	}
	s.seen[id] = now
	return false
}
