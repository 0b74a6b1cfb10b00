package operator

import (
	"errors"
	"testing"
	"time"
)

// Failed writes make the store a suspect however far apart they came (a quiet server writes
// seldom); readiness then probes at most once per probeEvery, outside its lock, so a failing write
// and another check never wait for a probe in flight; a probe that writes clears it.
func TestWriteHealthProbesOnceSuspectedAndNeverHoldsOthers(t *testing.T) {
	var w writeHealth
	full := errors.New("disk full")
	probes := 0
	failing := func() error { probes++; return full }
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range 2 {
		w.record(full)
		now = now.Add(10 * time.Minute) // far apart
		if err := w.check(now, failing); err != nil || probes != 0 {
			t.Fatalf("after %d failures: %v, %d probes", i+1, err, probes)
		}
	}
	w.record(full)
	if err := w.check(now, failing); !errors.Is(err, full) || probes != 1 {
		t.Fatalf("after 3 failures: %v, %d probes; want the probe's failure, 1 probe", err, probes)
	}
	if err := w.check(now.Add(probeEvery/2), failing); !errors.Is(err, full) || probes != 1 {
		t.Fatalf("within probeEvery: %v, %d probes; want the last outcome, no new probe", err, probes)
	}

	// A probe in flight holds neither a failing write nor another check.
	release, started := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- w.check(now.Add(2*probeEvery), func() error { close(started); <-release; return nil })
	}()
	<-started
	recorded := make(chan struct{})
	go func() { w.record(full); close(recorded) }()
	select {
	case <-recorded:
	case <-time.After(5 * time.Second):
		t.Fatal("a failing write waited for the probe in flight")
	}
	if err := w.check(now.Add(3*probeEvery), failing); err == nil || probes != 1 {
		t.Fatalf("a check while a probe is in flight: %v, %d probes; want unready, no second probe", err, probes)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the probe wrote, yet the check answered %v", err)
	}
	if err := w.check(now.Add(4*probeEvery), failing); err != nil || probes != 1 {
		t.Fatalf("after a probe that wrote: %v, %d probes; want ready and no probe", err, probes)
	}
}
