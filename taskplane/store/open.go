package store

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"sync"

	"github.com/channels-dev/channels/internal/redact"
)

// Opener opens a store from a URL. Drivers register one per URL scheme.
type Opener func(ctx context.Context, u *url.URL) (Store, error)

var (
	driversMu sync.RWMutex
	drivers   = map[string]Opener{}
)

// Register makes a driver available to Open for the URL scheme. It panics if the scheme is
// registered twice or opener is nil, like database/sql.Register.
func Register(scheme string, opener Opener) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if opener == nil {
		panic("store: Register opener is nil")
	}
	if _, dup := drivers[scheme]; dup {
		panic("store: Register called twice for scheme " + scheme)
	}
	drivers[scheme] = opener
}

// Schemes lists the registered URL schemes, sorted.
func Schemes() []string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	out := make([]string, 0, len(drivers))
	for s := range drivers {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Open opens the store named by rawURL ("sqlite:///path/to/channels.db", "postgres://…"), runs its
// embedded migrations, and returns it. The error never contains the URL's password.
func Open(ctx context.Context, rawURL string) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open store: invalid URL")
	}
	driversMu.RLock()
	opener, ok := drivers[u.Scheme]
	driversMu.RUnlock()
	if !ok {
		// rawURL, not u: a libpq key=value string has no scheme, and u would escape its spaces,
		// hiding where its password parameter starts.
		return nil, fmt.Errorf("open store %s: unknown scheme %q (registered: %v)", redact.Password(rawURL), u.Scheme, Schemes())
	}
	s, err := opener(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", Redact(u), err)
	}
	return s, nil
}

// Redact returns u as a string with every password replaced, for logs and errors: its
// userinfo's and the values of its password and sslpassword parameters (redact.Password).
func Redact(u *url.URL) string {
	return redact.Password(u.String())
}
