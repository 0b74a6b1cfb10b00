package push

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/internal/drain"
	"github.com/channels-dev/channels/internal/redact"
	"github.com/channels-dev/channels/taskplane/store"
)

// notification is what a push delivery keeps in its Locator: which config and registration it
// is for, its stable id, and the exact body to POST. Secrets are not in it: the sender reads them
// from the config at each attempt, so a deleted config stops its pending notifications.
type notification struct {
	Config       string          `json:"config"`
	Registration string          `json:"registration"`
	ID           string          `json:"id"`
	Seq          int64           `json:"seq"`
	Body         json.RawMessage `json:"body"`
}

// Sender POSTs one notification to its config's webhook. It implements delivery.Sender for the
// idempotent recovery class: a notification whose outcome is unknown is sent again, with the
// same id, and the receiver acts on each id once.
type Sender struct {
	store  store.Reader
	guard  *Guard
	client *http.Client
	now    func() time.Time
}

// NewSender returns a sender reading configs from st, connecting through g, with a per-attempt
// timeout.
func NewSender(st store.Reader, g *Guard, timeout time.Duration, now func() time.Time) *Sender {
	if now == nil {
		now = time.Now
	}
	tr := &http.Transport{
		Proxy:       nil, // a proxy would connect to addresses the guard never saw
		DialContext: g.DialContext,
		// Every attempt dials, so every attempt resolves and checks the webhook's addresses.
		DisableKeepAlives:      true,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: 64 << 10,
	}
	client := &http.Client{
		Transport: tr,
		Timeout:   timeout,
		// Redirects are not followed: the target the guard checked is the only one contacted.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Sender{store: st, guard: g, client: client, now: now}
}

// Send makes one attempt. Its results: delivered on 2xx; Permanent for a deleted config, a
// refused target, a redirect or another 4xx; RetryAfter for 429 and 503 with a Retry-After (in
// seconds or an HTTP date); Retryable for a 429 without one and when no connection was made;
// Indeterminate for 5xx, 408 and errors after the request may have been written (the engine
// repeats those).
func (s *Sender) Send(ctx context.Context, d delivery.Delivery) (delivery.Receipt, error) {
	var n notification
	if err := json.Unmarshal(d.Locator, &n); err != nil || n.ID == "" {
		return delivery.Receipt{}, delivery.Permanent(fmt.Errorf("push: unreadable notification %s", d.ID))
	}
	cfg, err := s.store.GetPushConfig(ctx, d.Principal, d.TaskID, n.Config)
	if errors.Is(err, store.ErrNotFound) {
		return delivery.Receipt{}, delivery.Withdrawn(fmt.Errorf("push: config %s of task %s was deleted", n.Config, d.TaskID))
	}
	if err != nil {
		return delivery.Receipt{}, delivery.Retryable(fmt.Errorf("push: read config %s: %w", n.Config, err))
	}
	if n.Registration != "" && cfg.Registration != n.Registration {
		// The config was deleted and created again, or replaced, under the same id: its new
		// receiver and credentials never get what was meant for the old one.
		return delivery.Receipt{}, delivery.Withdrawn(fmt.Errorf("push: config %s of task %s was replaced", n.Config, d.TaskID))
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return delivery.Receipt{}, delivery.Permanent(fmt.Errorf("push: config %s: bad url", n.Config))
	}
	if err := s.guard.CheckScheme(u); err != nil {
		return delivery.Receipt{}, delivery.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL, bytes.NewReader(n.Body))
	if err != nil {
		return delivery.Receipt{}, delivery.Permanent(fmt.Errorf("push: build request: %w", err))
	}
	h := req.Header
	h.Set("Content-Type", ContentType)
	h.Set("User-Agent", "channels-push/1")
	h.Set(HeaderID, n.ID)
	h.Set(HeaderDelivery, d.ID)
	if cfg.AuthScheme != "" {
		h.Set("Authorization", strings.TrimSpace(cfg.AuthScheme+" "+cfg.AuthCredentials))
	}
	if cfg.Token != "" {
		h.Set(HeaderToken, cfg.Token)
		h.Set(HeaderTokenLegacy, cfg.Token)
		h.Set(HeaderSignature, Sign(cfg.Token, s.now(), n.ID, n.Body))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		// The receiver's URL may hold a secret in its path or query: the error, which delivery
		// records and evidence carry, names only its origin.
		return delivery.Receipt{}, classifyTransport(redact.URLError(err))
	}
	drain.Discard(resp.Body, drain.MaxBytes, drain.MaxWait) // the status says it all
	return classifyStatus(resp, n.ID, s.now())
}

// classifyTransport reads a failed request: refused by the guard (permanent), never connected
// (retryable), or possibly received (indeterminate).
func classifyTransport(err error) error {
	var (
		de *dialError
		re *resolveError
		ve *tls.CertificateVerificationError
	)
	switch {
	case errors.Is(err, ErrForbidden):
		return delivery.Permanent(err)
	case errors.As(err, &de), errors.As(err, &re):
		return delivery.Retryable(err)
	case errors.As(err, &ve):
		// The receiver's certificate was refused during the handshake, before any byte of the
		// request was written: certainly not received.
		return delivery.Retryable(err)
	}
	return delivery.Indeterminate(err)
}

func classifyStatus(resp *http.Response, id string, now time.Time) (delivery.Receipt, error) {
	code := resp.StatusCode
	status := "HTTP " + strconv.Itoa(code)
	switch {
	case code >= 200 && code < 300:
		return delivery.Receipt{ProviderID: id}, nil
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		// Wait as asked (seconds or an HTTP date). A 429 without a usable Retry-After backs off
		// as a passing refusal does, spending attempts, rather than snooze for a guessed second
		// and use up the bounded snoozes in about a minute; a 503 without one may come after the
		// receiver acted (below).
		if wait, ok := delivery.ParseRetryAfter(resp.Header.Get("Retry-After"), now); ok {
			return delivery.Receipt{}, delivery.WithStatus(delivery.RetryAfter(wait, fmt.Errorf("receiver asked to retry later")), status)
		}
		if code == http.StatusTooManyRequests {
			return delivery.Receipt{}, delivery.WithStatus(delivery.Retryable(fmt.Errorf("receiver asked to retry later")), status)
		}
		return delivery.Receipt{}, delivery.WithStatus(delivery.Indeterminate(fmt.Errorf("receiver failed")), status)
	case code >= 300 && code < 400:
		// Only the target's origin: a redirect keeps the secret path of the receiver's URL.
		return delivery.Receipt{}, delivery.WithStatus(delivery.Permanent(fmt.Errorf("receiver redirected (to %s); redirects are not followed",
			redirectOrigin(resp.Header.Get("Location")))), status)
	case code == http.StatusRequestTimeout || code >= 500:
		return delivery.Receipt{}, delivery.WithStatus(delivery.Indeterminate(fmt.Errorf("receiver failed")), status)
	}
	return delivery.Receipt{}, delivery.WithStatus(delivery.Permanent(fmt.Errorf("receiver refused the notification")), status)
}

// redirectOrigin names where a redirect points without its path or query: the origin of an
// absolute Location, "the same origin" for a relative one.
func redirectOrigin(location string) string {
	if o := redact.Origin(location); o != redact.NoOrigin {
		return o
	}
	return "the same origin"
}
