package a2aagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/channels-dev/channels/internal/drain"
	"github.com/channels-dev/channels/internal/netguard"
	"github.com/channels-dev/channels/internal/redact"
	"github.com/channels-dev/channels/taskplane"
)

// ErrForbiddenURL is returned for a downstream URL that fails the SSRF check: not https, or an
// address that is private, loopback, link-local, or otherwise not on the public internet, when the
// operator has not allowed private agents.
var ErrForbiddenURL = errors.New("agent URL refused by the SSRF check")

// allowedAddr reports whether the executor may connect to ip: a public address, or, when the
// operator allows private agents, one of the private ranges (loopback, private, link-local,
// unique-local, CGNAT) or this host's unspecified address (0.0.0.0, [::], which a local agent
// often prints as where it listens) — never cloud metadata, reserved, benchmarking or
// documentation addresses. IPv6 forms that embed an IPv4 address are judged by it (netguard, as
// push notifications are).
func allowedAddr(ip netip.Addr, allowPrivate bool) bool {
	reason, privateOK := netguard.Classify(ip)
	return reason == "" || (allowPrivate && (privateOK || reason == netguard.Unspecified))
}

// checkURL checks a downstream URL's form: https (http only when private agents are allowed), a
// host, and no user information (credentials travel as the bearer token).
func checkURL(raw string, allowPrivate bool) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%w: %q is not an absolute URL", ErrForbiddenURL, redact.Origin(raw))
	}
	switch {
	case u.User != nil:
		return nil, fmt.Errorf("%w: %s carries user information", ErrForbiddenURL, redact.Origin(raw))
	case u.Scheme == "https":
	case u.Scheme == "http" && allowPrivate:
	default:
		return nil, fmt.Errorf("%w: %s is not https (allow private agents to use http)", ErrForbiddenURL, redact.Origin(raw))
	}
	if ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil && !allowedAddr(ip, allowPrivate) {
		return nil, fmt.Errorf("%w: %s is not a public address", ErrForbiddenURL, u.Hostname())
	}
	return u, nil
}

// newTransport returns the transport every downstream call uses (its connections shared by the
// clients of every card read). Its dialer checks the address it actually connects to (after DNS,
// so a name that resolves to a private address is refused too, however it was reached: the card,
// a redirect, the agent's interfaces). It uses no proxy from the environment, since the SSRF check
// must see the real destination.
func newTransport(allowPrivate bool) *http.Transport {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: unparsable address %q", ErrForbiddenURL, address)
			}
			if !allowedAddr(ap.Addr(), allowPrivate) {
				return fmt.Errorf("%w: %s is not a public address", ErrForbiddenURL, ap.Addr())
			}
			return nil
		}}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// newHTTPClient returns a client on tr that sends auth's token to auth's hosts and checks every
// redirect's URL.
func newHTTPClient(tr http.RoundTripper, allowPrivate bool, auth *bearer) *http.Client {
	return &http.Client{
		Transport: &roundTripper{next: tr, auth: auth},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			_, err := checkURL(req.URL.String(), allowPrivate)
			return err
		},
	}
}

// bearer holds the token and the hosts one client may send it to: the agent URL's, and those of
// the interfaces of the card the client was made from. It does not change: a card read again
// makes a client of its own, so a host the agent no longer lists stops receiving the token while
// a turn still using the earlier client keeps it.
type bearer struct {
	token string
	hosts map[string]bool
}

// hostSet is hosts as a bearer's set (host names are case-insensitive).
func hostSet(hosts []string) map[string]bool {
	set := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		set[strings.ToLower(h)] = true
	}
	return set
}

func (b *bearer) header(u *url.URL) string {
	if b == nil || b.token == "" || !b.hosts[strings.ToLower(u.Host)] {
		return ""
	}
	return "Bearer " + b.token
}

// roundTripper adds the bearer token and turns a transient HTTP status into an error, so the
// executor can tell "try again" (a transport failure) from an answer.
type roundTripper struct {
	next http.RoundTripper
	auth *bearer
}

// isStream reports whether resp is a stream: a 200 answer asked for as one (the A2A client reads
// the answer to a request that accepts text/event-stream as a stream, whatever its Content-Type
// says) or labelled one. The client reads an answer of any other status whole, as an error.
func isStream(req *http.Request, resp *http.Response) bool {
	if resp.StatusCode != http.StatusOK {
		return false
	}
	for _, h := range []string{req.Header.Get("Accept"), resp.Header.Get("Content-Type")} {
		for _, v := range strings.Split(h, ",") {
			if mt, _, _ := mime.ParseMediaType(strings.TrimSpace(v)); mt == "text/event-stream" {
				return true
			}
		}
	}
	return false
}

// MaxAnswerBytes bounds an answer of the agent that is not a stream (its card, a JSON-RPC or REST
// answer): a larger one fails the read (ErrAnswerTooLarge) rather than filling Channels' memory.
const MaxAnswerBytes = 16 << 20

// ErrAnswerTooLarge is the read error of an answer past MaxAnswerBytes.
var ErrAnswerTooLarge = fmt.Errorf("the agent's answer is larger than %d bytes", MaxAnswerBytes)

// limitedBody fails reads past its bound with ErrAnswerTooLarge (an io.LimitReader would end the
// body early, which the client would report as malformed JSON).
type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// At the bound: an answer that ends here is whole.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		for try := 0; n == 0 && err == nil && try < 100; try++ { // a Read may return 0, nil
			n, err = b.ReadCloser.Read(one[:])
		}
		if n == 0 && err != nil {
			return 0, err
		}
		return 0, ErrAnswerTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// statusError is a transient HTTP status from the agent (429, 502, 503, 504).
type statusError struct{ code int }

func (e *statusError) Error() string { return fmt.Sprintf("agent answered HTTP %d", e.code) }

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if h := rt.auth.header(req.URL); h != "" && req.Header.Get("Authorization") == "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", h)
	}
	resp, err := rt.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if !isStream(req, resp) {
		// A card or a JSON answer is read whole by the A2A client: bound it. A stream lasts as
		// long as its task, and the client bounds each of its events.
		resp.Body = &limitedBody{ReadCloser: resp.Body, left: MaxAnswerBytes}
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		// Read what is left of a short answer, so its connection serves the retry.
		drain.Discard(resp.Body, drain.MaxBytes, drain.MaxWait)
		return nil, &statusError{code: resp.StatusCode}
	}
	return resp, nil
}

// transient reports whether err is a transport failure worth retrying: the agent could not be
// reached, the connection broke, or it answered with a transient status. An SSRF refusal and
// every answer of the agent are not.
func transient(err error) bool {
	if err == nil || errors.Is(err, ErrForbiddenURL) || errors.Is(err, context.Canceled) || errors.Is(err, taskplane.ErrStore) {
		return false // the store's failure is the dispatcher's to handle, not the agent's transport
	}
	var se *statusError
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &se) || errors.As(err, &ne) || errors.As(err, &oe) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		strings.Contains(err.Error(), "unexpected EOF")
}
