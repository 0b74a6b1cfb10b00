// Package outage keeps a polling loop quiet and patient while what it polls (the store, mostly)
// fails: the loop waits longer after each failure in a row, up to a cap, and logs the first
// failure, then a line now and then while they go on, and one when a call succeeds again. A
// 20-second database restart used to log several lines a second per loop.
package outage

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Defaults of a Tracker's zero fields.
const (
	DefaultFirstWait = time.Second
	DefaultMaxWait   = 10 * time.Second
	DefaultLogEvery  = time.Minute
)

// Tracker follows one loop's failures in a row. It is safe for concurrent use (a loop of several
// goroutines shares one).
type Tracker struct {
	// Name starts every line it logs ("delivery: claim").
	Name string
	Log  *slog.Logger
	// FirstWait is the wait after the first failure; it doubles with each further one, up to
	// MaxWait. LogEvery bounds how often a failure in a row is logged after the first.
	FirstWait, MaxWait, LogEvery time.Duration
	// Warn logs the failures at WARN instead of ERROR: for a loop whose single failure is
	// routine (a long-lived connection lost and made again).
	Warn bool

	mu       sync.Mutex
	failures int
	level    int       // failures that lengthened the wait: those of calls begun after the last failure
	last     time.Time // the last failure
	since    time.Time // the first failure of the current run
	logged   time.Time // the last failure logged
	retryAt  time.Time // the end of the wait Failed returned last
}

// Failed records the failure of a call begun just now (a loop of one caller); see FailedSince.
func (t *Tracker) Failed(err error) time.Duration { return t.FailedSince(time.Now(), err) }

// FailedSince records the failure of a call begun at start and returns how long the loop should
// wait before its next try (the loop waits the longer of that and its own poll). Only a call
// begun after the last failure lengthens the wait: the calls of several callers in flight when
// the store went away fail together, and count as one. It logs the first failure of a run at
// ERROR (WARN with Warn), and another at most every LogEvery, with how many there were and since
// when.
func (t *Tracker) FailedSince(start time.Time, err error) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	t.failures++
	if t.failures == 1 || !start.Before(t.last) {
		t.level++
	}
	t.last = now
	level := slog.LevelError
	if t.Warn {
		level = slog.LevelWarn
	}
	switch {
	case t.failures == 1:
		t.since, t.logged = now, now
		t.log().Log(context.Background(), level, t.Name, "err", err)
	case now.Sub(t.logged) >= or(t.LogEvery, DefaultLogEvery):
		t.logged = now
		t.log().Log(context.Background(), level, t.Name+": still failing", "err", err, "failures", t.failures,
			"for", now.Sub(t.since).Round(time.Second).String())
	}
	wait := or(t.FirstWait, DefaultFirstWait)
	for i := 1; i < t.level && wait < or(t.MaxWait, DefaultMaxWait); i++ {
		wait *= 2
	}
	wait = min(wait, or(t.MaxWait, DefaultMaxWait))
	t.retryAt = now.Add(wait)
	return wait
}

// Waiting reports whether the wait the last failure asked for still runs: a loop of several
// callers (claimers woken by hints and polls) skips its call until it is over.
func (t *Tracker) Waiting() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failures > 0 && time.Now().Before(t.retryAt)
}

// LastFailure returns when the last failure was recorded (the zero time if none was).
func (t *Tracker) LastFailure() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// Succeeded ends a run of failures, logging once that it ended.
func (t *Tracker) Succeeded() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failures == 0 {
		return
	}
	t.log().Info(t.Name+": store reachable again", "failures", t.failures,
		"for", time.Since(t.since).Round(time.Second).String())
	t.failures, t.level = 0, 0
}

// Failing reports how many failures in a row there have been (0: the last call succeeded).
func (t *Tracker) Failing() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failures
}

func (t *Tracker) log() *slog.Logger {
	if t.Log == nil {
		return slog.Default()
	}
	return t.Log
}

func or(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
