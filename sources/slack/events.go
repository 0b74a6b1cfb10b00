package slack

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/channels-dev/channels/sources"
)

// EventsSource is a Slack instance in Events API mode: Slack POSTs events to
// /sources/slack/events and interactive payloads to /sources/slack/interactive (for an instance
// named other than "default": /sources/slack/{instance}/…).
type EventsSource struct{ *Source }

// Pattern implements sources.Endpoint.
func (s *EventsSource) Pattern() string { return "POST " + s.basePath() + "{endpoint}" }

func (s *EventsSource) basePath() string {
	if s.instance == "" || s.instance == "default" {
		return "/sources/slack/"
	}
	return "/sources/slack/" + s.instance + "/"
}

// Run implements sources.Source: it learns the bot's identity, then the endpoint accepts
// requests until ctx ends. The instance is among its app's running instances from the start, so
// while it learns who it is the other instances leave the envelopes that may be its installation's
// unacknowledged (see routeForeign).
func (s *EventsSource) Run(ctx context.Context, sink *sources.Sink) error {
	defer s.setProblem("not running")
	s.sink.Store(sink)
	defer s.sink.Store(nil)
	defer s.joinApp()()
	if err := s.identify(ctx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	s.setProblem("")
	<-ctx.Done()
	return nil
}

// ServeHTTP verifies, classifies and accepts one request from Slack. It answers 2xx only after
// the envelope is durably accepted, counted as non-work, or recorded as malformed; 5xx when that
// failed, so Slack retries (and the retry is deduplicated on team and event_id); 401 with
// evidence for a request that is not Slack's.
func (s *EventsSource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	endpoint := r.PathValue("endpoint")
	if endpoint != "events" && endpoint != "interactive" {
		http.NotFound(w, r)
		return
	}
	sink, ctx := s.sink.Load(), r.Context()
	if sink == nil || s.bot.Load() == nil {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "slack source is not running; retry", http.StatusServiceUnavailable)
		return
	}
	// What the headers can refuse is refused before the body is read: a sender without the
	// signing secret cannot make this source read up to MaxBody.
	refuse := func(reason string) {
		sink.Rejected(ctx, s.principal, reason)
		http.Error(w, "request not signed by Slack: "+reason, http.StatusUnauthorized)
	}
	sv, reason := s.signed(r.Header)
	if reason != "" {
		refuse(reason)
		return
	}
	body, ok := sink.ReadBody(w, r, s.principal, s.opt.MaxBody)
	if !ok {
		return
	}
	if reason := authentic(sv, body); reason != "" {
		refuse(reason)
		return
	}
	var (
		v        verdict
		payload  = body
		classify = (*Source).classifyCallback
	)
	if endpoint == "events" {
		var outer struct {
			Type      string `json:"type"`
			Challenge string `json:"challenge"`
		}
		if json.Unmarshal(body, &outer) == nil && outer.Type == slackevents.URLVerification {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{"challenge": outer.Challenge})
			return
		}
		v = s.classifyCallback(body)
		if n := r.Header.Get("X-Slack-Retry-Num"); n != "" {
			s.log.Debug("slack retry", "num", n, "reason", r.Header.Get("X-Slack-Retry-Reason"), "verdict", v.String())
		}
	} else {
		form, err := url.ParseQuery(string(body))
		if err != nil || form.Get("payload") == "" {
			v = malformed("interactive request without a payload", nil)
		} else {
			payload, classify = []byte(form.Get("payload")), (*Source).classifyInteraction
			v = classify(s.Source, payload)
		}
	}
	actx, cancel := sources.AcceptContext(r) // not abandoned when Slack hangs up at 3 s
	defer cancel()
	if !s.settleEnvelope(actx, sink, v, payload, classify) {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "not accepted; retry", http.StatusServiceUnavailable)
		return
	}
	// An empty 200 also closes the answer dialog of a view_submission.
	w.WriteHeader(http.StatusOK)
}

// signed checks what Slack's signature headers alone can show: both are there and the timestamp
// is within the 5-minute window. It returns the evidence reason, or "" and the verifier that
// authentic completes with the body.
func (s *EventsSource) signed(h http.Header) (slack.SecretsVerifier, string) {
	sv, err := slack.NewSecretsVerifier(h, s.opt.signingSecret)
	switch {
	case errors.Is(err, slack.ErrMissingHeaders):
		return sv, "unsigned"
	case errors.Is(err, slack.ErrExpiredTimestamp):
		return sv, "stale-timestamp"
	case errors.As(err, new(*strconv.NumError)):
		return sv, "bad-timestamp"
	case err != nil:
		return sv, "bad-signature"
	}
	return sv, ""
}

// authentic checks Slack's v0 signature over body (in constant time, by the verifier). It returns
// the evidence reason, or "" when the request is Slack's.
func authentic(sv slack.SecretsVerifier, body []byte) string {
	if _, err := sv.Write(body); err != nil {
		return "bad-signature"
	}
	if sv.Ensure() != nil {
		return "bad-signature"
	}
	return ""
}
