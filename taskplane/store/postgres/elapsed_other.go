//go:build !linux

package postgres

import "time"

// newElapsed returns the time since its call on Go's monotonic clock.
func newElapsed() func() time.Duration { return sinceNow() }
