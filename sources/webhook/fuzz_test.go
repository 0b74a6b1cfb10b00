package webhook

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fuzzSource is the "ci" endpoint of the webhook tests, with a fixed clock.
func fuzzSource(tb testing.TB, now time.Time) *Source {
	tb.Helper()
	s := &Source{instance: "ci", principal: "alice", now: func() time.Time { return now },
		opt: Options{Secret: "test-secret-0123456789", Identity: "event.id", Conversation: []string{"repo", "thread"},
			Text: "event.text", ReplyTo: "in_reply_to", NonWork: map[string][]string{"event.type": {"ping"}}}}
	if err := s.opt.resolve(); err != nil {
		tb.Fatal(err)
	}
	return s
}

// verify is both of ServeHTTP's checks, in its order: the headers, then the MAC over the body.
func (s *Source) verify(h http.Header, body []byte) (reason, msg string) {
	sig, reason, msg := s.signed(h)
	if reason != "" {
		return reason, msg
	}
	return s.authentic(sig, body)
}

// FuzzWebhookVerify feeds arbitrary timestamps, signatures and bodies to the signature check. A
// request signed with the secret over its timestamp and body inside the window is accepted; the
// same signature over any other body, or a callback's signature, is refused; and whatever is
// accepted carries exactly the MAC of its own timestamp and body, inside the window.
func FuzzWebhookVerify(f *testing.F) {
	now := time.Unix(1_760_000_000, 0)
	good := []byte(`{"event": {"id": "e1", "text": "hi"}, "repo": "r", "thread": "t"}`)
	f.Add(good, "1760000000", Sign([]byte("test-secret-0123456789"), now, good), int64(0))
	f.Add(good, "1760000000", "sha256=00", int64(-600))
	f.Add([]byte(`{"event": `), "+1760000000", "sha256=", int64(600))
	f.Add([]byte{}, "", "", int64(1))
	f.Add([]byte("x"), "01760000000", "SHA256=AB", int64(299))
	s := fuzzSource(f, now)
	f.Fuzz(func(t *testing.T, body []byte, tsRaw, sig string, offset int64) {
		h := http.Header{}
		h.Set(HeaderTimestamp, tsRaw)
		h.Set(HeaderSignature, sig)
		reason, msg := s.verify(h, body)
		if reason != "" {
			if msg == "" {
				t.Fatalf("refusal %q without a message", reason)
			}
			switch reason {
			case "unsigned", "bad-timestamp", "stale-timestamp", "bad-signature":
			default:
				t.Fatalf("unknown refusal reason %q", reason)
			}
		} else {
			// Accepted: the header values as the server reads them carry the MAC of the body.
			ts, sg := h.Get(HeaderTimestamp), h.Get(HeaderSignature)
			sec, err := strconv.ParseInt(ts, 10, 64)
			if err != nil || now.Sub(time.Unix(sec, 0)).Abs() > DefaultWindow {
				t.Fatalf("accepted timestamp %q outside the window", ts)
			}
			want := "sha256=" + strings.ToLower(strings.TrimPrefix(sg, "sha256="))
			if want != "sha256="+hex.EncodeToString(mac(s.opt.secret, ts, body)) {
				t.Fatalf("accepted signature %q is not the MAC of timestamp %q and body %q", sg, ts, body)
			}
		}

		// A correctly signed request at now+offset is accepted exactly when inside the window.
		at := now.Add(time.Duration(offset%3600) * time.Second)
		h.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
		h.Set(HeaderSignature, Sign(s.opt.secret, at, body))
		inside := now.Sub(at).Abs() <= DefaultWindow
		if reason, _ := s.verify(h, body); (reason == "") != inside {
			t.Fatalf("signed at %v (inside the window: %v): reason %q", at, inside, reason)
		}
		if !inside {
			return
		}
		// Any change to the body, or a callback's signature, is refused.
		for _, tampered := range [][]byte{append(bytes.Clone(body), ' '), flipLast(body), body[:len(body)/2]} {
			if bytes.Equal(tampered, body) {
				continue
			}
			if reason, _ := s.verify(h, tampered); reason != "bad-signature" {
				t.Fatalf("tampered body %q accepted with the signature of %q (reason %q)", tampered, body, reason)
			}
		}
		h.Set(HeaderSignature, SignCallback(s.opt.secret, at, body))
		if reason, _ := s.verify(h, body); reason != "bad-signature" {
			t.Fatalf("a callback signature passed for an event (reason %q)", reason)
		}
	})
}

func flipLast(b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	out := bytes.Clone(b)
	out[len(out)-1] ^= 1
	return out
}

