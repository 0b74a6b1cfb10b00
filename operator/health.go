package operator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/channels-dev/channels/sources"
)

// Health statuses of a source instance.
const (
	// StatusOK: the last check passed.
	StatusOK = "ok"
	// StatusFailing: the check fails, for less than the failure window so far.
	StatusFailing = "failing"
	// StatusUnhealthy: the check has failed for longer than the failure window: /readyz answers
	// 503 until it passes again.
	StatusUnhealthy = "unhealthy"
	// StatusConnecting: the check has not passed since start-up: /readyz answers 503.
	StatusConnecting = "connecting"
	// StatusUnknown: not checked yet.
	StatusUnknown = "unknown"
	// StatusUnchecked: the source cannot tell (no sources.HealthChecker); it counts as healthy.
	StatusUnchecked = "unchecked"
)

// SourceHealth is the tracked health of one configured source instance.
type SourceHealth struct {
	Source   string `json:"source"`
	Instance string `json:"instance"`
	Status   string `json:"status"`
	// Error is the last failed check's error ("" when it passed).
	Error string `json:"error,omitempty"`
	// FailingSince is when the current run of failed checks began (zero while healthy).
	FailingSince time.Time `json:"failingSince,omitzero"`
	LastCheck    time.Time `json:"lastCheck,omitzero"`
	LastOK       time.Time `json:"lastOk,omitzero"`
}

// Healthy reports whether the instance counts as healthy (ok, or unable to tell).
func (s SourceHealth) Healthy() bool { return s.Status == StatusOK || s.Status == StatusUnchecked }

// Ready reports whether the instance lets /readyz answer 200: healthy, or failing for less than
// the window after having been healthy (connected).
func (s SourceHealth) Ready() bool { return s.Healthy() || s.Status == StatusFailing }

// Health tracks the health of the configured source instances over time: a probe (a
// sources.Host's Healths) runs every interval, and an instance that keeps failing for longer
// than the window turns /readyz unready until it passes again. An instance whose check has not
// passed since start-up is not connected yet, and not ready.
type Health struct {
	probe    func(ctx context.Context) []sources.InstanceHealth
	interval time.Duration
	window   time.Duration
	now      func() time.Time
	started  time.Time

	mu    sync.Mutex
	state []SourceHealth
}

// HealthOption configures a Health.
type HealthOption func(*Health)

// WithHealthClock sets the clock (tests).
func WithHealthClock(now func() time.Time) HealthOption { return func(h *Health) { h.now = now } }

// NewHealth returns a tracker over probe. Nothing is checked until Check or Run.
func NewHealth(probe func(ctx context.Context) []sources.InstanceHealth, interval, window time.Duration, opts ...HealthOption) *Health {
	h := &Health{probe: probe, interval: interval, window: window, now: time.Now}
	for _, o := range opts {
		o(h)
	}
	h.started = h.now()
	return h
}

// checkTimeout bounds one round of health checks.
const checkTimeout = 5 * time.Second

// Check runs the probe once and updates every instance's state.
func (h *Health) Check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	results := h.probe(ctx)
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	prev := map[string]SourceHealth{}
	for _, s := range h.state {
		prev[s.Source+"/"+s.Instance] = s
	}
	next := make([]SourceHealth, len(results))
	for i, r := range results {
		s, ok := prev[r.Source+"/"+r.Instance]
		if !ok {
			s = SourceHealth{Source: r.Source, Instance: r.Instance}
		}
		s.LastCheck = now
		switch {
		case !r.Checks:
			s.Status, s.Error, s.FailingSince = StatusUnchecked, "", time.Time{}
		case r.Err == nil:
			s.Status, s.Error, s.FailingSince, s.LastOK = StatusOK, "", time.Time{}, now
		default:
			s.Error = r.Err.Error()
			if s.FailingSince.IsZero() {
				s.FailingSince = now
				if s.LastOK.IsZero() {
					s.FailingSince = h.started
				}
			}
			switch {
			case s.LastOK.IsZero():
				s.Status = StatusConnecting
			case now.Sub(s.FailingSince) >= h.window:
				s.Status = StatusUnhealthy
			default:
				s.Status = StatusFailing
			}
		}
		next[i] = s
	}
	h.state = next
}

// Run checks at once, then every interval, until ctx ends.
func (h *Health) Run(ctx context.Context) {
	h.Check(ctx)
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.Check(ctx)
		}
	}
}

// Sources returns every instance's state, in configuration order.
func (h *Health) Sources() []SourceHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]SourceHealth(nil), h.state...)
}

// Source returns the combined status of the instances of one source: the worst of them, or ""
// when none is configured.
func (h *Health) Source(name string) string {
	rank := map[string]int{StatusUnchecked: 0, StatusOK: 1, StatusUnknown: 2, StatusFailing: 3, StatusConnecting: 4, StatusUnhealthy: 5}
	worst := ""
	for _, s := range h.Sources() {
		if s.Source == name && (worst == "" || rank[s.Status] > rank[worst]) {
			worst = s.Status
		}
	}
	return worst
}

// WaitConnected checks every poll until no instance is connecting or unknown, or until timeout
// (start-up: a source connects moments after it starts).
func (h *Health) WaitConnected(ctx context.Context, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		h.Check(ctx)
		waiting := false
		for _, s := range h.Sources() {
			waiting = waiting || s.Status == StatusConnecting || s.Status == StatusUnknown
		}
		if !waiting || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Unready returns why /readyz must answer 503 because of sources ("" entries never; nil when
// every instance is ready).
func (h *Health) Unready() []string {
	var out []string
	for _, s := range h.Sources() {
		if !s.Ready() {
			what := "failing since " + s.FailingSince.UTC().Format(time.RFC3339)
			if s.Status == StatusConnecting {
				what = "not connected since start-up"
			}
			out = append(out, fmt.Sprintf("source %s %s %s: %s", s.Source, s.Instance, what, s.Error))
		}
	}
	return out
}
