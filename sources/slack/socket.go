package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/channels-dev/channels/sources"
)

// maxInFlight bounds the envelopes handled at once; past it the websocket reader waits, and
// Slack holds (and later redelivers) what it could not hand over.
const maxInFlight = 32

// SocketSource is a Slack instance in Socket Mode: it opens a websocket with the app-level
// token (apps.connections.open), acknowledges each envelope only after acceptance, and
// reconnects when Slack asks it to (disconnect) or the connection dies.
type SocketSource struct {
	*Source
	// settled, when set (tests), is told after each envelope is handled whether it was acked.
	settled func(envelopeID string, acked bool)
}

// Run implements sources.Source: it learns the bot's identity, then receives envelopes until ctx
// ends. It returns an error only when Slack refuses the tokens. The instance is among its app's
// running instances from the start, so while it learns who it is the other instances leave the
// envelopes that may be its installation's unacknowledged (see routeForeign).
func (s *SocketSource) Run(ctx context.Context, sink *sources.Sink) error {
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
	s.setProblem("connecting")

	smc := socketmode.New(s.api, socketmode.OptionLog(slogOutput{s.log}))
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	clientDone := make(chan error, 1)
	go func() { clientDone <- s.runClient(runCtx, smc) }()

	var wg sync.WaitGroup
	sem := make(chan struct{}, maxInFlight)
	stop := func(err error) error {
		cancel()
		wg.Wait()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	for {
		select {
		case <-ctx.Done():
			<-clientDone
			return stop(nil)
		case err := <-clientDone:
			return stop(err)
		case evt := <-smc.Events:
			req := s.observe(evt)
			if req == nil || req.EnvelopeID == "" {
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				continue
			case err := <-clientDone:
				// Every handler is busy (their acks wait on a client that has stopped for good):
				// stopping cancels the client's context, which ends those acks.
				return stop(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				s.handle(ctx, runCtx, smc, sink, req)
			}()
		}
	}
}

// observe follows the client's lifecycle events for Health and returns the request of an
// envelope to handle, if evt carries one.
func (s *SocketSource) observe(evt socketmode.Event) *socketmode.Request {
	switch evt.Type {
	case socketmode.EventTypeConnecting:
		s.setProblem("connecting")
	case socketmode.EventTypeConnectionError:
		s.setProblem(fmt.Sprintf("connection failed: %v", evt.Data))
	case socketmode.EventTypeInvalidAuth:
		s.setProblem("the app token was refused")
	case socketmode.EventTypeConnected:
		s.setProblem("connected; waiting for hello")
	case socketmode.EventTypeHello:
		s.setProblem("")
	case socketmode.EventTypeErrorWriteFailed:
		// A lost ack: Slack redelivers the envelope and the redelivery is deduplicated.
		// Only the cause: the failed write may carry an envelope's payload, and bodies are not logged.
		if wf, ok := evt.Data.(*socketmode.ErrorWriteFailed); ok {
			s.log.Warn("slack socket mode write failed", "err", wf.Cause)
		} else {
			s.log.Warn("slack socket mode write failed")
		}
	case socketmode.EventTypeIncomingError:
		s.log.Debug("slack socket mode read error", "data", fmt.Sprint(evt.Data))
	case socketmode.EventTypeEventsAPI, socketmode.EventTypeInteractive, socketmode.EventTypeSlashCommand:
		return evt.Request
	case socketmode.EventTypeErrorBadMessage:
		// The library could not parse the envelope (an inner event type it does not know, or a
		// broken payload). If it has an envelope id it is Slack's, and is classified from the
		// raw payload like any other: counted, or recorded as malformed, then acked.
		if bad, ok := evt.Data.(*socketmode.ErrorBadMessage); ok {
			var req socketmode.Request
			if json.Unmarshal(bad.Message, &req) == nil && req.EnvelopeID != "" {
				return &req
			}
			s.log.Warn("slack socket mode message without an envelope id", "err", bad.Cause)
		}
	}
	return nil
}

// ackTimeout bounds how long an ack waits to be queued for the connection. Slack wants an ack
// within 3 s and redelivers an envelope without one; an ack that cannot be queued by then (the
// connection is gone, its queue full) is given up, so a handler never holds its slot — and the
// loop feeding the client's events — behind a client that stopped.
const ackTimeout = 3 * time.Second

// handle classifies one envelope, settles it with the sink, and acks it only if it settled. The
// ack waits on clientCtx, for at most ackTimeout: the library queues acks for its live connection
// only, so once the client has stopped an ack could wait forever (the envelope is redelivered
// instead).
func (s *SocketSource) handle(ctx, clientCtx context.Context, smc *socketmode.Client, sink *sources.Sink, req *socketmode.Request) {
	v, classify := s.classifyEnvelope(req)
	acked := s.settleEnvelope(ctx, sink, v, req.Payload, classify)
	if acked {
		actx, cancel := context.WithTimeout(clientCtx, ackTimeout)
		err := smc.AckCtx(actx, req.EnvelopeID, nil)
		cancel()
		if err != nil {
			s.log.Warn("slack socket mode ack", "envelope", req.EnvelopeID, "err", err)
		}
	}
	if s.settled != nil {
		s.settled(req.EnvelopeID, acked)
	}
}

// classifyEnvelope classifies a Socket Mode envelope by its type and payload. classify is how
// its payload was read (nil for an envelope whose payload is not read).
func (s *Source) classifyEnvelope(req *socketmode.Request) (v verdict, classify func(*Source, []byte) verdict) {
	switch req.Type {
	case socketmode.RequestTypeEventsAPI:
		classify = (*Source).classifyCallback
	case socketmode.RequestTypeInteractive:
		classify = (*Source).classifyInteraction
	case socketmode.RequestTypeSlashCommands:
		return nonWork("slash-command"), nil
	default:
		return nonWork("envelope:" + req.Type), nil
	}
	return classify(s, req.Payload), classify
}

// runClient runs the socket mode client until ctx ends. The client reconnects by itself on a
// disconnect request or a dead connection; when it gives up (a refused connection attempt) it is
// started again after a pause, unless Slack refused the token.
func (s *SocketSource) runClient(ctx context.Context, smc *socketmode.Client) error {
	wait := time.Second
	for {
		err := smc.RunContext(ctx)
		if ctx.Err() != nil {
			return nil
		}
		// The client returns the token refusals of apps.connections.open as bare codes.
		if se, ok := errors.AsType[slack.SlackErrorResponse](err); ok && fatalAuth(se.Err) || fatalAuth(err.Error()) {
			s.setProblem("the app token was refused")
			return fmt.Errorf("slack %s: socket mode: %w", s.instance, err)
		}
		s.setProblem(fmt.Sprintf("socket mode stopped: %v", err))
		s.log.Warn("slack socket mode stopped; restarting", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Minute)
	}
}

// slogOutput lets the socket mode client log through slog, at debug level.
type slogOutput struct{ l *slog.Logger }

func (o slogOutput) Output(_ int, msg string) error {
	o.l.Debug(msg)
	return nil
}
