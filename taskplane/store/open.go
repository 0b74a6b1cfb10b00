package store

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/channels-dev/channels/internal/redact"
)

// Opener opens a store from a URL. Drivers register one per URL scheme.
type Opener func(ctx context.Context, u *url.URL) (Store, error)

// Inspection is what Inspect learns of a store without changing it.
type Inspection struct {
	// Exists is false when there is no store there yet: Open would create a new, empty one.
	Exists bool
	// Version is the store's schema version (0: no schema yet) and Latest the newest one this
	// binary's migrations reach. Open migrates a store below Latest and refuses one above it.
	Version, Latest int
}

// Inspector inspects a store from a URL without creating, locking or migrating anything. Drivers
// register one per URL scheme, beside their Opener.
type Inspector func(ctx context.Context, u *url.URL) (Inspection, error)

var (
	driversMu  sync.RWMutex
	drivers    = map[string]Opener{}
	inspectors = map[string]Inspector{}
	urlChecks  = map[string]func(*url.URL) error{}
)

// RegisterURLCheck makes a driver's check of its URLs, which opens nothing, available to CheckURL
// for the scheme (config check runs it without --connect). It panics if registered twice.
func RegisterURLCheck(scheme string, check func(*url.URL) error) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if check == nil {
		panic("store: RegisterURLCheck check is nil")
	}
	if _, dup := urlChecks[scheme]; dup {
		panic("store: RegisterURLCheck called twice for scheme " + scheme)
	}
	urlChecks[scheme] = check
}

// CheckURL reports what Open would refuse in rawURL's form, without opening anything: an invalid
// URL, a scheme with no driver, or what the driver's check (RegisterURLCheck) refuses. A store
// unreachable or refusing access is found only by opening it. The error never contains the
// URL's password.
func CheckURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("store: invalid URL")
	}
	driversMu.RLock()
	_, ok := drivers[u.Scheme]
	check := urlChecks[u.Scheme]
	driversMu.RUnlock()
	if !ok {
		return fmt.Errorf("store: scheme %q has no driver: want one of %s", u.Scheme, strings.Join(Schemes(), ", "))
	}
	if check != nil {
		if err := check(u); err != nil {
			return fmt.Errorf("store %s: %w", Redact(u), err)
		}
	}
	return nil
}

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

// RegisterInspector makes a driver's Inspector available to Inspect for the URL scheme. It panics
// if the scheme's inspector is registered twice or inspector is nil.
func RegisterInspector(scheme string, inspector Inspector) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if inspector == nil {
		panic("store: RegisterInspector inspector is nil")
	}
	if _, dup := inspectors[scheme]; dup {
		panic("store: RegisterInspector called twice for scheme " + scheme)
	}
	inspectors[scheme] = inspector
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

// SQLiteURL is the store URL of the SQLite database file at path, escaped so that any path names
// that file: "sqlite:///var/lib/channels/channels.db"; a path with '#', '%' or a space (say, a
// home directory's) is percent-encoded, where "sqlite://"+path would name another file or no URL.
func SQLiteURL(path string) string {
	return (&url.URL{Scheme: "sqlite", Path: filepath.ToSlash(path)}).String()
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

// Inspect reports whether the store named by rawURL exists and its schema version, and that it
// can be reached, without creating, locking or migrating anything: what a configuration check
// needs before a server opens the store. The error never contains the URL's password.
func Inspect(ctx context.Context, rawURL string) (Inspection, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return Inspection{}, fmt.Errorf("inspect store: invalid URL")
	}
	driversMu.RLock()
	inspector, ok := inspectors[u.Scheme]
	driversMu.RUnlock()
	if !ok {
		return Inspection{}, fmt.Errorf("inspect store %s: unknown scheme %q (registered: %v)", redact.Password(rawURL), u.Scheme, Schemes())
	}
	// The driver's error names the store (its path, or its server), never the password.
	return inspector(ctx, u)
}
