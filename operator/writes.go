package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// writeFailuresUnready failed write transactions within writeFailureWindow make the store a
// suspect: from then on readiness asks it with a small write of its own (CheckWrites) until that
// write succeeds. One failure can be a blip; a few close together are a store that answers reads
// but takes no writes (a full disk, a database turned read-only), which a read-only ping cannot
// see. Transactions that commit do not clear the suspicion: most of a server's transactions
// (an idle claim poll, a retention pass with nothing to delete) write nothing, and commit on a
// full disk too.
const (
	writeFailuresUnready = 3
	writeFailureWindow   = time.Minute
)

// probeEvery bounds how often readiness tries its write while the store is a suspect: /readyz
// needs no token, so its callers must not make a write each.
var probeEvery = time.Second

// writeHealth follows a store's failed write transactions and, once they make it a suspect, the
// outcome of readiness's own write.
type writeHealth struct {
	mu       sync.Mutex
	failures []time.Time // the most recent failures, at most writeFailuresUnready
	last     error       // the last failure
	suspect  bool
	probedAt time.Time
	probeErr error // the outcome of the last probe (nil: it wrote)
}

// record notes a write transaction that failed in the store.
func (w *writeHealth) record(err error, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = err
	w.failures = append(w.failures, now)
	if len(w.failures) > writeFailuresUnready {
		w.failures = w.failures[1:]
	}
	if len(w.failures) == writeFailuresUnready && now.Sub(w.failures[0]) <= writeFailureWindow {
		w.suspect = true
	}
}

// check returns nil while the store takes writes. Once it is a suspect, it runs probe (at most
// once per probeEvery; in between it answers the last outcome): a probe that writes clears the
// suspicion, one that fails keeps readiness off until one writes.
func (w *writeHealth) check(now time.Time, probe func() error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.suspect {
		return nil
	}
	if w.probedAt.IsZero() || now.Sub(w.probedAt) >= probeEvery {
		w.probedAt, w.probeErr = now, probe()
		if w.probeErr == nil {
			w.suspect, w.failures, w.last, w.probedAt = false, nil, nil, time.Time{}
			return nil
		}
	}
	return fmt.Errorf("%d write transactions failed within %s (the last: %v), and readiness's own write fails: %w",
		writeFailuresUnready, writeFailureWindow, w.last, w.probeErr)
}

// sqlStater is a database error with its SQLSTATE (Postgres's pgconn.PgError).
type sqlStater interface{ SQLState() string }

// storageFault reports whether err, returned by a caller's fn, passes on a failure of the
// database rather than the caller's decision: SQLSTATE class 53 (insufficient resources: disk
// full, out of memory), class 58 (system error: I/O) or 25006 (the database is read-only). On
// Postgres a full disk shows there, at the statement that needs a new page, before any commit.
func storageFault(err error) bool {
	var s sqlStater
	if !errors.As(err, &s) {
		return false
	}
	code := s.SQLState()
	return strings.HasPrefix(code, "53") || strings.HasPrefix(code, "58") || code == "25006"
}

// writeChecker is implemented by the store Metrics.Store returns; Check asks it whether the store
// takes writes.
type writeChecker interface {
	CheckWrites(ctx context.Context) error
}

// CheckWrites returns nil while the store takes writes: unless writeFailuresUnready write
// transactions failed in it within writeFailureWindow. Then it tries a small write of its own
// (at most once per probeEvery), so that readiness returns as soon as the store does, even when no
// traffic writes meanwhile. While the store is healthy it writes nothing.
func (s *instrumentedStore) CheckWrites(ctx context.Context) error {
	return s.writes.check(time.Now(), func() error {
		// The probe's fn is ours, so any error it returns is the store's.
		err := s.Store.Update(ctx, probeWrite)
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
