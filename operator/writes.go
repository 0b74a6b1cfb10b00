package operator

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// writeFailuresUnready failed write transactions make the store a suspect: from then on readiness
// asks it with a small write of its own (CheckWrites) until that write succeeds, which clears the
// count. One failure can be a blip; a few are a store that answers reads but takes no writes (a
// full disk, a database turned read-only), which a read-only ping cannot see. Nor does time clear
// it: a server with little traffic writes seldom, and a wrong suspicion costs one small write.
//
// A transaction that commits clears it only when it is an acceptance of new work (it inserted a
// claim and a task, with the task's events, evidence and wake: real traffic's writes; a direct
// reply's acceptance writes no task). Most of a
// server's transactions (an idle claim poll, a retention pass with nothing to delete) write
// nothing, and commit on a full disk too; others write a row or two (a duplicate's evidence),
// which can fit where real writes do not.
//
// The probe's write is small, and can fit where real ones do not (a full disk leaves room in the
// WAL's last pages, or in a table's free ones). So a write that fails within relapseWindow of a
// probe's clearance with a storage fault (store.StorageFault: full, read-only, I/O) — a relapse —
// makes the store a suspect again at once, and after a relapse a
// probe clears it only once no write has failed for the settle time, which doubles with each
// relapse in a row (settleTime, at most maxSettle); only storage faults count there too. Otherwise readiness, probing each second,
// would say ready between the failures of a store that refuses every real write. A real write
// that commits ends the series.
const writeFailuresUnready = 3

// relapseWindow, settleTime and maxSettle: see writeFailuresUnready.
const (
	relapseWindow = 10 * time.Minute
	maxSettle     = 5 * time.Minute
)

var settleTime = 5 * time.Second

// probeEvery bounds how often readiness tries its write while the store is a suspect: /readyz
// needs no token, so its callers must not make a write each. probeTimeout bounds one try.
var probeEvery = time.Second

const probeTimeout = 5 * time.Second

// writeHealth follows a store's failed write transactions and, once they make it a suspect, the
// outcome of readiness's own write.
type writeHealth struct {
	mu       sync.Mutex
	failed   int   // write transactions failed since the store was last seen taking writes
	last     error // the last failure
	probing  bool  // a probe runs now
	probedAt time.Time
	probeErr error // the outcome of the last probe while a suspect (nil: none finished yet)
	// clearedAt is when a probe last cleared the suspicion (zero: none since real writes
	// committed); faultAt, when a write last failed with a storage fault; relapses, how many
	// relapses in a row (see writeFailuresUnready), and relapsed, whether the suspicion now is
	// one.
	clearedAt, faultAt time.Time
	relapses           int
	relapsed           bool
	settling           bool // the last probe wrote, but a storage fault came within the settle time
	// suspect is set while failed > 0 or clearedAt is set: wrote, on every acceptance, reads it
	// without the lock.
	suspect atomic.Bool
}

// settle is how long no write may have failed with a storage fault before a probe clears a
// relapsed store.
func (w *writeHealth) settle() time.Duration {
	d := settleTime
	for i := 1; i < w.relapses && d < maxSettle; i++ {
		d *= 2
	}
	return min(d, maxSettle)
}

// record notes a write transaction that failed in the store at now.
func (w *writeHealth) record(now time.Time, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = err
	w.failed++
	w.suspect.Store(true)
	fault := store.StorageFault(err)
	if fault {
		w.faultAt = now
	}
	switch {
	case !fault:
		// A lost connection or a restarting database is no sign of a small write fitting where
		// real ones do not: it counts as a failure, not as a relapse.
	case w.relapsed, w.clearedAt.IsZero():
		// In a relapse already (it lasts until a probe or a real write clears it), or no probe
		// cleared the store since real writes last committed.
	case now.Sub(w.clearedAt) >= relapseWindow:
		w.clearedAt, w.relapses = time.Time{}, 0 // long after the clearance: a blip, not a relapse
	default:
		w.relapsed = true
		w.relapses++
		w.failed = max(w.failed, writeFailuresUnready)
	}
}

