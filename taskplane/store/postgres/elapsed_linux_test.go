package postgres

import (
	"sync/atomic"
	"testing"
	"time"
)

// The store's monotonic clock counts the time the host was suspended (which Go's monotonic clock
// does not) once it samples the boot clock, and never goes back, also when the boot clock reads
// a little behind.
func TestTheElapsedClockCountsASuspend(t *testing.T) {
	var boot atomic.Int64 // a fake CLOCK_BOOTTIME: real time, plus the suspends put into it
	start := time.Now()
	boot.Store(int64(time.Hour))
	c := &suspendClock{start: start, bootStart: time.Hour, boot: func() time.Duration {
		return time.Duration(boot.Load()) + time.Since(start)
	}}
	before := c.elapsed()
	c.sample() // no suspend: nothing added
	if d := c.elapsed() - before; d < 0 || d > 100*time.Millisecond {
		t.Fatalf("a sample without a suspend moved the clock by %v", d)
	}
	boot.Add(int64(10 * time.Second)) // the host was suspended 10 s
	c.sample()
	if d := c.elapsed() - before; d < 10*time.Second || d > 11*time.Second {
		t.Fatalf("after a 10 s suspend the clock moved %v, want about 10 s", d)
	}
	boot.Add(-int64(5 * time.Millisecond)) // a reading a little behind the last
	after := c.elapsed()
	c.sample()
	if now := c.elapsed(); now < after {
		t.Fatalf("a sample moved the clock back by %v", after-now)
	}
	if real := bootTime(); real <= 0 {
		t.Fatalf("CLOCK_BOOTTIME unreadable here: %v", real)
	}
}
