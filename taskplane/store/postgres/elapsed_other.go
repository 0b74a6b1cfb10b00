//go:build !linux

package postgres

import "time"

// newElapsed returns Go's monotonic clock (the time since its call); there is nothing to sample.
func newElapsed() (elapsed func() time.Duration, sample func()) {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }, func() {}
}
