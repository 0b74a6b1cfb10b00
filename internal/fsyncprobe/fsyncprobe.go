// Package fsyncprobe measures how many durable writes a second a filesystem takes: the commit
// ceiling of one writer that waits for each of its commits to reach the disk.
package fsyncprobe

import (
	"fmt"
	"os"
	"time"
)

// Run writes and fsyncs a 512-byte block of a temporary file in dir for about d, and returns the
// fsyncs per second. The file is removed before Run returns.
func Run(dir string, d time.Duration) (float64, error) {
	f, err := os.CreateTemp(dir, ".channels-fsync-probe-")
	if err != nil {
		return 0, fmt.Errorf("fsync probe: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 512)
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		buf[0] = byte(n)
		if _, err := f.WriteAt(buf, 0); err != nil {
			return 0, fmt.Errorf("fsync probe: write: %w", err)
		}
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("fsync probe: fsync: %w", err)
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
