package operator_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// fullDisk is a store that answers reads but, while full, fails every write transaction at commit
// the way a store on a full disk does: fn runs, and unless it refuses, its writes are lost and the
// error is the store's.
type fullDisk struct {
	store.Store
	full    atomic.Bool
	updates atomic.Int64 // write transactions asked for
}

// errDiskFull is the error SQLite's driver gives a commit on a full disk: result code FULL (13).
var errDiskFull error = sqliteFull{}

type sqliteFull struct{}

func (sqliteFull) Error() string { return "sqlite store: commit: database or disk is full (13)" }
func (sqliteFull) Code() int     { return 13 }

func (f *fullDisk) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	f.updates.Add(1)
	if !f.full.Load() {
		return f.Store.Update(ctx, fn)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return f.Store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := fn(ctx, tx); err != nil {
			return err
		}
		return errDiskFull // rolls fn's writes back, as a failed commit loses them
	})
}

// TestReadinessFailsWhileStoreWritesFail: /readyz turns 503 ("store not taking writes") once a
// few write transactions in a row fail in the store, though its reads still answer. Errors of the
// caller's own fn and cancelled calls do not count. It turns ready again as soon as a write of
// traffic commits, or the small write readiness itself tries only while writes are failing (and
// which leaves nothing behind) succeeds — unless writes failed again soon after such a write
// cleared the store: then once no write has failed for the settle time.
func TestReadinessFailsWhileStoreWritesFail(t *testing.T) {
	operator.ProbeAlways(t)
	// Longer than a loaded machine stalls between a failed write and the next check (a probe of
	// Postgres with fsync=on between them under CI load; 1 s was too close).
	const settle = 3 * time.Second
	operator.SettleAfter(t, settle)
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := context.Background()
		disk := &fullDisk{Store: open(t)}
		st := operator.NewMetrics().Store(disk)
		var ready atomic.Bool
		ready.Store(true)
		srv := &operator.Server{Store: st, StoreName: disk.Capabilities().Name, Ready: &ready, Token: "op-token",
			Log: slog.New(slog.DiscardHandler)}
		mux := http.NewServeMux()
		srv.Mount(mux)
		// write is an acceptance of new work: a new claim, its task and its evidence.
		events := 0
		write := func(fnErr error) error {
			events++
			return st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
				now := time.Now()
				id := fmt.Sprint("e", events)
				if _, _, err := tx.InsertClaim(ctx, store.Claim{Principal: "alice", Source: "webhook", Identity: id,
					State: store.ClaimDone, TaskID: id, CreatedAt: now, UpdatedAt: now}); err != nil {
					return err
				}
				if err := tx.InsertTask(ctx, store.Task{Principal: "alice", ID: id, ContextID: "c", Source: "webhook",
					State: "submitted", StatusTime: now, Version: 1, Body: []byte(`{}`), CreatedAt: now, UpdatedAt: now}); err != nil {
					return err
				}
				if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "webhook", Kind: "accepted",
					Detail: []byte(`{}`), CreatedAt: now}); err != nil {
					return err
				}
				return fnErr
			})
		}
		want := func(when string, wantCode int) {
			t.Helper()
			code, r := readyz(t, mux)
			unwritable := strings.Contains(strings.Join(r.Reasons, ";"), "store not taking writes")
			if code != wantCode || unwritable != (wantCode == 503) {
				t.Fatalf("%s: readyz %d %v, want %d", when, code, r.Reasons, wantCode)
			}
		}
		conflict := errors.New("task is terminal")
		for range 5 {
			if err := write(conflict); !errors.Is(err, conflict) {
				t.Fatalf("fn's error: %v", err)
			}
		}
		asked := disk.updates.Load()
		want("fn refused five writes", 200)
		if n := disk.updates.Load(); n != asked {
			t.Fatalf("readiness wrote %d times while writes were healthy, want none", n-asked)
		}

		disk.full.Store(true)
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		for range 2 {
			if err := write(nil); !errors.Is(err, errDiskFull) {
				t.Fatalf("a write on a full disk: %v", err)
			}
			_ = st.Update(cancelled, func(context.Context, store.Tx) error { return nil })
		}
		if err := write(conflict); !errors.Is(err, conflict) { // fn's own error neither counts nor clears
			t.Fatalf("fn's error on a full disk: %v", err)
		}
		want("two store failures and two cancelled calls", 200)
		_ = write(nil)
		want("three store failures in a row", 503)
		want("still full, readiness's own write fails too", 503)

		disk.full.Store(false)
		want("disk freed, no traffic", 200)
		if _, err := disk.GetClaim(ctx, "", "channels", "readiness-write-probe"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("readiness's write left a claim behind: %v", err)
		}

		disk.full.Store(true)
		for range 3 {
			_ = write(nil)
		}
		want("full again", 503)
		// A small write of traffic that fits (a duplicate's evidence, no new claim) proves
		// nothing: the disk refuses real writes still.
		disk.full.Store(false)
		if err := st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			return tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "webhook", Kind: "duplicate",
				Detail: []byte(`{}`), CreatedAt: time.Now()})
		}); err != nil {
			t.Fatal(err)
		}
		disk.full.Store(true)
		want("a duplicate's evidence fitted", 503)
		disk.full.Store(false)
		if err := write(nil); err != nil {
			t.Fatal(err)
		}
		// Full again soon after readiness's own write cleared it, then an acceptance of traffic
		// commits: the store takes real writes, ready without a probe of its own.
		asked = disk.updates.Load()
		want("a write of traffic succeeded", 200)
		want("and again", 200)
		if n := disk.updates.Load(); n != asked {
			t.Fatalf("readiness wrote %d times once traffic's writes committed, want none", n-asked)
		}

		// Full again, and freed with no traffic: the probe writes, but after a relapse it clears
		// the store only once no write has failed for the settle time.
		disk.full.Store(true)
		for range 3 {
			_ = write(nil)
		}
		want("full again, no traffic", 503)
		disk.full.Store(false)
		want("disk freed, no traffic", 200) // the first clearance after traffic is no relapse
		disk.full.Store(true)
		_ = write(nil)
		want("a write fails soon after readiness's own write cleared it", 503)
		disk.full.Store(false)
		want("disk freed again at once", 503)
		time.Sleep(settle)
		want("no write failed for the settle time", 200)
	})
}

