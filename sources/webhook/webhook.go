// Package webhook is the signed-webhook source: any system that can POST HMAC-SHA256 signed JSON to
// /sources/webhook/{name} feeds Channels. It is the example of docs/writing-a-source.md.
package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/channels-dev/channels/internal/exactjson"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
)

// Name is the registered source name and matrix row.
const Name = "webhook"

func init() { sources.Register(Name, New) }

// Source is one configured webhook endpoint. sink is set while Run runs.
type Source struct {
	instance, principal string
	opt                 Options
	now                 func() time.Time
	sink                atomic.Pointer[sources.Sink]
}

// Key is a digest of the instance's signing secret (sources.Keyed): two instances of one server
// must not share it, or a request signed for one would be taken by the other.
func (s *Source) Key() [32]byte {
	return sha256.Sum256(append([]byte("channels webhook signing secret\x00"), s.opt.secret...))
}

// New builds a webhook source from its configuration (see Options).
func New(cfg sources.Config) (sources.Source, error) {
	s := &Source{instance: cfg.Instance, principal: cfg.Principal, now: time.Now}
	if err := cfg.Decode(&s.opt); err != nil {
		return nil, err
	}
	return s, s.opt.resolve()
}

// Name implements sources.Source.
func (s *Source) Name() string { return Name }

// Pattern implements sources.Endpoint: where the server mounts the source.
func (s *Source) Pattern() string { return "POST /sources/webhook/" + s.instance }

// Run implements sources.Source: the endpoint accepts requests until ctx ends.
func (s *Source) Run(ctx context.Context, sink *sources.Sink) error {
	s.sink.Store(sink)
	<-ctx.Done()
	s.sink.Store(nil)
	return nil
}

// Health implements sources.HealthChecker: healthy while Run runs.
func (s *Source) Health(context.Context) error {
	if s.sink.Load() == nil {
		return errors.New("webhook " + s.instance + " is not running")
	}
	return nil
}

// ServeHTTP verifies, classifies and accepts one POST. It answers 2xx only after the event is
// durably accepted (or counted as non-work); 5xx when acceptance failed, so the sender retries;
// 4xx, with evidence and nothing accepted, for requests that retrying cannot fix.
func (s *Source) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sink, ctx := s.sink.Load(), r.Context()
	if sink == nil {
		http.Error(w, "webhook source is not running; retry", http.StatusServiceUnavailable)
		return
	}
	// What the headers can refuse is refused before the body is read: a sender without the
	// secret cannot make this source read up to MaxBody.
	refuse := func(reason, msg string) {
		sink.Rejected(ctx, s.principal, reason)
		http.Error(w, msg, http.StatusUnauthorized)
	}
	sig, reason, msg := s.signed(r.Header)
	if reason != "" {
		refuse(reason, msg)
		return
	}
	body, ok := sink.ReadBody(w, r, s.principal, s.opt.MaxBody)
	if !ok {
		return
	}
	if reason, msg := s.authentic(sig, body); reason != "" {
		refuse(reason, msg)
		return
	}
	ev, nonWork, problem := s.event(body)
	actx, cancel := sources.AcceptContext(r) // not abandoned when the sender hangs up
	defer cancel()
	switch {
	case problem != "":
		if err := sink.Malformed(actx, s.principal, problem, nil, nil); err != nil {
			http.Error(w, "could not record the malformed body; retry", http.StatusServiceUnavailable)
			return
		}
		http.Error(w, "malformed body: "+problem, http.StatusBadRequest)
	case nonWork != "":
		_ = sink.NonWork(actx, s.principal, nonWork, nil) // counted; cannot fail without a position
		reply(w, http.StatusOK, map[string]string{"status": "ignored", "reason": nonWork})
	default:
		acc, err := sink.Accept(actx, ev)
		switch {
		case errors.Is(err, taskplane.ErrDuplicateConflict):
			http.Error(w, "this event id was already accepted with a different body", http.StatusConflict)
		case sources.Permanent(err):
			http.Error(w, "invalid event: "+err.Error(), http.StatusBadRequest)
		case err != nil:
			w.Header().Set("Retry-After", "5")
			http.Error(w, "not accepted; retry", http.StatusServiceUnavailable)
		default:
			out := map[string]string{"status": "accepted", "outcome": string(acc.Outcome), "contextId": acc.ContextID}
			if acc.Task != nil {
				out["taskId"] = acc.Task.ID
			}
			reply(w, http.StatusOK, out)
		}
	}
}

// event reads the body as an event: it returns the event, or a non-work reason, or the problem
// that makes it malformed.
func (s *Source) event(body []byte) (ev sources.Event, nonWork, problem string) {
	doc, err := parseJSON(body)
	if err != nil {
		return ev, "", "invalid JSON"
	}
	if !exactjson.ValidUnicode(body) {
		// encoding/json reads bytes that are not UTF-8 and lone surrogate escapes all as U+FFFD:
		// two different event ids ("caf\xe9", "caf\xe8") would be taken for one event.
		return ev, "", "not valid Unicode (bytes that are not UTF-8, or a lone surrogate escape)"
	}
	for path, values := range s.opt.NonWork {
		if v, ok := lookup(doc, path); ok && contains(values, v) {
			return ev, path + "=" + v, ""
		}
	}
	id, ok := lookup(doc, s.opt.Identity)
	if !ok || id == "" {
		return ev, "", "no identity at " + s.opt.Identity
	}
	conv := make([]string, len(s.opt.Conversation))
	for i, p := range s.opt.Conversation {
		if conv[i], ok = lookup(doc, p); !ok {
			return ev, "", "no conversation at " + p
		}
	}
	text, ok := lookup(doc, s.opt.Text)
	if !ok || text == "" {
		return ev, "", "no text at " + s.opt.Text
	}
	key, _ := json.Marshal(conv) // a JSON array: ["a/b","c"] and ["a","b/c"] stay apart
	loc, _ := json.Marshal(map[string]any{"instance": s.instance, "id": id, "conversation": conv})
	ev = sources.Event{Principal: s.principal, Identity: s.instance + ":" + id, Locator: loc,
		ConversationKey: s.instance + ":" + string(key),
		Message:         taskplane.Message{ID: s.instance + ":" + id, Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart(text)}}}
	if replyTo, ok := lookup(doc, s.opt.ReplyTo); ok && replyTo != "" && !strings.ContainsRune(replyTo, 0) &&
		len(replyTo) <= taskplane.MaxIdentityLen {
		// The same namespace Send gives receipts. A reply-to no receipt can have (a NUL, or
		// longer than any id kept) is left out: the event is new work, never refused for it.
		ev.ReplyTo = s.anchorID(replyTo)
	}
	return ev, "", ""
}
