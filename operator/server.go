package operator

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/channels-dev/channels/internal/bearer"
	"github.com/channels-dev/channels/internal/boundedwrite"
	"github.com/channels-dev/channels/taskplane/store"
)

// Server is the operator HTTP surface of one Channels process.
type Server struct {
	// Store is what /readyz pings and /admin reads. When it is the store Metrics.Store returns,
	// /readyz also follows its write transactions (instrumentedStore.CheckWrites).
	Store store.Reader
	// StoreName is the driver name /readyz reports ("sqlite", "postgres").
	StoreName string
	// Metrics is served at /metrics (nil: no /metrics).
	Metrics *Metrics
	// Health tracks the configured sources (nil: none configured).
	Health *Health
	// Ready is false while the server is not taking traffic (shutting down).
	Ready *atomic.Bool
	// Token is the operator token /admin requires. With no token, /admin is open only when
	// OpenAdmin is set (a loopback listener), to requests under a loopback Host name, and refused
	// otherwise: a request under the public URL's host came through a reverse proxy, from anyone
	// the proxy serves.
	Token     string
	OpenAdmin bool
	// Configured maps each configured source to its instances.
	Configured map[string][]string
	// Refresh is how often the dashboard reloads itself (0: never).
	Refresh time.Duration
	// Log receives warnings (a failing store, refused admin requests).
	Log *slog.Logger
	// Now is the clock (nil: the store's, store.NowFunc).
	Now func() time.Time
}

// readyTimeout bounds the store check of /readyz.
const readyTimeout = 2 * time.Second

// Mount registers /healthz, /readyz, /metrics, /admin and /admin/api/… on mux.
func (s *Server) Mount(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	if s.Metrics != nil {
		// Counts across every principal, and lane labels naming provider channels: the
		// operator's, like the admin pages.
		mux.Handle("GET /metrics", s.auth(s.Metrics.Handler()))
	}
	mux.Handle("GET /admin", s.auth(http.HandlerFunc(s.dashboard)))
	mux.Handle("GET /admin/{$}", s.auth(http.HandlerFunc(s.dashboard)))
	mux.Handle("GET /admin/api/evidence", s.auth(http.HandlerFunc(s.apiEvidence)))
	mux.Handle("GET /admin/api/summary", s.auth(http.HandlerFunc(s.apiSummary)))
	mux.Handle("GET /admin/static/", http.StripPrefix("/admin/", http.FileServerFS(staticFS)))
}

// now is Now, or the store's clock (store.Clock), on which leases and due times were written.
func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return store.NowFunc(s.Store)()
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// Readiness is the answer of /readyz.
type Readiness struct {
	Status  string         `json:"status"`
	Store   string         `json:"store"`
	Reasons []string       `json:"reasons,omitempty"`
	Sources []SourceHealth `json:"sources,omitempty"`
}

// Check reports whether the server is ready: taking traffic, its store answering and taking
// writes, every configured source connected and not failing for longer than the window.
func (s *Server) Check(ctx context.Context) Readiness {
	r := Readiness{Status: "ready", Store: s.StoreName}
	if s.Ready != nil && !s.Ready.Load() {
		r.Reasons = append(r.Reasons, "not serving (starting or shutting down)")
	}
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := Ping(ctx, s.Store); err != nil {
		s.log().Warn("readiness: store unreachable", "err", err)
		if caller.Err() == nil && s.Metrics != nil {
			// Readiness's own bound ran out, if any: a failed read as much as a refused
			// connection (which the instrumented store counts).
			s.Metrics.storeUnanswered("read", err)
		}
		r.Reasons = append(r.Reasons, "store unreachable")
	} else if w, ok := s.Store.(writeChecker); ok {
		// A store that answers reads may still refuse every write (a full disk): the store
		// Metrics.Store returns knows how its recent write transactions went.
		if err := w.CheckWrites(ctx); err != nil {
			s.log().Warn("readiness: store not taking writes", "err", err)
			r.Reasons = append(r.Reasons, "store not taking writes")
		}
	}
	if s.Health != nil {
		r.Sources = s.Health.Sources()
		r.Reasons = append(r.Reasons, s.Health.Unready()...)
	}
	if len(r.Reasons) > 0 {
		r.Status = "unavailable"
	}
	return r
}

// readyz answers with the readiness status code; the reasons (source names, store errors) go
// only to a caller the admin pages would let in. A load balancer needs the code alone.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	rd := s.Check(r.Context())
	code := http.StatusOK
	if rd.Status != "ready" {
		code = http.StatusServiceUnavailable
	}
	w.Header().Set("Cache-Control", "no-store")
	if !s.authorized(r) {
		writeJSON(w, code, map[string]string{"status": rd.Status})
		return
	}
	writeJSON(w, code, rd)
}

