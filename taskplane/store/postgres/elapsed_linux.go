package postgres

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// newElapsed returns a monotonic clock that also counts the time the host spends suspended: Go's
// monotonic clock (as cheap as time.Now) plus the time CLOCK_BOOTTIME has counted beyond it,
// sampled every sampleEvery (a system call each, so not on every reading). After a suspend, the
// store's Now must not lag the database's clock by the time the host was away, or the leases it
// writes end early for every other process; it lags for at most sampleEvery.
func newElapsed() (elapsed func() time.Duration, sample func()) {
	c := &suspendClock{start: time.Now(), boot: bootTime}
	c.bootStart = c.boot()
	return c.elapsed, c.sample
}

// suspendClock is Go's monotonic clock plus the suspended time CLOCK_BOOTTIME counts beyond it.
type suspendClock struct {
	start     time.Time
	boot      func() time.Duration // CLOCK_BOOTTIME (tests fake it); 0 if unreadable
	bootStart time.Duration
	suspended atomic.Int64 // ns; only grows
}

func (c *suspendClock) elapsed() time.Duration {
	return time.Since(c.start) + time.Duration(c.suspended.Load())
}

// sample adds any time the boot clock counted beyond Go's monotonic clock since the last sample.
// Jitter between the two readings below a millisecond is left out, so the clock never goes back.
func (c *suspendClock) sample() {
	boot := c.boot()
	if boot == 0 || c.bootStart == 0 {
		return
	}
	s := (boot - c.bootStart) - time.Since(c.start)
	if s > time.Duration(c.suspended.Load())+time.Millisecond {
		c.suspended.Store(int64(s))
	}
}

func bootTime() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
