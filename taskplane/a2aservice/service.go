// Package a2aservice is the A2A v1 service over the task plane, shared by both bindings
// (a2ahttp for HTTP+JSON, a2ajsonrpc for JSON-RPC 2.0): authentication, version and extension
// negotiation, the operations (send, get, list, cancel, streams), the agent card, and the SSE
// writer. A binding decodes its request with a2awire, calls the service, and encodes the answer
// or the *a2awire.Error in its own envelope; it holds no protocol logic of its own.
//
// The service works on taskplane types; wire JSON exists only in the a2awire conversions at the
// edge.
package a2aservice

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/channels-dev/channels/internal/mediarange"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// AnonymousPrincipal is the principal of unauthenticated callers when anonymous access is
// allowed. No credential may use it, and no source (config.AnonymousPrincipal, the same name).
const AnonymousPrincipal = "anonymous"

// DefaultPublicURL is the base URL advertised when Config.PublicURL is empty.
const DefaultPublicURL = "http://127.0.0.1:8788"

// JSONRPCPath is where the JSON-RPC binding is mounted, relative to the public URL.
const JSONRPCPath = "/jsonrpc"

// Credential maps a bearer token to the principal it authenticates.
type Credential struct {
	Token     string `json:"token"`
	Principal string `json:"principal"`
}

// Config configures the A2A server.
type Config struct {
	// Name, Description and Version appear on the agent card.
	Name        string
	Description string
	Version     string
	// PublicURL is the absolute base URL clients use (default http://127.0.0.1:8788). The
	// HTTP+JSON interface is advertised at PublicURL, JSON-RPC at PublicURL + "/jsonrpc".
	PublicURL string
	// Skills are the card's skills (default: one skill named after the agent).
	Skills []a2awire.AgentSkill
	// PrincipalSkills adds skills to the extended card of one principal.
	PrincipalSkills map[string][]a2awire.AgentSkill
	// DefaultInputModes are the media types (or ranges: image/*, */*) the card offers for a
	// message's parts, together with the skills' input modes; a part of another type is refused
	// with ContentTypeNotSupported (default DefaultInputModes). DefaultOutputModes are the card's
	// output media types (default text/plain).
	DefaultInputModes  []string
	DefaultOutputModes []string

	// Credentials are the accepted bearer tokens. nil means none are configured (anonymous on
	// loopback, below); an empty non-nil list is configured credentials that accept no token,
	// and does not open a loopback server to anonymous callers.
	Credentials []Credential
	// AllowAnonymous accepts callers without a token (as AnonymousPrincipal) even when
	// credentials are configured or the server listens beyond loopback.
	AllowAnonymous bool
	// Loopback says the server listens on loopback only; with no credentials configured
	// (Credentials nil) it then accepts anonymous callers — under a loopback Host (localhost,
	// *.localhost, 127.0.0.0/8, [::1]) or PublicURL's host only, against DNS rebinding: a web
	// page whose name an attacker re-points at 127.0.0.1 reaches a loopback listener from a
	// browser, with the attacker's name in Host. Set it only when the listener is on loopback:
	// the server takes it as said.
	Loopback bool

	// FreshSends makes every SendMessage new work: the messageId is no idempotency key, and a
	// resend never returns the earlier outcome. For the A2A conformance kit, which reuses its
	// messageIds within a run; off by default (A2A allows either).
	FreshSends bool

	// BlockingTimeout bounds how long a blocking SendMessage waits for the task to settle
	// before returning the current snapshot (default 60s).
	BlockingTimeout time.Duration
	// KeepAlive is the interval of SSE keep-alive comments (default 15s).
	KeepAlive time.Duration
	// StreamWriteTimeout bounds each write of an SSE stream, a keep-alive comment included
	// (default 30s, whatever KeepAlive is): a client that takes no write for that long
	// (it stopped reading, and the socket buffers are full) loses its stream, and the stream's
	// slot comes back. It bounds each 64 KiB of an answer that is not a stream too, whose whole
	// must also be taken at boundedwrite.MinRate (WriteAnswer).
	StreamWriteTimeout time.Duration
	// CardMaxAge is the Cache-Control max-age of the agent card (default 5m).
	CardMaxAge time.Duration
	// RequiredExtensions lists supported extension URIs the card marks required; a request
	// that does not activate them fails with ExtensionSupportRequired.
	RequiredExtensions []string

	// Limits bound requests; zero fields take a2awire's defaults.
	Limits a2awire.Limits

	// Push, when set, offers push notifications through it (see PushNotifier); nil refuses them.
	Push PushNotifier

	// Logger receives internal errors (default slog.Default()).
	Logger *slog.Logger
}

// SupportedExtensions lists the extensions the server implements, in card order.
var SupportedExtensions = []a2awire.AgentExtension{
	{URI: a2awire.ExtOutfitterTask, Description: "Task locator in task metadata: interface URL, binding, protocol version, tenant and task id."},
	{URI: a2awire.ExtElicitation, Description: "A question's MCP-style requestedSchema as a data part of the INPUT_REQUIRED status message."},
}

type credential struct {
	sum       [sha256.Size]byte
	principal string
}

// Service is the A2A service over one task plane. It is safe for concurrent use.
type Service struct {
	plane *taskplane.Plane
	disp  *taskplane.Dispatcher
	exec  taskplane.Executor
	cfg   Config
	lim   a2awire.Limits
	log   *slog.Logger

	creds     []credential
	anonymous bool
	// loopbackOnly: anonymous callers are trusted for being on loopback (Config.Loopback), so
	// only under a loopback Host or the public URL's.
	loopbackOnly bool
	publicURL    *url.URL
	// inputModes are the media types (and ranges) the card offers for a message's parts.
	inputModes []string

	base context.Context
	stop context.CancelFunc

	card *cardCache

	streams slots // open streams (max_streams)
	sends   slots // blocking sends waiting (max_blocking_sends)
}

