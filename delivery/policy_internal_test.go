package delivery

import (
	"testing"
	"time"
)

// The default policy keeps retrying an answer for long enough to outlive a provider outage of
// many minutes: its waits add up to at least 15 minutes even with every one at its lowest jitter
// (about 40 minutes nominal), not the two minutes of 8 attempts doubling from 1 s.
func TestTheDefaultRetriesSpanAtLeastAQuarterOfAnHour(t *testing.T) {
	p := DefaultPolicy.withDefaults()
	var total time.Duration
	for n := 1; ; n++ {
		d, ok := p.next(n)
		if !ok {
			break
		}
		total += d
	}
	if total < 15*time.Minute {
		t.Fatalf("the default policy's retries span %s", total)
	}
}
