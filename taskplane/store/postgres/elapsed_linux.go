package postgres

import (
	"time"

	"golang.org/x/sys/unix"
)

// newElapsed returns the time since its call on a monotonic clock that also counts while the
// host is suspended (CLOCK_BOOTTIME; Go's own monotonic clock stops then): after a suspend, the
// store's Now must not lag the database's clock by the time the host was away, or the leases it
// writes end early for every other process.
func newElapsed() func() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return sinceNow()
	}
	start := ts.Nano()
	fallback := sinceNow()
	return func() time.Duration {
		var ts unix.Timespec
		if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
			return fallback()
		}
		return time.Duration(ts.Nano() - start)
	}
}
