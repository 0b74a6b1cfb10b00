package outage_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/internal/outage"
)

// records is a slog handler that keeps what it is given.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		out = append(out, rec.Level.String()+" "+rec.Message)
	}
	return out
}

// A run of failures logs its first, then one a LogEvery while it lasts, and one line when a
// call succeeds again; the wait doubles from FirstWait up to MaxWait, and starts over after.
func TestATrackerLogsARunOfFailuresOnceAndBacksOff(t *testing.T) {
	log := &records{}
	tr := &outage.Tracker{Name: "loop", Log: slog.New(log), FirstWait: 10 * time.Millisecond, MaxWait: 80 * time.Millisecond,
		LogEvery: time.Hour}
	down := errors.New("connection refused")
	var waits []time.Duration
	for range 100 {
		waits = append(waits, tr.Failed(down))
	}
	want := []time.Duration{10, 20, 40, 80, 80}
	for i, w := range want {
		if waits[i] != w*time.Millisecond {
			t.Fatalf("waits %v, want %v ms then 80 ms", waits[:5], want)
		}
	}
	if !tr.Waiting() {
		t.Error("not waiting right after a failure")
	}
	if got := log.messages(); len(got) != 1 || got[0] != "ERROR loop" {
		t.Fatalf("100 failures logged %q, want the first only", got)
	}
	tr.Succeeded()
	tr.Succeeded()
	if got := log.messages(); len(got) != 2 || got[1] != "INFO loop: store reachable again" {
		t.Fatalf("recovery logged %q, want one line", got)
	}
	if tr.Waiting() || tr.Failing() != 0 {
		t.Error("still waiting after a success")
	}
	if w := tr.Failed(down); w != 10*time.Millisecond {
		t.Fatalf("the first failure of a new run waits %v, want 10ms", w)
	}

	tr.LogEvery = 20 * time.Millisecond
	for range 5 {
		time.Sleep(25 * time.Millisecond)
		tr.Failed(down)
	}
	if n := len(log.messages()); n < 5 || n > 8 {
		t.Fatalf("a run of failures 25 ms apart with LogEvery 20 ms logged %d lines in all: %q", n, log.messages())
	}
}
