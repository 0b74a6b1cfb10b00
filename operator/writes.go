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

// writeFailuresUnready is how many write transactions in a row must fail in the store, none
// succeeding, before /readyz answers 503. One failure can be a blip; a few in a row are a store
// that answers reads but takes no writes (a full disk, a database turned read-only), which a
// read-only ping cannot see.
const writeFailuresUnready = 3

// writeHealth follows the outcomes of a store's write transactions: how many failed in a row,
// since when, and the last error. A success clears it.
type writeHealth struct {
	mu     sync.Mutex
	failed int
	since  time.Time
	last   error
}

// record notes a committed transaction (err nil) or one that failed in the store.
func (w *writeHealth) record(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.failed, w.since, w.last = 0, time.Time{}, nil
		return
	}
	if w.failed == 0 {
		w.since = time.Now()
	}
	w.failed++
	w.last = err
}

// unready returns why the store counts as not taking writes, or nil.
func (w *writeHealth) unready() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed < writeFailuresUnready {
		return nil
	}
	return fmt.Errorf("%d write transactions in a row failed since %s: %w", w.failed,
		w.since.UTC().Format(time.RFC3339), w.last)
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
// transactions in a row have failed in it. Then it tries a small write of its own first, so that
// readiness returns as soon as the store does, even when no traffic writes meanwhile. While the
// store is healthy it writes nothing.
func (s *instrumentedStore) CheckWrites(ctx context.Context) error {
	if s.writes.unready() == nil {
		return nil
	}
	// The probe's fn is ours, so any error it returns is the store's: record it directly.
	err := s.Store.Update(ctx, probeWrite)
	s.m.storeError("update", err)
	if err == nil || isStoreFailure(err) {
		s.writes.record(err)
	}
	return s.writes.unready()
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
