package postgres

import (
	"sync/atomic"
	"testing"
	"time"
)

// The store's monotonic clock counts the time the host was suspended (which Go's monotonic clock
// does not) once it samples the boot clock, and it never goes back.
func TestTheElapsedClockCountsASuspend(t *testing.T) {
	var boot atomic.Int64 // a fake CLOCK_BOOTTIME: real time, plus the suspends put into it
	start := time.Now()
	boot.Store(int64(time.Hour))
	c := &suspendClock{start: start, boot: func() time.Duration {
		return time.Duration(boot.Load()) + time.Since(start)
	}}
	c.bootStart = c.boot()
	before := c.elapsed()
	c.sample() // no suspend: nothing added
	if d := c.elapsed() - before; d < 0 || d > 100*time.Millisecond {
		t.Fatalf("a sample without a suspend moved the clock by %v", d)
	}
	boot.Add(int64(10 * time.Second)) // the host was suspended 10 s (counted from the boot clock's first reading, a moment after start)
	c.sample()
	if d := c.elapsed() - before; d < 10*time.Second-time.Millisecond || d > 11*time.Second {
		t.Fatalf("after a 10 s suspend the clock moved %v, want about 10 s", d)
	}
	after := c.elapsed()
	c.sample()
	if c.elapsed() < after {
		t.Fatal("a second sample moved the clock back")
	}
	if real := bootTime(); real <= 0 {
		t.Fatalf("CLOCK_BOOTTIME unreadable here: %v", real)
	}
}