// New returns a Service over plane. dispatcher (may be nil) lets cancel stop a running turn;
// exec (may be nil) is asked for direct replies (taskplane.DirectResponder) and told about
// cancels (taskplane.Canceler).
func New(plane *taskplane.Plane, dispatcher *taskplane.Dispatcher, exec taskplane.Executor, cfg Config) (*Service, error) {
	if plane == nil {
		return nil, errors.New("a2a service: no task plane")
	}
	if cfg.PublicURL == "" {
		cfg.PublicURL = DefaultPublicURL
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	u, err := url.Parse(cfg.PublicURL)
	if err != nil {
		return nil, errors.New("a2a service: the public URL is not a URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return nil, fmt.Errorf("a2a service: public URL %q must be an absolute http(s) URL", u.Redacted())
	}
	// The card publishes URLs made from it: no password for everyone to read, and no query or
	// fragment, which the bindings' paths would follow.
	if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(cfg.PublicURL, "#") {
		c := *u
		c.User, c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = nil, "", false, "", ""
		return nil, fmt.Errorf("a2a service: the public URL must carry no user, password, query or fragment (want %s)", c.String())
	}
	if cfg.Name == "" {
		cfg.Name = "Channels"
	}
	if cfg.Description == "" {
		cfg.Description = "Channels A2A task plane"
	}
	if cfg.Version == "" {
		cfg.Version = "0.0.0"
	}
	if cfg.BlockingTimeout <= 0 {
		cfg.BlockingTimeout = 60 * time.Second
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	if cfg.StreamWriteTimeout <= 0 {
		cfg.StreamWriteTimeout = 30 * time.Second
	}
	if cfg.CardMaxAge <= 0 {
		cfg.CardMaxAge = 5 * time.Minute
	}
	if len(cfg.DefaultInputModes) == 0 {
		cfg.DefaultInputModes = DefaultInputModes
	}
	for _, m := range cfg.DefaultInputModes {
		if _, ok := mediarange.Parse(m); !ok {
			return nil, fmt.Errorf("a2a service: input mode %q is not a media type or range (type/subtype, type/* or */*)", m)
		}
	}
	if len(cfg.DefaultOutputModes) == 0 {
		cfg.DefaultOutputModes = []string{"text/plain"}
	}
	for _, uri := range cfg.RequiredExtensions {
		if !supported(uri) {
			return nil, fmt.Errorf("a2a service: required extension %q is not supported", uri)
		}
	}
	s := &Service{plane: plane, disp: dispatcher, exec: exec, cfg: cfg, lim: cfg.Limits.WithDefaults(), publicURL: u,
		inputModes: inputModesOf(cfg)}
	s.log = cfg.Logger
	if s.log == nil {
		s.log = slog.Default()
	}
	if err := CheckCredentials(cfg.Credentials); err != nil {
		return nil, fmt.Errorf("a2a service: %w", err)
	}
	for _, c := range cfg.Credentials {
		s.creds = append(s.creds, credential{sum: sha256.Sum256([]byte(c.Token)), principal: c.Principal})
	}
	// Whether credentials are configured, not how many: an empty non-nil list accepts nobody.
	s.anonymous = cfg.AllowAnonymous || (cfg.Credentials == nil && cfg.Loopback)
	s.loopbackOnly = s.anonymous && !cfg.AllowAnonymous
	if len(s.creds) == 0 && !s.anonymous {
		s.log.Warn("a2a: no credentials and no anonymous access: every request will be refused (configure credentials or allow_anonymous)")
	}
	s.base, s.stop = context.WithCancel(context.Background())
	if s.card, err = s.newCardCache(); err != nil {
		return nil, err
	}
	return s, nil
}

func supported(uri string) bool {
	for _, e := range SupportedExtensions {
		if e.URI == uri {
			return true
		}
	}
	return false
}

// Close ends every open stream and blocking wait (they return what they have). Call it when the
// HTTP server shuts down, before or while it drains; requests that arrive afterwards still work
// but their streams end at once.
func (s *Service) Close() { s.stop() }

// Done is closed once Close was called.
func (s *Service) Done() <-chan struct{} { return s.base.Done() }

// Limits returns the effective request limits.
func (s *Service) Limits() a2awire.Limits { return s.lim }

// PublicURL returns the advertised base URL, without a trailing slash.
func (s *Service) PublicURL() string { return s.cfg.PublicURL }

// Plane returns the task plane.
func (s *Service) Plane() *taskplane.Plane { return s.plane }

// WireError converts err to a protocol error, logging errors the caller cannot act on.
func (s *Service) WireError(ctx context.Context, op string, err error) *a2awire.Error {
	if we, ok := err.(*a2awire.Error); ok {
		return we // converted (and logged) already
	}
	we := a2awire.FromError(err)
	switch {
	case errors.Is(we, a2awire.ErrInternal) || errors.Is(we, a2awire.ErrInvalidAgentResponse):
		s.log.ErrorContext(ctx, "a2a request failed", "op", op, "err", err)
	case we.StoreOutage(): // the caller is told only that the store is unavailable
		s.log.WarnContext(ctx, "a2a request failed: store unavailable", "op", op, "err", err)
	}
	return we
}

// withBase returns ctx canceled also when the service closes; already canceled when it has
// (AfterFunc alone would cancel it a moment later, from a goroutine of its own).
func (s *Service) withBase(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if s.base.Err() != nil {
		cancel()
		return ctx, cancel
	}
	stop := context.AfterFunc(s.base, cancel)
	return ctx, func() { stop(); cancel() }
}
