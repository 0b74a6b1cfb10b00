package delivery

import (
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/channels-dev/channels/taskplane/store"
)

// Policy is the retry policy: capped exponential backoff with jitter and a bounded number of
// attempts (cenkalti/backoff/v4). A provider's Retry-After is honoured instead of the backoff and
// does not count as an attempt.
type Policy struct {
	// MaxAttempts bounds the provider calls of one delivery (default 16). When a retryable failure
	// uses the last one the delivery fails; when an unknown outcome does, it becomes ambiguous.
	// It also bounds consecutive failed lookups of a delivery left in sending.
	MaxAttempts int
	// InitialInterval is the wait after the first failure (default 1s).
	InitialInterval time.Duration
	// MaxInterval caps one wait (default 5m).
	MaxInterval time.Duration
	// Multiplier grows the wait per attempt (default 2).
	Multiplier float64
	// RandomizationFactor spreads each wait by ± this fraction (default 0.5), so deliveries
	// that failed together do not retry together.
	RandomizationFactor float64
	// MinRetryAfter and MaxRetryAfter bound a provider's Retry-After (default 1s and 1h): a
	// provider asking for 0 does not make the engine spin, one asking for a day does not park a
	// delivery for a day.
	MinRetryAfter time.Duration
	MaxRetryAfter time.Duration
	// MaxRetryAfters bounds the Retry-After snoozes of one delivery, sends and lookups together
	// (default 4 × MaxAttempts), and MaxRetryAfterTotal the time they wait in all (default 24h):
	// a wait is granted whole while the total is not reached, so the last may pass it.
	// A Retry-After that comes when either is used up settles the delivery as attempts running
	// out do: failed, or ambiguous when an earlier outcome was unknown (or when it was a lookup
	// that was put off). An operator's retry starts both afresh.
	MaxRetryAfters     int
	MaxRetryAfterTotal time.Duration
	// LookupGrace is how long a lookup-class delivery waits to be looked up after a send whose
	// outcome is unknown because the provider never answered (a timeout, a reset; default 1m):
	// the provider may still be working on the request the engine gave up on, and a lookup made
	// before it lands would read "not found" and post the answer again. After an answer that
	// leaves the outcome unknown (a 5xx) the lookup waits InitialInterval.
	LookupGrace time.Duration
}

// DefaultPolicy is the policy of an engine built without WithPolicy: its retries span about 40
// minutes (1 s doubling to the 5-minute cap), so an answer outlives a provider outage of that
// long rather than of two minutes.
var DefaultPolicy = Policy{
	MaxAttempts:         16,
	InitialInterval:     time.Second,
	MaxInterval:         5 * time.Minute,
	Multiplier:          2,
	RandomizationFactor: 0.5,
	MinRetryAfter:       time.Second,
	MaxRetryAfter:       time.Hour,
	MaxRetryAfterTotal:  24 * time.Hour,
	LookupGrace:         time.Minute,
	// MaxRetryAfters: 0, that is 4 × MaxAttempts.
}

// withDefaults fills zero fields from DefaultPolicy.
func (p Policy) withDefaults() Policy {
	d := DefaultPolicy
	if p.MaxAttempts > 0 {
		d.MaxAttempts = p.MaxAttempts
	}
	if p.InitialInterval > 0 {
		d.InitialInterval = p.InitialInterval
	}
	if p.MaxInterval > 0 {
		d.MaxInterval = p.MaxInterval
	}
	if p.Multiplier >= 1 {
		d.Multiplier = p.Multiplier
	}
	if p.RandomizationFactor > 0 {
		d.RandomizationFactor = p.RandomizationFactor
	}
	if p.MinRetryAfter > 0 {
		d.MinRetryAfter = p.MinRetryAfter
	}
	if p.MaxRetryAfter > 0 {
		d.MaxRetryAfter = p.MaxRetryAfter
	}
	d.MaxRetryAfters = 4 * d.MaxAttempts
	if p.MaxRetryAfters > 0 {
		d.MaxRetryAfters = p.MaxRetryAfters
	}
	if p.MaxRetryAfterTotal > 0 {
		d.MaxRetryAfterTotal = p.MaxRetryAfterTotal
	}
	if p.LookupGrace > 0 {
		d.LookupGrace = p.LookupGrace
	}
	return d
}

// next returns the wait before the call after the n-th failure (n ≥ 1), and false when n failures
// exhaust MaxAttempts. The row keeps the count, not the backoff object, so a wait is recomputed
// from n: a restarted process continues the same schedule.
func (p Policy) next(n int) (time.Duration, bool) {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.InitialInterval),
		backoff.WithMaxInterval(p.MaxInterval),
		backoff.WithMultiplier(p.Multiplier),
		backoff.WithRandomizationFactor(p.RandomizationFactor),
		backoff.WithMaxElapsedTime(0), // attempts bound it, not wall time
	)
	bounded := backoff.WithMaxRetries(b, uint64(max(p.MaxAttempts-1, 0)))
	d := backoff.Stop
	for range max(n, 1) {
		if d = bounded.NextBackOff(); d == backoff.Stop {
			return 0, false
		}
	}
	return d, true
}

// snoozesLeft reports whether a delivery that has snoozed n times, waiting waited in all, may
// snooze once more.
func (p Policy) snoozesLeft(n int, waited time.Duration) bool {
	return n < p.MaxRetryAfters && waited < p.MaxRetryAfterTotal
}

// retryAfter bounds a provider's Retry-After.
func (p Policy) retryAfter(d time.Duration) time.Duration {
	return min(max(d, p.MinRetryAfter), p.MaxRetryAfter)
}

// stuckMargin is how long past the longest wait an engine may take to come back to a delivery.
const stuckMargin = 5 * time.Minute

// unleasedStuckAfter is how long a delivery released in sending (an unknown outcome, its repeat
// or lookup scheduled) may go without a recorded step before it counts as stuck: longer than the
// longest backoff or Retry-After an engine waits before its next step, plus a margin.
func (p Policy) unleasedStuckAfter() time.Duration {
	return max(p.MaxInterval, p.MaxRetryAfter, p.LookupGrace) + stuckMargin
}

// UnleasedStuckAfter is how long a delivery in sending under no lease (released after an unknown
// outcome) may go without a recorded step, under the default policy, before it counts as stuck:
// longer than any repeat or lookup of an engine routing its source waits. Operators may then
// resolve it.
func UnleasedStuckAfter() time.Duration { return DefaultPolicy.withDefaults().unleasedStuckAfter() }

// lastStep is when the last step of d was recorded (its creation when none was).
func lastStep(d store.Delivery, attempts []store.DeliveryAttempt) time.Time {
	last := d.CreatedAt
	for _, a := range attempts {
		if a.CreatedAt.After(last) {
			last = a.CreatedAt
		}
	}
	return last
}
