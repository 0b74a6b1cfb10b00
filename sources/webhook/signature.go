package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The signature scheme: the sender sets
//
//	X-Channels-Timestamp: <unix seconds>
//	X-Channels-Signature: sha256=<hex HMAC-SHA256(secret, timestamp + "." + body)>
//
// Signing the timestamp with the body stops a captured request from being replayed outside the
// window. Callbacks (Send) are signed the same way over "callback." + timestamp + "." + body
// (SignCallback), so an answer Channels sends can never pass for an event sent to it.
const (
	HeaderTimestamp = "X-Channels-Timestamp"
	HeaderSignature = "X-Channels-Signature"
	// HeaderDelivery carries the delivery ID on callback POSTs (Send): the receiver's idempotency
	// key.
	HeaderDelivery = "X-Channels-Delivery"
)

// Sign returns the X-Channels-Signature value of body sent at ts.
func Sign(secret []byte, ts time.Time, body []byte) string {
	return "sha256=" + hex.EncodeToString(mac(secret, strconv.FormatInt(ts.Unix(), 10), body))
}

// SignCallback returns the X-Channels-Signature value of a callback body Channels sends at ts: the
// MAC covers "callback." before the timestamp, which no intake signature does.
func SignCallback(secret []byte, ts time.Time, body []byte) string {
	return "sha256=" + hex.EncodeToString(mac(secret, "callback."+strconv.FormatInt(ts.Unix(), 10), body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}

// verify checks the timestamp window and the signature in constant time. It returns the evidence
// reason and the message for the sender, or "" when the request is authentic.
func (s *Source) verify(h http.Header, body []byte) (reason, msg string) {
	tsRaw, sigRaw := h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if tsRaw == "" || sigRaw == "" {
		return "unsigned", "missing " + HeaderTimestamp + " or " + HeaderSignature
	}
	sec, err := strconv.ParseInt(tsRaw, 10, 64)
	if err != nil {
		return "bad-timestamp", HeaderTimestamp + " is not unix seconds"
	}
	if d := s.now().Sub(time.Unix(sec, 0)).Abs(); d > s.opt.window {
		return "stale-timestamp", fmt.Sprintf("timestamp is %s away from now; the window is %s", d.Round(time.Second), s.opt.window)
	}
	got, err := hex.DecodeString(strings.TrimPrefix(sigRaw, "sha256="))
	if err != nil || !strings.HasPrefix(sigRaw, "sha256=") || !hmac.Equal(got, mac(s.opt.secret, tsRaw, body)) {
		return "bad-signature", "signature does not match"
	}
	return "", ""
}
