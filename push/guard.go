package push

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/channels-dev/channels/internal/netguard"
)

// ErrForbidden is the SSRF guard's refusal of a webhook. The concrete error is *ForbiddenError.
var ErrForbidden = errors.New("push: webhook target is not allowed")

// ForbiddenError says why the guard refused a webhook: its scheme, its host, or an address its
// host resolved to.
type ForbiddenError struct {
	// Host is the webhook's host.
	Host string
	// Addr is the refused address (invalid when the scheme or the name was refused).
	Addr netip.Addr
	// Reason names the arm and the range: "scheme http", "loopback", "private", "link-local",
	// "unique-local", "shared address space", "cloud metadata", …
	Reason string
}

func (e *ForbiddenError) Error() string {
	if e.Addr.IsValid() {
		return fmt.Sprintf("%s: %s resolves to %s (%s)", ErrForbidden, e.Host, e.Addr, e.Reason)
	}
	return fmt.Sprintf("%s: %s (%s)", ErrForbidden, e.Host, e.Reason)
}

// Unwrap makes errors.Is(err, ErrForbidden) true.
func (e *ForbiddenError) Unwrap() error { return ErrForbidden }

// Resolver resolves host names. *net.Resolver implements it; tests inject a ResolverFunc.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ResolverFunc is a Resolver made of a function.
type ResolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

// LookupNetIP calls f.
func (f ResolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

// Guard is the SSRF guard of webhooks, with two arms:
//
//   - the scheme arm: https only;
//   - the address arm: the host, and every address it resolves to, must be public: no loopback,
//     private (RFC 1918), link-local, unique-local (fc00::/7), shared (CGNAT, 100.64.0.0/10),
//     cloud metadata, unspecified, multicast, documentation or otherwise reserved address, also
//     not inside an IPv4-mapped, IPv4-translated, NAT64 or 6to4 IPv6 address.
//
// CheckURL applies both at registration. DialContext applies the address arm again at every
// connection: it resolves the host, refuses the whole name if any address is forbidden, and
// connects to the addresses it checked (a net.Dialer Control function checks the socket's
// address once more), so a DNS answer that changes between the check and the connection (DNS
// rebinding) cannot reach a forbidden address.
//
// AllowPrivateNetworks, the operator's opt-in for development and tests, admits http and
// loopback, private, link-local, unique-local and shared addresses. Cloud metadata, unspecified,
// multicast and reserved addresses stay forbidden even then.
type Guard struct {
	AllowPrivateNetworks bool
	// Resolver resolves webhook hosts (default net.DefaultResolver).
	Resolver Resolver
	// DialTimeout bounds one TCP connect (default 10s).
	DialTimeout time.Duration
}

func (g *Guard) resolver() Resolver {
	if g.Resolver != nil {
		return g.Resolver
	}
	return net.DefaultResolver
}

// CheckURL applies both arms to a webhook URL: its scheme, its host's form, and every address
// the host resolves to now. A name that does not resolve is refused too, except with
// AllowPrivateNetworks (a test network, often without DNS for public names): then it is taken,
// and the dial, which checks every address again, decides at delivery.
func (g *Guard) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return &ForbiddenError{Host: raw, Reason: "not an absolute URL"}
	}
	if err := g.CheckScheme(u); err != nil {
		return err
	}
	_, err = g.resolve(ctx, u.Hostname())
	var unresolved *resolveError
	if g.AllowPrivateNetworks && errors.As(err, &unresolved) {
		return nil
	}
	return registrationError(u.Hostname(), err)
}

// registrationError is what the client registering a webhook learns of a refused one: the
// refused range of an address it wrote itself, but of a name only that it does not resolve to
// public addresses, or does not resolve. The addresses a name resolves to inside the network, and
// the resolver's own errors, are not the client's to map: they stay in the error's cause, for
// the operator's log.
func registrationError(host string, err error) error {
	if err == nil {
		return nil
	}
	if _, perr := netip.ParseAddr(strings.Trim(host, "[]")); perr == nil {
		return err // an address the client wrote: its range tells it nothing new
	}
	public := fmt.Sprintf("%s: %s does not resolve", ErrForbidden, host)
	if errors.Is(err, ErrForbidden) {
		public = fmt.Sprintf("%s: %s does not resolve to public addresses only", ErrForbidden, host)
	}
	return &RefusedRegistration{public: public, cause: err}
}

// RefusedRegistration is a webhook refused at registration: Error is what the client may be
// told; Unwrap is the full cause (resolved addresses, resolver errors) for the operator.
type RefusedRegistration struct {
	public string
	cause  error
}

func (e *RefusedRegistration) Error() string { return e.public }
func (e *RefusedRegistration) Unwrap() error { return e.cause }

// CheckScheme is the scheme arm: https, or http with the opt-in. A URL with user information is
// refused (credentials belong in the config's authentication).
func (g *Guard) CheckScheme(u *url.URL) error {
	switch {
	case u.User != nil:
		return &ForbiddenError{Host: u.Host, Reason: "user information in the URL"}
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && g.AllowPrivateNetworks:
		return nil
	case u.Scheme == "http":
		return &ForbiddenError{Host: u.Host, Reason: "scheme http: webhooks must use https"}
	}
	return &ForbiddenError{Host: u.Host, Reason: "scheme " + u.Scheme + ": webhooks must use https"}
}

// CheckAddr is the address arm for one address.
func (g *Guard) CheckAddr(host string, a netip.Addr) error {
	reason, privateRange := netguard.Classify(a)
	if reason == "" || (privateRange && g.AllowPrivateNetworks) {
		return nil
	}
	return &ForbiddenError{Host: host, Addr: a, Reason: reason}
}

// resolve returns the addresses of host, all checked; any forbidden address refuses the name.
func (g *Guard) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	host = strings.TrimSuffix(host, ".")
	if host == "" {
		return nil, &ForbiddenError{Host: host, Reason: "no host"}
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		a = a.WithZone("")
		if err := g.CheckAddr(host, a); err != nil {
			return nil, err
		}
		return []netip.Addr{a}, nil
	}
	lower := strings.ToLower(host)
	if !g.AllowPrivateNetworks && (lower == "localhost" || strings.HasSuffix(lower, ".localhost") ||
		lower == "metadata.google.internal") {
		return nil, &ForbiddenError{Host: host, Reason: "a local or metadata name"}
	}
	addrs, err := g.resolver().LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, &resolveError{host: host, err: err}
	}
	if len(addrs) == 0 {
		return nil, &resolveError{host: host, err: errors.New("no addresses")}
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if err := g.CheckAddr(host, a); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// resolveError is a failed lookup: nothing was sent.
type resolveError struct {
	host string
	err  error
}

func (e *resolveError) Error() string { return fmt.Sprintf("push: resolve %s: %v", e.host, e.err) }
func (e *resolveError) Unwrap() error { return e.err }

// dialError is a connection that could not be made: nothing was sent.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// DialContext connects to address ("host:port") through the address arm: it resolves the host,
// refuses it if any address is forbidden, and connects only to the checked addresses. Use it as
// http.Transport.DialContext.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &dialError{err: err}
	}
	addrs, err := g.resolve(ctx, host)
	if err != nil {
		return nil, err // forbidden, or a failed lookup
	}
	timeout := g.DialTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	d := net.Dialer{Timeout: timeout, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &ForbiddenError{Host: host, Reason: "unparsable socket address " + address}
		}
		return g.CheckAddr(host, ap.Addr().Unmap())
	}}
	var last error
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		if errors.Is(err, ErrForbidden) {
			return nil, err
		}
		last = err
	}
	return nil, &dialError{err: last}
}