// wroteFull is a store on a full disk as SQLite and Postgres behave: a transaction that wrote
// fails at commit; one that only read (an idle claim poll, a retention pass with nothing to
// delete) commits.
type wroteFull struct {
	store.Store
	updates atomic.Int64
}

type trackTx struct {
	store.Tx
	wrote *bool
}

func (t trackTx) InsertEvidence(ctx context.Context, e store.Evidence) error {
	*t.wrote = true
	return t.Tx.InsertEvidence(ctx, e)
}

func (t trackTx) InsertClaim(ctx context.Context, c store.Claim) (store.Claim, bool, error) {
	*t.wrote = true
	return t.Tx.InsertClaim(ctx, c)
}

func (f *wroteFull) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	f.updates.Add(1)
	return f.Store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		wrote := false
		if err := fn(ctx, trackTx{tx, &wrote}); err != nil {
			return err
		}
		if wrote {
			return errDiskFull
		}
		return nil
	})
}

// A transaction that commits because it wrote nothing (the dispatcher's idle claim, every second)
// does not make a full store ready again; and readiness tries its own write at most once a second
// however often /readyz is asked.
func TestAnIdleTransactionDoesNotMakeAFullStoreReady(t *testing.T) {
	ctx := context.Background()
	disk := &wroteFull{Store: storetest.OpenSQLite(t)}
	st := operator.NewMetrics().Store(disk)
	plane := taskplane.New(st)
	var ready atomic.Bool
	ready.Store(true)
	srv := &operator.Server{Store: st, StoreName: "sqlite", Ready: &ready, Token: "op-token", Log: slog.New(slog.DiscardHandler)}
	mux := http.NewServeMux()
	srv.Mount(mux)
	for range 3 {
		if err := st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			return tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "webhook", Kind: "accepted",
				Detail: []byte(`{}`), CreatedAt: time.Now()})
		}); !errors.Is(err, errDiskFull) {
			t.Fatalf("a write on the full disk: %v", err)
		}
	}
	if code, r := readyz(t, mux); code != 503 {
		t.Fatalf("after three failed writes: %d %v", code, r.Reasons)
	}
	if g, err := plane.ClaimTurn(ctx, taskplane.ClaimRequest{Owner: "d", Lease: time.Minute}); err != nil || g != nil {
		t.Fatalf("idle claim: %v %v", g, err)
	}
	asked := disk.updates.Load()
	for range 20 {
		if code, r := readyz(t, mux); code != 503 {
			t.Fatalf("the disk is still full, but after an idle claim readyz = %d %v", code, r.Reasons)
		}
	}
	if n := disk.updates.Load() - asked; n > 1 {
		t.Errorf("20 readiness checks within a second tried %d writes, want at most 1", n)
	}
}

