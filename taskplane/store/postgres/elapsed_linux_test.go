package postgres

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The store's monotonic clock is CLOCK_BOOTTIME on Linux (it keeps counting while the host is
// suspended, which cannot be shown here) and keeps time with Go's own.
func TestTheElapsedClockIsBootTime(t *testing.T) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Skip("no CLOCK_BOOTTIME:", err)
	}
	before, start := ts.Nano(), time.Now()
	el := newElapsed()
	time.Sleep(50 * time.Millisecond)
	got := el()
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Fatal(err)
	}
	if boot := time.Duration(ts.Nano() - before); got <= 0 || got > boot {
		t.Fatalf("elapsed %v, outside the boot clock's %v over the same time", got, boot)
	}
	if d := (got - time.Since(start)).Abs(); d > 20*time.Millisecond {
		t.Fatalf("elapsed %v differs from time.Since by %v", got, d)
	}
}
