package postgres

import (
	"context"
	"net/url"
	"sync/atomic"
	"time"
)

// OpenOnSuspendedHost opens a Store as Open does, on a host just back from a suspend of lag that
// the store has not sampled yet: Go's monotonic clock is lag behind its boot clock. suspend adds
// to its boot clock as a further suspend would (the database's clock does not see it).
func OpenOnSuspendedHost(ctx context.Context, u *url.URL, lag time.Duration) (s *Store, suspend func(time.Duration), err error) {
	var extra atomic.Int64
	clock := func() (func() time.Duration, func()) {
		start := time.Now().Add(lag) // Go's monotonic clock, lag behind
		c := &suspendClock{start: start, bootStart: time.Hour, boot: func() time.Duration {
			return time.Hour + time.Since(start) + lag + time.Duration(extra.Load())
		}}
		return c.elapsed, c.sample
	}
	s, err = open(ctx, u, time.Now, clock)
	return s, func(d time.Duration) { extra.Add(int64(d)) }, err
}