// fullTablespace is a Postgres store whose disk is full while full is set: a statement that needs
// a new page fails with SQLSTATE 53100 inside the transaction, and fn passes the error on.
type fullTablespace struct {
	store.Store
	full atomic.Bool
}

type fullTx struct{ store.Tx }

var errTablespaceFull = &pgconn.PgError{Severity: "ERROR", Code: "53100",
	Message: `could not extend file "base/16384/16390": No space left on device`}

func (fullTx) InsertEvidence(context.Context, store.Evidence) error {
	return fmt.Errorf("insert evidence: %w", errTablespaceFull)
}

func (fullTx) InsertClaim(context.Context, store.Claim) (store.Claim, bool, error) {
	return store.Claim{}, false, fmt.Errorf("insert claim: %w", errTablespaceFull)
}

func (f *fullTablespace) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if !f.full.Load() {
		return f.Store.Update(ctx, fn)
	}
	return f.Store.Update(ctx, func(ctx context.Context, tx store.Tx) error { return fn(ctx, fullTx{tx}) })
}

// TestReadinessCountsADatabaseFailureTheCallerPassesOn: on Postgres a full disk fails the
// statement that needs a new page, inside fn, which returns the error as its own; a database error
// of a storage class (here 53100 disk_full; also 58 system error and 25006 read-only) counts as a
// failed write all the same, while another one (a unique violation) stays the caller's outcome.
func TestReadinessCountsADatabaseFailureTheCallerPassesOn(t *testing.T) {
	operator.ProbeAlways(t)
	ctx := context.Background()
	disk := &fullTablespace{Store: storetest.OpenSQLite(t)}
	st := operator.NewMetrics().Store(disk)
	var ready atomic.Bool
	ready.Store(true)
	srv := &operator.Server{Store: st, StoreName: "postgres", Ready: &ready, Token: "op-token", Log: slog.New(slog.DiscardHandler)}
	mux := http.NewServeMux()
	srv.Mount(mux)
	write := func() error {
		return st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			return tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "webhook", Kind: "accepted",
				Detail: []byte(`{}`), CreatedAt: time.Now()})
		})
	}
	unique := fmt.Errorf("insert context: %w", &pgconn.PgError{Severity: "ERROR", Code: "23505", Message: "duplicate key"})
	for range 5 {
		if err := st.Update(ctx, func(context.Context, store.Tx) error { return unique }); !errors.Is(err, unique) {
			t.Fatalf("Update = %v, want fn's error", err)
		}
	}
	if code, r := readyz(t, mux); code != 200 {
		t.Fatalf("after five unique violations: readyz %d %v, want 200", code, r.Reasons)
	}
	disk.full.Store(true)
	for range 3 {
		if err := write(); !errors.Is(err, errTablespaceFull) {
			t.Fatalf("a write on a full tablespace: %v", err)
		}
	}
	if code, r := readyz(t, mux); code != 503 || !strings.Contains(strings.Join(r.Reasons, ";"), "store not taking writes") {
		t.Fatalf("after three writes failed on a full tablespace: readyz %d %v, want 503", code, r.Reasons)
	}
	disk.full.Store(false)
	if code, r := readyz(t, mux); code != 200 {
		t.Fatalf("space freed: readyz %d %v, want 200", code, r.Reasons)
	}
}

// readOnlyFile is a SQLite store whose database file cannot be written while ro is set: the first
// statement that writes fails inside fn, with the driver's SQLITE_READONLY error, which fn passes
// on. (The error is the real driver's, from a connection made query-only: the tests run as root,
// who may write any file. The sqlite package's tests check that its store fails a write so.)
type readOnlyFile struct {
	store.Store
	ro  atomic.Bool
	err error
}

