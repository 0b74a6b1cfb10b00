package operator

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/channels-dev/channels/internal/boundedwrite"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

//go:embed web/dashboard.html
var templateFS embed.FS

//go:embed web/static
var embedded embed.FS

// staticFS serves web/static at /admin/static/.
var staticFS = func() fs.FS {
	sub, err := fs.Sub(embedded, "web")
	if err != nil {
		panic(err)
	}
	return sub
}()

// DashboardWindow is the span of the dashboard's counts and charts.
const DashboardWindow = 24 * time.Hour

// dashboardBuckets is the number of bars of a chart: one per hour.
const dashboardBuckets = 24

// recentEvidence is how many evidence records the dashboard lists.
const recentEvidence = 50

var dashboardTmpl = template.Must(template.New("dashboard.html").Funcs(template.FuncMap{
	"ago":   ago,
	"utc":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05") },
	"num":   num,
	"short": func(s string, n int) string {
		if r := []rune(s); len(r) > n {
			return string(r[:n-1]) + "…"
		}
		return s
	},
	"kindClass": kindClass,
	"half":      func(f float64) float64 { return f / 2 },
}).ParseFS(templateFS, "web/dashboard.html"))

type stat struct {
	Label string
	Value int64
	// Warn marks a count that is bad news when non-zero.
	Warn bool
}

type card struct {
	SourceSummary
	HealthLabel string
	HealthClass string
	Problems    []SourceHealth
	Chart       chart
	Stats       []stat
	Deliveries  []stat
}

type dashboardData struct {
	Now        time.Time
	Ready      Readiness
	Summary    Summary
	Cards      []card
	Evidence   []EvidenceView
	Refresh    int
	Window     string
	Unhealthy  int
	Attention  int
	AllSources int
}

func (s *Server) dashboard(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sum, err := s.summary(ctx, DashboardWindow, dashboardBuckets)
	if err != nil {
		s.log().Warn("admin: dashboard summary", "err", err)
		w.Header().Set("Retry-After", storeRetryAfter)
		http.Error(w, "the store is unavailable; see /readyz", http.StatusServiceUnavailable)
		return
	}
	rows, err := s.Store.ListEvidence(ctx, store.EvidenceFilter{Limit: recentEvidence})
	if err != nil {
		s.log().Warn("admin: dashboard evidence", "err", err)
		w.Header().Set("Retry-After", storeRetryAfter)
		http.Error(w, "the store is unavailable; see /readyz", http.StatusServiceUnavailable)
		return
	}
	d := dashboardData{Now: sum.GeneratedAt, Ready: s.Check(ctx), Summary: sum, Evidence: ViewEvidence(rows),
		Refresh: int(s.Refresh / time.Second), Window: "24 hours", Attention: len(sum.Attention)}
	for _, src := range sum.Sources {
		c := card{SourceSummary: src, Chart: drawChart(src.Series, sum.Buckets, sum.BucketWidth, sum.GeneratedAt)}
		c.HealthLabel, c.HealthClass = healthBadge(src)
		for _, h := range src.HealthDetail {
			if !h.Healthy() {
				c.Problems = append(c.Problems, h)
			}
		}
		if c.HealthClass == "bad" {
			d.Unhealthy++
		}
		n := src.Counts
		// Rows of five: what came in, what was refused or failed on the way, what became of it
		// (the deliveries that settled in the window).
		// Settlements (a settling send's, or the worker API's) are what became of finished tasks,
		// not all events taken in: they go with the work.
		c.Stats = []stat{
			{"accepted", n.Accepted, false}, {"continued", n.Continued, false}, {"duplicates", n.Duplicates, false},
			{"non-work", n.NonWork, false}, {"anchor misses", n.AnchorMisses, false},
			{"malformed", n.Malformed, true}, {"rejected", n.Rejected, true}, {"conflicts", n.Conflicts, true},
			{"wake failed", n.WakeFailed, true}, {"delivery failed", n.DeliveryFail, true},
			{"woken", n.Woken, false}, {"settled", n.Settled, false}, {"delivered", n.Delivered, false},
			{"ambiguous", n.Ambiguous, true},
		}
		for _, st := range DeliveryStates {
			c.Deliveries = append(c.Deliveries, stat{Label: string(st), Value: src.Deliveries[string(st)],
				Warn: st == store.DeliveryAmbiguous || st == store.DeliveryFailed})
		}
		d.Cards = append(d.Cards, c)
	}
	d.AllSources = len(d.Cards)
	var buf bytes.Buffer
	if err := dashboardTmpl.Execute(&buf, d); err != nil {
		s.log().Error("admin: render dashboard", "err", err)
		http.Error(w, "could not render the dashboard", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	_ = boundedwrite.Write(w, buf.Bytes(), 0)
}

// healthBadge is the label and CSS class of a source's health.
func healthBadge(s SourceSummary) (label, class string) {
	switch s.Health {
	case StatusOK:
		return "healthy", "ok"
	case StatusUnchecked:
		return "running", "ok"
	case StatusFailing:
		return "failing", "warn"
	case StatusUnhealthy:
		return "unhealthy", "bad"
	case StatusConnecting:
		return "not connected", "bad"
	case StatusUnknown:
		return "checking", "muted"
	}
	if s.Source == taskplane.SourceA2A {
		return "serving", "ok" // the bindings run in this process
	}
	if len(s.Instances) > 0 {
		return "configured", "muted"
	}
	return "not configured", "muted"
}

// kindClass colors an evidence kind in the recent evidence table.
func kindClass(kind string) string {
	switch {
	case kind == "accepted" || kind == "continued" || kind == "woken" || kind == "delivery-delivered" || kind == "delivery-reconciled":
		return "k-good"
	case kind == "duplicate" || kind == "non-work" || kind == "retention" || kind == "settled":
		return "k-quiet"
	case strings.Contains(kind, "fail") || strings.Contains(kind, "conflict") || strings.Contains(kind, "ambiguous") ||
		kind == "malformed-envelope" || kind == "rejected" || kind == "unhealthy" || kind == "timeout":
		return "k-bad"
	}
	return "k-other"
}

// ago renders how long before now t was: "12s ago", "5m ago", "3h ago", "2d ago"; "never" for zero.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s ago"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m ago"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h ago"
	default:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d ago"
	}
}

// num renders a count with thin thousands separators.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	if len(s) <= 4 {
		return s
	}
	var b strings.Builder
	pre := len(s) % 3
	if pre > 0 {
		b.WriteString(s[:pre])
	}
	for i := pre; i < len(s); i += 3 {
		if b.Len() > 0 {
			b.WriteString("\u202f")
		}
		b.WriteString(s[i : i+3])
	}
	return b.String()
}
