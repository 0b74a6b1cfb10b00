// Package slack is the Slack source: a Slack app's mentions, direct messages and thread replies
// become Tasks, and the agent's answers, questions and "handled" markers go back into the thread.
//
// Intake runs in one of two modes. In Socket Mode (an app-level token) the source holds a
// websocket to Slack and acknowledges each envelope only after its event is durably accepted, so
// Slack redelivers whatever was not. In Events API mode Slack POSTs to
// /sources/slack/events and /sources/slack/interactive; each request is verified with the signing
// secret (5-minute window) and answered 2xx only after acceptance, so a store failure is a 5xx
// and Slack retries. Either way the event identity is (team_id, event_id), and a retry returns
// the prior Task.
//
// A thread is a conversation (workspace + channel + thread root), not a reply relation: a plain
// thread reply is a new Task in the same context. The per-message reply relation Slack does have
// is the interactive message: a question is posted with an "Answer" button (and choice buttons
// for an enum requestedSchema), and the block_actions / view_submission payload names the exact
// message it answers — a verified reply anchor that continues the waiting Task.
//
// Answers are chat.postMessage calls in the thread carrying message metadata with the delivery
// ID; after a crash, Lookup pages conversations.replies for that metadata instead of posting
// twice. docs/sources/slack.md has the app manifest and the configuration keys.
package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/slack-go/slack"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/sources"
)

// Name is the registered source name and matrix row.
const Name = "slack"

func init() { sources.Register(Name, New) }

// Source is the part of a configured Slack instance both modes share: the Web API client, the
// bot's identity, classification, and the Sender and Reconciler. New returns it wrapped as an
// *EventsSource or a *SocketSource.
type Source struct {
	instance, principal string
	opt                 Options
	api                 *slack.Client
	log                 *slog.Logger
	now                 func() time.Time

	sink    atomic.Pointer[sources.Sink]
	bot     atomic.Pointer[botIdentity]
	problem atomic.Pointer[string] // why the source is not healthy; nil when it is
	scans   scanProgress           // how far rate-limited thread scans got, by delivery
}

// botIdentity is who the app is in the workspace (auth.test): how our own messages are told.
type botIdentity struct {
	Team       string
	Enterprise string // Enterprise Grid organisation, when auth.test names one
	UserID     string
	BotID      string
}

// identityOf reads the bot's identity from auth.test.
func identityOf(r *slack.AuthTestResponse) *botIdentity {
	return &botIdentity{Team: r.TeamID, Enterprise: r.EnterpriseID, UserID: r.UserID, BotID: r.BotID}
}

// ours reports whether an event of workspace team, delivered for the installations in auths, is
// meant for this bot's installation. One Slack app has one Events request URL and spreads Socket
// Mode envelopes over all its connections, so an app installed in several workspaces hands every
// instance the others' events too; they are not this instance's principal's work. An event is
// ours when it was delivered for the bot's installation: the workspace's, or an
// organisation-wide one of the bot's Enterprise Grid organisation (a workspace-level
// installation elsewhere in the organisation is another installation). The installation is the
// one auths names (Slack sends one authorization, the installation the event was delivered for;
// Bolt dispatches by it). team is not: in a shared channel it is the workspace that created the
// channel, whichever installation the event was delivered for, so an event delivered for another
// installation in a channel our workspace created is not ours, and an event of our installation
// in a channel another workspace created is. Only an event without authorizations is decided by
// team. Before auth.test has named the workspace, everything is ours.
func (b *botIdentity) ours(team string, auths []slack.EventAuthorization) bool {
	if b.Team == "" {
		return true
	}
	if len(auths) == 0 {
		return team == b.Team
	}
	for _, a := range auths {
		if a.TeamID == b.Team || (a.IsEnterpriseInstall && b.Enterprise != "" && a.EnterpriseID == b.Enterprise) {
			return true
		}
	}
	return false
}

// postedByUs reports whether the message an interaction acts on (its bot_id and user) was posted
// by this bot: each installation of the app has its own bot user, and one app has one
// interactivity URL. A payload that names neither is decided by the installation it names (team,
// or an organisation-wide installation of the bot's organisation); a bot not yet identified
// cannot tell.
func (b *botIdentity) postedByUs(botID, user, team, enterprise string, orgInstall bool) bool {
	if b.BotID == "" && b.UserID == "" {
		return true
	}
	if botID == "" && user == "" {
		return b.Team == "" || team == b.Team || (orgInstall && b.Enterprise != "" && enterprise == b.Enterprise)
	}
	return (b.BotID != "" && botID == b.BotID) || (b.UserID != "" && user == b.UserID)
}

// apiTimeout bounds one Web API call, its answer read whole: a call that is never answered (a
// proxy holding the connection) would otherwise hold what waits on it — the instance's auth.test
// at start, a reconciliation — until shutdown. A delivery's call is bounded by the delivery
// engine's send timeout too, whichever ends first.
var apiTimeout = 30 * time.Second

// retryAfterSeconds gives slack-go a 429's Retry-After in the one form it reads, whole seconds:
// an HTTP date (RFC 9110 allows either) becomes the seconds until it, and a value of neither
// form is dropped, so the 429 reads as a rate limit without a wait (backed off, not waited for)
// rather than as a bare strconv error, an unknown outcome.
type retryAfterSeconds struct{ next http.RoundTripper }