type readOnlyTx struct {
	store.Tx
	err error
}

func (f *readOnlyFile) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if !f.ro.Load() {
		return f.Store.Update(ctx, fn)
	}
	return f.Store.Update(ctx, func(ctx context.Context, tx store.Tx) error { return fn(ctx, readOnlyTx{tx, f.err}) })
}

func (t readOnlyTx) InsertEvidence(context.Context, store.Evidence) error {
	return fmt.Errorf("insert evidence: %w", t.err)
}

func (t readOnlyTx) InsertClaim(context.Context, store.Claim) (store.Claim, bool, error) {
	return store.Claim{}, false, fmt.Errorf("insert claim: %w", t.err)
}

// sqliteReadOnlyError returns the error SQLite answers a write to a read-only database with.
func sqliteReadOnlyError(t *testing.T) error {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "ro.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("PRAGMA query_only=ON"); err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec("CREATE TABLE t (x)")
	if err == nil || !strings.Contains(err.Error(), "readonly database") {
		t.Fatalf("a write to a query-only database: %v", err)
	}
	return err
}

// TestReadinessCountsAReadOnlySQLiteDatabase: a SQLite database file that cannot be written fails
// every write transaction at its first statement, inside fn, with SQLITE_READONLY (8): /readyz
// turns 503 "store not taking writes" as it does for a read-only Postgres, and ready again once
// the file takes writes.
func TestReadinessCountsAReadOnlySQLiteDatabase(t *testing.T) {
	operator.ProbeAlways(t)
	ctx := context.Background()
	file := &readOnlyFile{Store: storetest.OpenSQLite(t), err: sqliteReadOnlyError(t)}
	st := operator.NewMetrics().Store(file)
	var ready atomic.Bool
	ready.Store(true)
	srv := &operator.Server{Store: st, StoreName: "sqlite", Ready: &ready, Token: "op-token", Log: slog.New(slog.DiscardHandler)}
	mux := http.NewServeMux()
	srv.Mount(mux)
	file.ro.Store(true)
	for range 3 {
		err := st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			return tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "webhook", Kind: "accepted",
				Detail: []byte(`{}`), CreatedAt: time.Now()})
		})
		if !errors.Is(err, file.err) {
			t.Fatalf("a write to the read-only file: %v", err)
		}
	}
	if code, r := readyz(t, mux); code != 503 || !strings.Contains(strings.Join(r.Reasons, ";"), "store not taking writes") {
		t.Fatalf("after three writes failed on a read-only file: readyz %d %v, want 503 store not taking writes", code, r.Reasons)
	}
	file.ro.Store(false)
	if code, r := readyz(t, mux); code != 200 {
		t.Fatalf("the file takes writes again: readyz %d %v, want 200", code, r.Reasons)
	}
}

// unreadable is a store whose reads of evidence fail while down is set.
type unreadable struct {
	store.Store
	down atomic.Bool
}

var errUnreachable = errors.New("failed to connect to `user=secretuser database=secretdb`: 127.0.0.1:5432: connection refused")

func (u *unreadable) ListEvidence(ctx context.Context, f store.EvidenceFilter) ([]store.Evidence, error) {
	if u.down.Load() {
		return nil, errUnreachable
	}
	return u.Store.ListEvidence(ctx, f)
}

// The operator API answers a read the store cannot serve 503 with Retry-After, naming no detail
// of the store's error.
func TestTheOperatorAPIAnswersAStoreOutage503WithRetryAfter(t *testing.T) {
	st := &unreadable{Store: storetest.OpenSQLite(t)}
	var ready atomic.Bool
	ready.Store(true)
	srv := &operator.Server{Store: st, StoreName: "sqlite", Ready: &ready, Token: "op-token", Log: slog.New(slog.DiscardHandler)}
	mux := http.NewServeMux()
	srv.Mount(mux)
	st.down.Store(true)
	for _, path := range []string{"/admin/api/evidence", "/admin"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer op-token")
		mux.ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" ||
			strings.Contains(rec.Body.String(), "secret") {
			t.Errorf("%s while the store is down: %d Retry-After %q %s, want 503 with Retry-After and no detail", path,
				rec.Code, rec.Header().Get("Retry-After"), rec.Body.String())
		}
	}
}