// Ping reads a task that cannot exist: not-found means the store answered.
func Ping(ctx context.Context, r store.Reader) error {
	_, err := r.GetTask(ctx, "", "channels-readiness-probe")
	if err == nil || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// auth admits a request carrying the operator token, as a Bearer token or as the password of
// HTTP Basic (so a browser can log in without JavaScript). The comparison is constant-time.
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if s.Token == "" {
			if s.authorized(r) {
				next.ServeHTTP(w, r)
				return
			}
			http.Error(w, "the admin pages need an operator token: set admin_token (admin_token_env or admin_token_file) in the configuration", http.StatusForbidden)
			return
		}
		if !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="Channels admin", charset="UTF-8"`)
			http.Error(w, "operator token required (Authorization: Bearer TOKEN, or any user name with the token as password)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authorized reports whether r may see what the admin pages show: it carries the operator token
// (Bearer, or the password of HTTP Basic; compared in constant time), or no token is configured
// and the admin pages are open (a loopback listener).
func (s *Server) authorized(r *http.Request) bool {
	if s.Token == "" {
		// Open on loopback: to a caller on this machine, not to a page that reached it by DNS
		// rebinding (for the routes LoopbackHosts leaves alone, such as /readyz), nor to one
		// that came through a reverse proxy under the public URL's host, which LoopbackHosts
		// lets through for the A2A bindings. A public URL on a loopback name is loopback here.
		return s.OpenAdmin && LoopbackHost(r.Host, "")
	}
	var got string
	if tok, ok := bearer.Token(r.Header.Get("Authorization")); ok {
		got = tok
	} else if _, pw, ok := r.BasicAuth(); ok {
		got = pw
	}
	want, sum := sha256.Sum256([]byte(s.Token)), sha256.Sum256([]byte(got))
	return got != "" && subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}

// Evidence API limits.
const (
	defaultEvidenceLimit = 100
	maxEvidenceLimit     = 1000
)

// EvidencePage is the answer of GET /admin/api/evidence: records newest first (oldest first after
// an id), and the largest id seen (pass it as after= to read only newer records).
type EvidencePage struct {
	Evidence []EvidenceView `json:"evidence"`
	LastID   int64          `json:"lastId"`
}

// EvidenceQuery parses the query of GET /admin/api/evidence: source, kind (one of EvidenceKinds:
// another is an error), principal, task,
// since and until (each a duration back from now, such as 1h, or an RFC 3339 time), after (an
// evidence id: oldest first from there, stopping short of an id still in flight unless follow=0)
// and limit (default 100, at most 1000).
func EvidenceQuery(q map[string][]string, now time.Time) (store.EvidenceFilter, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	f := store.EvidenceFilter{Source: get("source"), Kind: get("kind"), Principal: get("principal"), TaskID: get("task"),
		Limit: defaultEvidenceLimit}
	if f.Kind != "" {
		if err := CheckEvidenceKind(f.Kind); err != nil {
			return f, err
		}
	}
	if v := get("since"); v != "" {
		t, err := ParseSince(v, now)
		if err != nil {
			return f, err
		}
		f.Since = t
	}
	if v := get("until"); v != "" {
		t, err := ParseSince(v, now)
		if err != nil {
			return f, fmt.Errorf("until: %w", err)
		}
		f.Until = t
	}
	if v := get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return f, fmt.Errorf("after %q: want an evidence id", v)
		}
		// A follower pages forward, oldest first, and stops short of an id still in flight;
		// follow=0 lists what is committed now instead.
		f.AfterID, f.Forward, f.Follow = n, true, get("follow") != "0"
	}
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxEvidenceLimit {
			return f, fmt.Errorf("limit %q: want 1 to %d", v, maxEvidenceLimit)
		}
		f.Limit = n
	}
	return f, nil
}

// maxSinceDays is the most days a duration holds (about 292 years): more would overflow it and
// wrap round into the future.
const maxSinceDays = math.MaxInt64 / int64(24*time.Hour)

// ParseSince reads a point in time: a duration back from now ("90m", "24h", "7d" for days) or an
// RFC 3339 time. A duration longer than a time.Duration holds (about 292 years) is refused, as
// time.ParseDuration refuses one in hours or minutes.
func ParseSince(v string, now time.Time) (time.Time, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.ParseInt(days, 10, 64); err == nil && n >= 0 && n <= maxSinceDays {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("since %q: want a duration such as 90m, 24h or 7d, or an RFC 3339 time", v)
}

func (s *Server) apiEvidence(w http.ResponseWriter, r *http.Request) {
	f, err := EvidenceQuery(r.URL.Query(), s.now())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	rows, err := s.Store.ListEvidence(r.Context(), f)
	if err != nil {
		s.log().Warn("admin: list evidence", "err", err)
		w.Header().Set("Retry-After", storeRetryAfter)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "store unavailable"})
		return
	}
	page := EvidencePage{Evidence: ViewEvidence(rows), LastID: f.AfterID}
	for _, e := range rows {
		page.LastID = max(page.LastID, e.ID)
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *Server) summary(ctx context.Context, since time.Duration, buckets int) (Summary, error) {
	now := s.now()
	return Summarize(ctx, s.Store, SummaryOptions{Since: now.Add(-since), Now: now, Configured: s.Configured,
		Health: s.Health, Buckets: buckets})
}

func (s *Server) apiSummary(w http.ResponseWriter, r *http.Request) {
	since := 24 * time.Hour
	if v := r.URL.Query().Get("since"); v != "" {
		t, err := ParseSince(v, s.now())
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		since = s.now().Sub(t)
	}
	sum, err := s.summary(r.Context(), since, 0)
	if err != nil {
		s.log().Warn("admin: summary", "err", err)
		w.Header().Set("Retry-After", storeRetryAfter)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "store unavailable"})
		return
	}
	writeJSON(w, http.StatusOK, sum)
}

// storeRetryAfter is the Retry-After of an answer the store could not give.
const storeRetryAfter = "5"

// writeJSON answers with v, each 64 KiB of it to be taken within 30 s and the whole at boundedwrite.MinRate.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = boundedwrite.Write(w, append(b, '\n'), 0)
}
