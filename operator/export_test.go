package operator

import (
	"testing"
	"time"
)

// ProbeAlways lets readiness try its write at every check for the rest of t.
func ProbeAlways(t *testing.T) {
	old := probeEvery
	probeEvery = 0
	t.Cleanup(func() { probeEvery = old })
}

// SettleAfter makes readiness wait d, not settleTime, for a store that relapsed, for the rest of t.
func SettleAfter(t *testing.T, d time.Duration) {
	old := settleTime
	settleTime = d
	t.Cleanup(func() { settleTime = old })
}