// wrote notes that an acceptance of new work committed: the store takes real writes.
func (w *writeHealth) wrote() {
	if !w.suspect.Load() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failed, w.last, w.probeErr, w.probedAt = 0, nil, nil, time.Time{}
	w.clearedAt, w.relapses, w.relapsed, w.settling = time.Time{}, 0, false, false
	w.suspect.Store(false)
}

// check returns nil while the store takes writes. Once it is a suspect, it runs probe (at most
// once per probeEvery, and one at a time, outside the lock: failing writes and other readiness
// checks do not wait for it); a probe that writes clears the suspicion (after a relapse, once no
// write has failed for the settle time), one that fails keeps readiness off until one writes.
func (w *writeHealth) check(now time.Time, probe func() error) error {
	w.mu.Lock()
	if w.failed < writeFailuresUnready {
		w.mu.Unlock()
		return nil
	}
	run := !w.probing && (w.probedAt.IsZero() || now.Sub(w.probedAt) >= probeEvery)
	if run {
		w.probing, w.probedAt = true, now
	}
	w.mu.Unlock()
	if run {
		err := probe()
		w.mu.Lock()
		w.probing = false
		w.settling = err == nil && w.relapsed && now.Sub(w.faultAt) < w.settle()
		switch {
		case w.failed < writeFailuresUnready:
			// Real writes committed while the probe ran: cleared already.
		case w.settling:
			w.probeErr = nil
		case err == nil:
			w.failed, w.last, w.probeErr, w.probedAt = 0, nil, nil, time.Time{}
			w.clearedAt, w.relapsed = now, false // suspect stays set: a relapse is watched for
		default:
			w.probeErr = err
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.failed < writeFailuresUnready:
		return nil
	case w.settling:
		return fmt.Errorf("%d write transactions failed (the last: %v); readiness's own write succeeds, but writes failed "+
			"again soon after an earlier one did: ready once none has failed for %s", w.failed, w.last, w.settle())
	case w.probeErr == nil: // another check's probe has not finished yet
		return fmt.Errorf("%d write transactions failed (the last: %v); readiness's own write is under way", w.failed, w.last)
	}
	return fmt.Errorf("%d write transactions failed (the last: %v), and readiness's own write fails: %w", w.failed, w.last, w.probeErr)
}

// writeChecker is implemented by the store Metrics.Store returns; Check asks it whether the store
// takes writes.
type writeChecker interface {
	CheckWrites(ctx context.Context) error
}

// CheckWrites returns nil while the store takes writes: unless writeFailuresUnready write
// transactions failed in it since the last write readiness saw succeed. Then it tries a small
// write of its own (at most once per probeEvery), so that readiness returns as soon as the store
// does, even when no traffic writes meanwhile. Until then it writes nothing.
func (s *instrumentedStore) CheckWrites(ctx context.Context) error {
	return s.writes.check(time.Now(), func() error {
		// Not on the caller's context: a prober that hangs up must not make the write fail. The
		// probe's fn is ours, so any error it returns is the store's.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
		defer cancel()
		err := s.Store.Update(pctx, probeWrite)
		s.m.storeError("update", err)
		return err
	})
}

// probeWrite inserts and deletes a claim no event can have (its principal is empty): the
// transaction has rows to commit, and leaves nothing behind.
func probeWrite(ctx context.Context, tx store.Tx) error {
	now := time.Now()
	c := store.Claim{Source: "channels", Identity: "readiness-write-probe", State: store.ClaimDone,
		CreatedAt: now, UpdatedAt: now}
	if _, _, err := tx.InsertClaim(ctx, c); err != nil {
		return err
	}
	_, err := tx.DeleteClaim(ctx, c.Principal, c.Source, c.Identity, "")
	return err
}
