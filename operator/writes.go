package operator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// writeFailuresUnready failed write transactions make the store a suspect: from then on readiness
// asks it with a small write of its own (CheckWrites) until that write succeeds, which clears the
// count. One failure can be a blip; a few are a store that answers reads but takes no writes (a
// full disk, a database turned read-only), which a read-only ping cannot see. Transactions that
// commit do not clear the count: most of a server's transactions (an idle claim poll, a retention
// pass with nothing to delete) write nothing, and commit on a full disk too. Nor does time: a
// server with little traffic writes seldom, and a wrong suspicion costs one small write.
//
// The probe's write is small, and can fit where an acceptance's does not (a full disk leaves room
// in the WAL's last pages, or in a table's free ones): a write that fails within relapseWindow of
// a probe that cleared the store makes it a suspect again at once, and then a probe clears it
// only once no write has failed for settleTime. Otherwise readiness, probing each second, would
// say ready between every three failures of a store that refuses every real write.
const writeFailuresUnready = 3

// relapseWindow and settleTime: see writeFailuresUnready.
const relapseWindow = time.Minute

var settleTime = 5 * time.Second

// probeEvery bounds how often readiness tries its write while the store is a suspect: /readyz
// needs no token, so its callers must not make a write each. probeTimeout bounds one try.
var probeEvery = time.Second

const probeTimeout = 5 * time.Second

// writeHealth follows a store's failed write transactions and, once they make it a suspect, the
// outcome of readiness's own write.
type writeHealth struct {
	mu       sync.Mutex
	failed   int   // write transactions failed since the last write readiness saw succeed
	last     error // the last failure
	probing  bool  // a probe runs now
	probedAt time.Time
	probeErr error // the outcome of the last probe while a suspect (nil: none finished yet)
	// clearedAt is when a probe last cleared the suspicion; failedAt, when a write last failed;
	// relapsed, that a write failed within relapseWindow of clearedAt (see writeFailuresUnready).
	clearedAt, failedAt time.Time
	relapsed            bool
	settling            bool // the last probe wrote, but a relapse's writes failed within settleTime
}

// record notes a write transaction that failed in the store at now.
func (w *writeHealth) record(now time.Time, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last, w.failedAt = err, now
	w.failed++
	if !w.clearedAt.IsZero() && now.Sub(w.clearedAt) < relapseWindow {
		w.relapsed = true
		w.failed = max(w.failed, writeFailuresUnready)
	}
}

// check returns nil while the store takes writes. Once it is a suspect, it runs probe (at most
// once per probeEvery, and one at a time, outside the lock: failing writes and other readiness
// checks do not wait for it); a probe that writes clears the suspicion, one that fails keeps
// readiness off until one writes (and, after a relapse, until no write has failed for
// settleTime).
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
		w.settling = err == nil && w.relapsed && now.Sub(w.failedAt) < settleTime
		switch {
		case w.settling:
			w.probeErr = nil
		case err == nil:
			w.failed, w.last, w.probeErr, w.probedAt = 0, nil, nil, time.Time{}
			w.clearedAt, w.relapsed = now, false
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
			"again after an earlier one did: ready once none has failed for %s", w.failed, w.last, settleTime)
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