// FuzzWebhookEvent feeds arbitrary bodies to the reading of a verified body as an event. It never
// panics; a body that is not one JSON value is malformed; an event carries the values at the
// configured paths, namespaced by the instance, with a locator and conversation key that decode
// back to them.
func FuzzWebhookEvent(f *testing.F) {
	for _, s := range []string{
		`{"event": {"id": "e1", "text": "hi"}, "repo": "r", "thread": "t"}`,
		`{"event": {"id": 12345678901234567890, "text": "hi", "type": "push"}, "repo": "acme/app", "thread": 7, "in_reply_to": "r1"}`,
		`{"event": {"id": "e1", "text": "hi", "type": "ping"}, "repo": "r", "thread": "t"}`,
		`{"event": {"text": "hi"}, "repo": "r", "thread": "t"}`,
		`{"event": {"id": "e2", "text": {"x": 1}}, "repo": "r", "thread": "t"}`,
		`{"event": {"id": true, "text": "hi"}, "repo": ["a"], "thread": null}`,
		`{"event": `,
		`{"a":1} {"b":2}`,
		`[1,2,3]`,
	} {
		f.Add([]byte(s))
	}
	s := fuzzSource(f, time.Unix(0, 0))
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := parseJSON(body); (err == nil) != json.Valid(body) {
			t.Fatalf("parseJSON(%q): error %v, json.Valid says %v", body, err, json.Valid(body))
		}
		ev, nonWork, problem := s.event(body)
		outcomes := 0
		for _, set := range []bool{problem != "", nonWork != "", ev.Identity != ""} {
			if set {
				outcomes++
			}
		}
		if outcomes != 1 {
			t.Fatalf("event(%q): %d outcomes (event %q, non-work %q, problem %q)", body, outcomes, ev.Identity, nonWork, problem)
		}
		if problem == "" && !json.Valid(body) {
			t.Fatalf("event(%q) read a body that is not JSON (non-work %q, event %q)", body, nonWork, ev.Identity)
		}
		if ev.Identity == "" {
			return
		}
		doc, err := parseJSON(body)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := lookup(doc, "event.id")
		text, _ := lookup(doc, "event.text")
		if id == "" || text == "" || ev.Identity != "ci:"+id || ev.Message.ID != ev.Identity {
			t.Fatalf("event %q, message %q for id %q", ev.Identity, ev.Message.ID, id)
		}
		if len(ev.Message.Parts) != 1 || ev.Message.Parts[0].Text != text {
			t.Fatalf("message parts %+v, want the text %q", ev.Message.Parts, text)
		}
		var conv []string
		key, ok := strings.CutPrefix(ev.ConversationKey, "ci:")
		if !ok || json.Unmarshal([]byte(key), &conv) != nil || len(conv) != 2 {
			t.Fatalf("conversation key %q does not decode to the two paths' values", ev.ConversationKey)
		}
		for i, p := range []string{"repo", "thread"} {
			if v, _ := lookup(doc, p); v != conv[i] {
				t.Fatalf("conversation value %d is %q, the body holds %q", i, conv[i], v)
			}
		}
		var loc struct {
			Instance, ID string
			Conversation []string
		}
		if err := json.Unmarshal(ev.Locator, &loc); err != nil || loc.Instance != "ci" || loc.ID != id || len(loc.Conversation) != 2 {
			t.Fatalf("locator %s does not decode to the event (%v)", ev.Locator, err)
		}
		if r, ok := lookup(doc, "in_reply_to"); ok && r != "" && ev.ReplyTo != "ci:"+r {
			t.Fatalf("reply-to %q for in_reply_to %q", ev.ReplyTo, r)
		}
	})
}

// FuzzWebhookReceiptID feeds arbitrary callback answers to the reading of their id. A short
// answer is JSON exactly when it is one JSON value; an answer cut at the bound yields the id it
// starts with.
func FuzzWebhookReceiptID(f *testing.F) {
	for _, s := range []string{`{"id": 1042}`, `{"id": "42", "echo": "x"}`, `{"meta": {"id": "no"}, "id": 42}`, `{"id": "x"}`,
		`{}`, `[]`, `"s"`, `not json`, `{"id": {"a": 1}}`, `{"id": 1e400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		id, isJSON := receiptID(raw)
		if len(raw) > maxReceipt {
			return
		}
		if isJSON != json.Valid(raw) {
			t.Fatalf("receiptID(%q): JSON %v, json.Valid says %v", raw, isJSON, json.Valid(raw))
		}
		if !isJSON {
			return
		}
		// An answer longer than the bound, with the same members first, yields the same id.
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil || len(m) == 0 || bytes.Count(raw, []byte(`"id"`)) > 1 {
			return // not an object, or one whose members could repeat an id (the first wins on a stream, the last in a map)
		}
		trimmed := bytes.TrimRight(bytes.TrimSpace(raw), "}")
		big := append(append(bytes.Clone(trimmed), `, "pad": "`...), bytes.Repeat([]byte("x"), maxReceipt)...)
		big = append(big, `"}`...)
		if !json.Valid(big) {
			return
		}
		if id2, ok := receiptID(big); !ok || id2 != id {
			t.Fatalf("cut answer: id %q (JSON %v), the whole answer says %q", id2, ok, id)
		}
	})
}

// A body with a closing bracket or brace after its JSON value is not one JSON value: it is
// malformed, not read as the value before it. (The decoder's More reports false at a closing
// delimiter, which the check for trailing data took for the end of the body.)
func TestWebhookBodyWithAStrayClosingBracketIsMalformed(t *testing.T) {
	s := fuzzSource(t, time.Unix(0, 0))
	for _, body := range []string{
		`{"event": {"id": "e1", "text": "hi"}, "repo": "r", "thread": "t"}]`,
		`{"event": {"id": "e1", "text": "hi"}, "repo": "r", "thread": "t"} }`,
		`""}`,
	} {
		if ev, nonWork, problem := s.event([]byte(body)); problem != "invalid JSON" {
			t.Errorf("event(%s) = event %q, non-work %q, problem %q; want invalid JSON", body, ev.Identity, nonWork, problem)
		}
	}
	if id, isJSON := receiptID([]byte(`{"id": "42"}]`)); isJSON {
		t.Errorf("receiptID of an answer with a stray bracket = %q, JSON; want not JSON", id)
	}
}
