package operator

import (
	"testing"
)

// ProbeAlways lets readiness try its write at every check for the rest of t.
func ProbeAlways(t *testing.T) {
	old := probeEvery
	probeEvery = 0
	t.Cleanup(func() { probeEvery = old })
}