func (rt retryAfterSeconds) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		return resp, err
	}
	if v := resp.Header.Get("Retry-After"); v != "" {
		if d, ok := delivery.ParseRetryAfter(v, time.Now()); ok {
			resp.Header.Set("Retry-After", strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10))
		} else {
			resp.Header.Del("Retry-After")
		}
	}
	return resp, nil
}

// New builds a Slack source from its configuration (see Options).
func New(cfg sources.Config) (sources.Source, error) {
	s := &Source{instance: cfg.Instance, principal: cfg.Principal, log: slog.Default().With("source", Name, "instance", cfg.Instance, "principal", cfg.Principal), now: time.Now}
	if err := cfg.Decode(&s.opt); err != nil {
		return nil, err
	}
	if err := s.opt.resolve(); err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: apiTimeout, Transport: retryAfterSeconds{http.DefaultTransport}}
	opts := []slack.Option{slack.OptionAPIURL(s.opt.APIURL), slack.OptionHTTPClient(client)}
	if s.opt.appToken != "" {
		opts = append(opts, slack.OptionAppLevelToken(s.opt.appToken))
	}
	s.api = slack.New(s.opt.botToken, opts...)
	s.setProblem("not running")
	if s.opt.Mode == ModeSocket {
		return &SocketSource{Source: s}, nil
	}
	return &EventsSource{Source: s}, nil
}

// Validate implements sources.Validator: the options were checked by New; a principal is needed.
func (s *Source) Validate() error {
	if s.principal == "" {
		return errors.New("slack: the instance has no principal")
	}
	return nil
}

// Name implements sources.Source.
func (s *Source) Name() string { return Name }

// Health implements sources.HealthChecker: healthy once the bot's identity is known and, in
// Socket Mode, while the websocket is connected.
func (s *Source) Health(context.Context) error {
	if p := s.problem.Load(); p != nil {
		return fmt.Errorf("slack %s: %s", s.instance, *p)
	}
	return nil
}

func (s *Source) setProblem(p string) {
	if p == "" {
		s.problem.Store(nil)
		return
	}
	s.problem.Store(&p)
}

// identify learns the bot's identity with auth.test, retrying transient failures until ctx
// ends. A refused token is returned at once: retrying cannot fix it.
func (s *Source) identify(ctx context.Context) error {
	wait := 250 * time.Millisecond
	for {
		r, err := s.api.AuthTestContext(ctx)
		if err == nil && r.UserID != "" {
			s.bot.Store(identityOf(r))
			return nil
		}
		if err == nil {
			err = errors.New("auth.test returned no user id")
		}
		var se slack.SlackErrorResponse
		if errors.As(err, &se) && fatalAuth(se.Err) {
			s.setProblem("the bot token was refused: " + se.Err)
			return fmt.Errorf("slack %s: auth.test: %w", s.instance, err)
		}
		s.setProblem("auth.test failed: " + err.Error())
		s.log.Warn("slack auth.test failed; retrying", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Minute)
	}
}

func fatalAuth(code string) bool {
	switch code {
	case "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "not_allowed_token_type":
		return true
	}
	return false
}

// settle hands a classified envelope to the sink and reports whether it may be acknowledged:
// only after it was durably accepted, counted, or recorded as malformed.
func (s *Source) settle(ctx context.Context, sink *sources.Sink, v verdict) bool {
	switch {
	case v.malformed != "":
		if err := sink.Malformed(ctx, s.principal, v.malformed, nil, v.detail); err != nil {
			s.log.Warn("record malformed slack envelope", "err", err)
			return false
		}
		return true
	case v.nonWork != "":
		_ = sink.NonWork(ctx, s.principal, v.nonWork, nil) // a counter: cannot fail without a position
		return true
	case v.dialog != nil:
		s.openDialog(ctx, sink, v.dialog)
		return true
	}
	_, err := sink.Accept(ctx, v.event)
	switch {
	case err == nil:
		return true
	case sources.Permanent(err):
		// A conflicting or invalid event: its evidence is written and a redelivery cannot
		// succeed. Slack retries anything unacknowledged and disables apps that keep failing,
		// so it is settled.
		s.log.Warn("slack event refused", "identity", v.event.Identity, "err", err)
		return true
	}
	s.log.Warn("slack event not accepted; leaving it unacknowledged", "identity", v.event.Identity, "err", err)
	return false
}

// ownMention strips our own mention from a message's text ("<@U123> deploy" → "deploy").
func (s *Source) ownMention(text string) string {
	if b := s.bot.Load(); b != nil && b.UserID != "" {
		text, _ = withoutMention(text, b.UserID)
	}
	return strings.TrimSpace(text)
}

// withoutMention returns text without its mentions of userID, in either form Slack writes one:
// "<@U123>" and, with a label, "<@U123|name>"; found reports whether it had any. "<@U1234>" is
// another user.
func withoutMention(text, userID string) (rest string, found bool) {
	open := "<@" + userID
	var b strings.Builder
	for {
		i := strings.Index(text, open)
		if i < 0 {
			break
		}
		after := text[i+len(open):]
		end := -1
		switch {
		case strings.HasPrefix(after, ">"):
			end = 1
		case strings.HasPrefix(after, "|"):
			end = strings.IndexByte(after, '>') + 1 // 0: no closing '>', not a mention
		}
		if end <= 0 {
			b.WriteString(text[:i+len(open)])
			text = after
			continue
		}
		found = true
		b.WriteString(text[:i])
		text = after[end:]
	}
	b.WriteString(text)
	return b.String(), found
}
