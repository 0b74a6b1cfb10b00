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

// signature is what a request's headers claim: when it was signed, and the MAC.
type signature struct {
	ts  string
	mac []byte
}

// signed checks what the headers alone can show: both are there, the timestamp is within the
// window, the signature is well formed. A request they refuse is answered without reading its
// body. It returns the evidence reason and the message for the sender, or the signature for
// authentic.
func (s *Source) signed(h http.Header) (sig signature, reason, msg string) {
	tsRaw, sigRaw := h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if tsRaw == "" || sigRaw == "" {
		return sig, "unsigned", "missing " + HeaderTimestamp + " or " + HeaderSignature
	}
	sec, err := strconv.ParseInt(tsRaw, 10, 64)
	if err != nil {
		return sig, "bad-timestamp", HeaderTimestamp + " is not unix seconds"
	}
	if d := s.now().Sub(time.Unix(sec, 0)).Abs(); d > s.opt.window {
		return sig, "stale-timestamp", fmt.Sprintf("timestamp is %s away from now; the window is %s", d.Round(time.Second), s.opt.window)
	}
	got, err := hex.DecodeString(strings.TrimPrefix(sigRaw, "sha256="))
	if err != nil || !strings.HasPrefix(sigRaw, "sha256=") {
		return sig, "bad-signature", "signature does not match" // as authentic says of a wrong MAC
	}
	return signature{ts: tsRaw, mac: got}, "", ""
}

// authentic checks that sig is the MAC of body, compared in constant time. It returns the
// evidence reason and the message for the sender, or "" when the request is authentic.
func (s *Source) authentic(sig signature, body []byte) (reason, msg string) {
	if !hmac.Equal(sig.mac, mac(s.opt.secret, sig.ts, body)) {
		return "bad-signature", "signature does not match"
	}
	return "", ""
}
