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
	full := error(diskFull{})
	probes := 0
	failing := func() error { probes++; return full }
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range 2 {
		w.record(now, full)
		now = now.Add(10 * time.Minute) // far apart
		if err := w.check(now, failing); err != nil || probes != 0 {
			t.Fatalf("after %d failures: %v, %d probes", i+1, err, probes)
		}
	}
	w.record(now, full)
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
	go func() { w.record(now, full); close(recorded) }()
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

// A store whose real writes fail while readiness's small write fits (a full disk with room left
// in the WAL's last pages) is not called ready between every three failures: a write failing soon
// after a probe cleared the store makes it unready again at once, and a probe clears it only once
// no write has failed for settleTime.
func TestAWriteFailingSoonAfterAProbeClearedTheStoreKeepsItUnready(t *testing.T) {
	var w writeHealth
	full := error(diskFull{})
	writes := func() error { return nil } // the probe's write fits
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for range writeFailuresUnready {
		w.record(now, full)
	}
	if err := w.check(now, writes); err != nil {
		t.Fatalf("a probe that wrote after the first failures: %v, want ready", err)
	}
	// Every second, a real write fails and readiness is asked a moment later.
	for i := range 10 {
		now = now.Add(time.Second)
		w.record(now, full)
		if err := w.check(now.Add(50*time.Millisecond), writes); err == nil {
			t.Fatalf("round %d: ready while every real write fails", i)
		}
	}
	// The writes stop failing (space came back): ready once none has failed for settleTime.
	if err := w.check(now.Add(settleTime/2), writes); err == nil {
		t.Fatal("ready before the writes settled")
	}
	now = now.Add(settleTime + time.Second)
	if err := w.check(now, writes); err != nil {
		t.Fatalf("no write failed for %s: %v, want ready", settleTime+time.Second, err)
	}
	// Long after that clearance a single failure is a blip again, not a relapse.
	now = now.Add(relapseWindow + time.Second)
	w.record(now, full)
	if err := w.check(now, writes); err != nil {
		t.Fatalf("one failure %s after the store was cleared: %v, want ready", relapseWindow, err)
	}
}

// Readiness asked every second for half an hour of writes failing every n seconds, the probe's
// small write always fitting: a store that refuses every real write reads unready (all of the
// last ten minutes, whatever the pace of its traffic up to every two minutes), while a busy store
// whose real writes commit between its occasional failures reads ready throughout; and once the
// failures stop, readiness returns within the longest settle time.
func TestReadinessTellsAStoreRefusingEveryWriteFromABusyOneWithBlips(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	fits := func() error { return nil }
	full := error(diskFull{})
	const span = 30 * 60 // seconds
	for _, n := range []int{1, 3, 10, 30, 120} {
		var w writeHealth
		lateReady := 0
		for s := 0; s < span; s++ {
			now := start.Add(time.Duration(s) * time.Second)
			if s%n == 0 {
				w.record(now, full)
			}
			if w.check(now.Add(500*time.Millisecond), fits) == nil && s >= span-600 {
				lateReady++
			}
		}
		if lateReady > 0 {
			t.Errorf("every real write failing, one each %ds: ready at %d of the last 600 checks", n, lateReady)
		}
		// The failures stop (space came back, no traffic): ready within the longest settle.
		end := start.Add(span * time.Second)
		for s := 0; ; s++ {
			if w.check(end.Add(time.Duration(s)*time.Second), fits) == nil {
				break
			}
			if time.Duration(s)*time.Second > maxSettle+2*probeEvery {
				t.Fatalf("one failure each %ds, then none: still unready %ds later", n, s)
			}
		}
	}

	var w writeHealth
	for s := 0; s < span; s++ {
		now := start.Add(time.Duration(s) * time.Second)
		if s%3 == 0 {
			w.record(now, full)
		} else {
			w.wrote() // traffic's writes commit between the blips
		}
		if err := w.check(now.Add(500*time.Millisecond), fits); err != nil {
			t.Fatalf("a busy store with a failed write every 3s: unready at %ds: %v", s, err)
		}
	}
}

// diskFull is Postgres's disk-full error (SQLSTATE 53100): a storage fault.
type diskFull struct{}

func (diskFull) Error() string    { return "could not extend file: No space left on device" }
func (diskFull) SQLState() string { return "53100" }

// A quiet server whose writes fail now and then for a lost connection (a failover cut a pooled
// one), not a storage fault, while readiness's write succeeds: no relapse, so it is not left
// unready for the settle times a store refusing its writes earns.
func TestLostConnectionsAreNoRelapse(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cut := errors.New("conn closed")
	var w writeHealth
	unready := 0
	for s := 0; s < 3600; s++ {
		now := start.Add(time.Duration(s) * time.Second)
		if s%120 == 0 {
			w.record(now, cut)
		}
		if w.check(now.Add(500*time.Millisecond), func() error { return nil }) != nil {
			unready++
		}
	}
	if unready > 0 {
		t.Fatalf("unready at %d of 3600 checks", unready)
	}
}

// After a relapse, lost connections (not storage faults) do not restart the settle time: a store
// whose pooled connections are cut now and then reads ready once its storage has settled.
func TestLostConnectionsDoNotProlongASettle(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	full, cut := error(diskFull{}), errors.New("conn closed")
	fits := func() error { return nil }
	var w writeHealth
	for range writeFailuresUnready {
		w.record(now, full)
	}
	if err := w.check(now, fits); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	w.record(now, full) // a relapse
	ready := false
	for s := 0; s < 600 && !ready; s++ {
		now = now.Add(time.Second)
		if s%4 == 0 {
			w.record(now, cut)
		}
		ready = w.check(now, fits) == nil
	}
	if !ready {
		t.Fatal("unready for 10 minutes after a relapse, lost connections restarting its settle time")
	}
}
