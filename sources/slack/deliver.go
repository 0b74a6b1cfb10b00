package slack

import (
	"errors"
	"net"
	"net/http"

	"github.com/slack-go/slack"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/sources"
)

// Route returns this instance's route for the delivery engine: the instance itself as Sender,
// Reconciler and Laner, with the recovery class of the source's matrix row (lookup).
//
//	eng := delivery.New(st, delivery.Routes{slack.Name: src.(interface{ Route() delivery.Route }).Route()},
//		delivery.WithAnchorRecorder(sources.RecordAnchorTx))
func (s *Source) Route() delivery.Route {
	rec := delivery.Lookup
	if row, err := sources.Declaration(Name); err == nil {
		rec = delivery.Recovery(row.DeliveryRecovery)
	}
	return delivery.Route{Sender: s, Recovery: rec}
}

// Lane implements sources.Laner: one rate lane per workspace channel (Slack allows about one
// message per second per channel; the engine's default Slack lane interval).
func (s *Source) Lane(d sources.Delivery) string {
	loc, err := decodeLocator(d.Locator)
	if err != nil {
		return ""
	}
	return loc.Team + ":" + loc.Channel
}

// classify turns a Web API error into the delivery engine's typed result. An error response
// (ok: false) means Slack did not act: permanent for the codes retrying cannot fix, retryable
// for a passing outage; internal_error and fatal_error may have acted and stay indeterminate, as
// does anything that went wrong after the request was written (a timeout, a reset).
// readFailure classifies the failure of a read a delivery makes before it posts: a rate limit
// waits as long as Slack asks, without spending an attempt; an error response no retry can fix
// is permanent; anything else is retried (a read changed nothing in Slack).
func readFailure(err error) error {
	_, limited := errors.AsType[*slack.RateLimitedError](err)
	_, refused := errors.AsType[slack.SlackErrorResponse](err)
	// An error response classify calls permanent (channel_not_found, not_in_channel, …) fails
	// the delivery at once, as it would a post.
	c := classify(err)
	if kind, _, _ := delivery.Classify(c); limited || (refused && kind == delivery.KindPermanent) {
		return c
	}
	return delivery.Retryable(err)
}

func classify(err error) error {
	if err == nil {
		return nil
	}
	if rl, ok := errors.AsType[*slack.RateLimitedError](err); ok {
		return delivery.WithStatus(delivery.RetryAfter(rl.RetryAfter, err), "429")
	}
	if se, ok := errors.AsType[slack.SlackErrorResponse](err); ok {
		switch se.Err {
		case "internal_error", "fatal_error":
			return delivery.WithStatus(delivery.Indeterminate(err), se.Err)
		case "service_unavailable", "ratelimited", "team_added_to_org":
			return delivery.WithStatus(delivery.Retryable(err), se.Err)
		}
		return delivery.WithStatus(delivery.Permanent(err), se.Err)
	}
	if sc, ok := errors.AsType[slack.StatusCodeError](err); ok {
		switch {
		case sc.Code == http.StatusTooManyRequests:
			// Without a usable Retry-After: back off as for any passing refusal, spending
			// attempts, rather than snooze for a guessed second and use up the bounded snoozes
			// in about a minute.
			return delivery.WithStatus(delivery.Retryable(err), "429")
		case sc.Code >= 500: // a bare 503 too: an edge's answer does not prove Slack did not act
			return delivery.WithStatus(delivery.Indeterminate(err), sc.Status)
		}
		return delivery.WithStatus(delivery.Permanent(err), sc.Status)
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return delivery.Retryable(err) // nothing reached Slack
	}
	return err // indeterminate: Slack may have acted
}
