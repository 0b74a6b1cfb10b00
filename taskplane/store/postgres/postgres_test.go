package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/postgres"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// TestStore runs the shared driver suite: the same contract the SQLite driver passes.
func TestStore(t *testing.T) {
	storetest.Run(t, storetest.OpenPostgres)
}

// newSchema creates an empty schema for one test in the database named by TEST_DATABASE_URL,
// drops it when the test ends, and returns a URL whose search_path selects it and whose
// application_name is the schema name, so a test can find its own backends in pg_stat_activity.
// The focused tests below need the URL itself, to open several Stores on one schema.
func newSchema(tb testing.TB) *url.URL {
	tb.Helper()
	raw := os.Getenv("TEST_DATABASE_URL")
	if raw == "" {
		if os.Getenv("CI") != "" {
			tb.Fatal("TEST_DATABASE_URL is not set; scripts/test.sh starts a Postgres and sets it")
		}
		tb.Skip("TEST_DATABASE_URL is not set; run scripts/test.sh")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		tb.Fatalf("connect to TEST_DATABASE_URL: %v", err)
	}
	defer conn.Close(ctx)
	var b [6]byte
	rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	tb.Cleanup(func() {
		conn, err := pgx.Connect(ctx, raw)
		if err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatalf("parse TEST_DATABASE_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("application_name", schema)
	u.RawQuery = q.Encode()
	return u
}

// open opens a Store on u and closes it when the test ends.
// setParam sets one URL parameter (a pgx option or a server run-time parameter) on u.
func setParam(u *url.URL, key, value string) {
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
}

func open(tb testing.TB, u *url.URL) *postgres.Store {
	tb.Helper()
	s, err := postgres.Open(context.Background(), u)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// seedTask inserts a context and a working task in it.
func seedTask(t *testing.T, s store.Store, principal, taskID string) {
	t.Helper()
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		if err := tx.InsertContext(ctx, store.Context{Principal: principal, ID: "ctx-" + taskID, CreatedAt: t0, LastEventAt: t0}); err != nil {
			return err
		}
		return tx.InsertTask(ctx, store.Task{Principal: principal, ID: taskID, ContextID: "ctx-" + taskID,
			State: "working", StatusTime: t0, Version: 1, CreatedAt: t0, UpdatedAt: t0})
	})
	if err != nil {
		t.Fatalf("seed task: %v", err)
	}
}

func TestOpenRegistersSchemes(t *testing.T) {
	t.Parallel()
	got := store.Schemes()
	for _, want := range []string{"postgres", "postgresql"} {
		found := false
		for _, s := range got {
			found = found || s == want
		}
		if !found {
			t.Errorf("store.Schemes() = %v, want it to hold %q", got, want)
		}
	}
}

func TestOpenErrorHidesPassword(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Port 1 on loopback refuses at once.
	_, err := store.Open(ctx, "postgres://u:s3cret-pw@127.0.0.1:1/db?connect_timeout=2")
	if err == nil {
		t.Fatal("Open succeeded against a closed port")
	}
	if msg := err.Error(); strings.Contains(msg, "s3cret-pw") {
		t.Errorf("error holds the password: %s", msg)
	}
}

// Several processes starting at once on one schema: every Open succeeds and each migration is
// applied once, in that schema only.
func TestOpenConcurrentMigratesOnce(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			s, err := postgres.Open(context.Background(), u)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("open %d: %v", i, err)
		}
	}
	conn := connect(t, u)
	var versions, distinct int
	var schema string
	err := conn.QueryRow(context.Background(),
		`SELECT count(*), count(DISTINCT version), current_schema() FROM schema_migrations`).Scan(&versions, &distinct, &schema)
	if err != nil {
		t.Fatal(err)
	}
	if versions == 0 || versions != distinct {
		t.Errorf("schema_migrations holds %d rows for %d versions", versions, distinct)
	}
	// Had the search_path been ignored, the tables would be in public.
	var inPublic bool
	err = conn.QueryRow(context.Background(), `SELECT to_regclass('public.tasks') IS NOT NULL`).Scan(&inPublic)
	if err != nil {
		t.Fatal(err)
	}
	if inPublic || schema == "public" {
		t.Errorf("the tables landed in public, not in the test's schema")
	}
}

func TestOpenSchemasAreIsolated(t *testing.T) {
	t.Parallel()
	a, b := open(t, newSchema(t)), open(t, newSchema(t))
	seedTask(t, a, "alice", "task-1")
	if _, err := b.GetTask(context.Background(), "alice", "task-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetTask in the other schema: err = %v, want ErrNotFound", err)
	}
}

func TestOpenMissingSchema(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	setParam(u, "search_path", "no_such_schema_here")
	_, err := postgres.Open(context.Background(), u)
	if err == nil {
		t.Fatal("Open succeeded with a search_path naming no existing schema")
	}
}

func TestCapabilities(t *testing.T) {
	t.Parallel()
	s := open(t, newSchema(t))
	want := store.Capabilities{Name: "postgres", Listen: true, MultiProcess: true}
	if diff := cmp.Diff(want, s.Capabilities()); diff != "" {
		t.Errorf("Capabilities (-want +got):\n%s", diff)
	}
}

// A notification committed through one Store reaches a Listen on another, with the principal
// (which may hold a slash) and the task id intact; a rolled-back append notifies nobody.
func TestListenAcrossStores(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	listener, writer := open(t, u), open(t, u)
	const principal = "org/alice"
	seedTask(t, writer, principal, "task-1")
	seedTask(t, writer, principal, "task-2")

	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan [2]string, 100)
	done := make(chan error, 1)
	go func() {
		done <- listener.Listen(ctx, func(p, id string) { got <- [2]string{p, id} }, nil)
	}()

	appendEvent := func(taskID string, commit bool) {
		t.Helper()
		rollback := errors.New("roll back")
		err := writer.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			if _, err := storetest.AppendNext(ctx, tx, principal, taskID, "status", []byte(`{}`), t0); err != nil {
				return err
			}
			if !commit {
				return rollback
			}
			return nil
		})
		if err != nil && (commit || !errors.Is(err, rollback)) {
			t.Fatalf("append: %v", err)
		}
	}

	// Listen gives no readiness signal, so append until the first hint arrives.
	deadline := time.After(10 * time.Second)
wait:
	for {
		appendEvent("task-1", true)
		select {
		case n := <-got:
			if n != [2]string{principal, "task-1"} {
				t.Fatalf("notification = %q, want %q", n, [2]string{principal, "task-1"})
			}
			break wait
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no notification within 10s")
		}
	}
	appendEvent("task-2", false)
	appendEvent("task-2", true)
	for {
		select {
		case n := <-got:
			if n == [2]string{principal, "task-1"} {
				continue // a late hint from the warm-up loop
			}
			if n != [2]string{principal, "task-2"} {
				t.Fatalf("notification = %q, want %q", n, [2]string{principal, "task-2"})
			}
			// The rolled-back append must not have produced a hint: only one task-2 event is in
			// the log, and only one hint may arrive.
			events, err := writer.TaskEvents(context.Background(), principal, "task-2", 0, 0)
			if err != nil || len(events) != 1 {
				t.Fatalf("task-2 events = %v, %v; want one", events, err)
			}
			select {
			case n := <-got:
				if n == [2]string{principal, "task-2"} {
					t.Fatalf("second task-2 notification: the rolled-back append notified")
				}
			case <-time.After(200 * time.Millisecond):
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Listen returned %v after its context ended, want nil", err)
			}
			return
		case <-time.After(10 * time.Second):
			t.Fatal("no task-2 notification within 10s")
		}
	}
}

// Stores in different schemas of one database do not hear each other's task events.
func TestListenIsPerSchema(t *testing.T) {
	t.Parallel()
	a, b := open(t, newSchema(t)), open(t, newSchema(t))
	seedTask(t, a, "alice", "warm")
	seedTask(t, a, "alice", "a-task")
	seedTask(t, b, "alice", "b-task")
	appendEvent := func(s store.Store, taskID string) {
		t.Helper()
		err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			_, err := storetest.AppendNext(ctx, tx, "alice", taskID, "status", nil, t0)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 100)
	go a.Listen(ctx, func(_, id string) { got <- id }, nil)
	deadline := time.After(10 * time.Second)
warm:
	for {
		appendEvent(a, "warm")
		select {
		case <-got:
			break warm
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no notification within 10s")
		}
	}
	// Notifications arrive in commit order, so once a-task's arrives, b-task's would have too.
	appendEvent(b, "b-task")
	appendEvent(a, "a-task")
	for {
		select {
		case id := <-got:
			switch id {
			case "b-task":
				t.Fatal("a listener on schema A heard an event of schema B")
			case "a-task":
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no a-task notification within 10s")
		}
	}
}

// Listen survives the server dropping its connection: it reconnects and delivers again, and says
// it reconnected (notifications sent meanwhile are lost) after that reconnect only, not at its
// first connect.
func TestListenReconnects(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	s := open(t, u)
	seedTask(t, s, "alice", "task-1")
	q := u.Query()
	q.Set("application_name", q.Get("application_name")+"_listener")
	u.RawQuery = q.Encode()
	listener := open(t, u)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 100)
	var reconnects atomic.Int32
	go listener.Listen(ctx, func(_, id string) { got <- id }, func() { reconnects.Add(1) })

	awaitHint(t, s, got)
	if n := reconnects.Load(); n != 0 {
		t.Fatalf("Listen said it reconnected %d times before its connection was dropped", n)
	}
	conn := connect(t, u)
	var killed int
	err := conn.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND query ILIKE 'LISTEN%'`, q.Get("application_name")).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminate the listening backend: killed %d, err %v", killed, err)
	}
	for len(got) > 0 {
		<-got
	}
	awaitHint(t, s, got)
	if n := reconnects.Load(); n != 1 {
		t.Errorf("Listen said it reconnected %d times after one dropped connection, want once", n)
	}
}

func TestListenEndsOnClose(t *testing.T) {
	t.Parallel()
	s, err := postgres.Open(context.Background(), newSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Listen(context.Background(), func(string, string) {}, nil) }()
	time.Sleep(50 * time.Millisecond)
	s.Close()
	select {
	case err := <-done:
		if !errors.Is(err, postgres.ErrClosed) {
			t.Errorf("Listen after Close returned %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not return after Close")
	}
}

// Two processes sharing one schema, 50 concurrent first messages of one conversation: one context.
func TestEnsureContextAcrossStores(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	stores := []*postgres.Store{open(t, u), open(t, u)}
	const n = 50
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = stores[i%2].Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
				id, err := tx.EnsureContext(ctx, "alice", "slack", "C1/1700000000.000100", fmt.Sprintf("ctx-%02d", i), t0)
				ids[i] = id
				return err
			})
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("caller %d got context %q, caller 0 got %q", i, ids[i], ids[0])
		}
	}
	got, err := stores[0].GetContext(context.Background(), "alice", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if got.ConversationKey != "C1/1700000000.000100" || got.Source != "slack" {
		t.Errorf("context = %+v", got)
	}
}

// A retention transaction has deleted an idle context and not committed yet. An acceptance that
// names the context (a client's contextId) reads it inside its transaction: the read waits for the
// prune and finds nothing, so the acceptance makes the context afresh instead of putting a task
// in a context that no longer exists. (The read holds the row FOR KEY SHARE, so a prune that
// comes after it skips the context.)
func TestAContextReadInATransactionWaitsForItsPrune(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	s := open(t, u)
	ctx := context.Background()
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.InsertContext(ctx, store.Context{Principal: "alice", ID: "ctx-old", Source: "a2a", CreatedAt: t0, LastEventAt: t0})
	}); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, u)
	prune, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prune.Exec(ctx, `DELETE FROM contexts WHERE principal = 'alice' AND id = 'ctx-old'`); err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		read <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.GetContext(ctx, "alice", "ctx-old")
			return err
		})
	}()
	waitLockWaitOn(t, u, "SELECT%FROM contexts%")
	if err := prune.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-read; !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the context a committed prune deleted was read as %v, want not found", err)
	}
}

// The delivery engine records a reply anchor for a task it read in the same transaction
// (taskplane.RecordAnchorTx), and another process's retention may prune the task meanwhile. The
// anchor must never outlive its task, since retention deletes anchors only with their tasks: a
// prune that committed after the read makes the put fail as not found, and a prune that comes
// after the put skips the task until the putting transaction ends.
func TestAnAnchorPutInATransactionHoldsItsTaskAgainstAPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old := t0.Add(-48 * time.Hour)
	setup := func(t *testing.T) (a, b *postgres.Store) {
		u := newSchema(t)
		a, b = open(t, u), open(t, u)
		if err := a.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			if err := tx.InsertContext(ctx, store.Context{Principal: "alice", ID: "c1", CreatedAt: old, LastEventAt: old}); err != nil {
				return err
			}
			return tx.InsertTask(ctx, store.Task{Principal: "alice", ID: "t1", ContextID: "c1", State: "completed",
				StatusTime: old, Version: 1, CreatedAt: old, UpdatedAt: old})
		}); err != nil {
			t.Fatal(err)
		}
		return a, b
	}
	prune := func(t *testing.T, s *postgres.Store) store.PruneResult {
		var r store.PruneResult
		if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			r, err = tx.Prune(ctx, t0, []string{"completed"}, 100)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	anchor := store.Anchor{Principal: "alice", Source: "slack", ProviderID: "m1", TaskID: "t1", CreatedAt: t0}
	// put runs read and then put in one transaction of a, and between them what the test says.
	put := func(a *postgres.Store, between, after func()) chan error {
		done := make(chan error, 1)
		go func() {
			done <- a.Update(ctx, func(ctx context.Context, tx store.Tx) error {
				if _, err := tx.GetTask(ctx, "alice", "t1"); err != nil {
					return err
				}
				between()
				if err := tx.PutAnchor(ctx, anchor); err != nil {
					return err
				}
				after()
				return nil
			})
		}()
		return done
	}

	t.Run("PrunedAfterTheRead", func(t *testing.T) {
		a, b := setup(t)
		read, pruned := make(chan struct{}), make(chan struct{})
		done := put(a, func() { close(read); <-pruned }, func() {})
		<-read
		if r := prune(t, b); r.Tasks != 1 {
			t.Fatalf("prune = %+v, want the task deleted", r)
		}
		close(pruned)
		if err := <-done; !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the anchor of a task pruned after it was read was put: %v, want not found", err)
		}
		if an, err := a.GetAnchor(ctx, "alice", "slack", "m1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("anchor %+v (err %v) of the pruned task stays, and no prune will delete it", an, err)
		}
	})

	t.Run("PrunedAfterThePut", func(t *testing.T) {
		a, b := setup(t)
		put1, release := make(chan struct{}), make(chan struct{})
		done := put(a, func() {}, func() { close(put1); <-release })
		<-put1
		if r := prune(t, b); r.Tasks != 0 || r.Anchors != 0 {
			t.Errorf("prune while the anchor's transaction is open = %+v, want the task skipped", r)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := a.GetAnchor(ctx, "alice", "slack", "m1"); err != nil {
			t.Fatalf("anchor: %v", err)
		}
		// Once the transaction ended, the task goes, and its anchor with it.
		if r := prune(t, b); r.Tasks != 1 || r.Anchors != 1 {
			t.Errorf("prune after the anchor's transaction = %+v, want the task and its anchor deleted", r)
		}
	})
}

// Two processes claim one event at once: exactly one inserts, the other waits for it and gets its
// claim back.
func TestInsertClaimAcrossStores(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	stores := []*postgres.Store{open(t, u), open(t, u)}
	const n = 20
	var inserted atomic.Int32
	var wg sync.WaitGroup
	errs := make([]error, n)
	digests := make([]string, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = stores[i%2].Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
				c, ok, err := tx.InsertClaim(ctx, store.Claim{Principal: "alice", Source: "slack", Identity: "Ev1",
					Digest: fmt.Sprint("d", i), State: store.ClaimPending, CreatedAt: t0, UpdatedAt: t0})
				if ok {
					inserted.Add(1)
				}
				digests[i] = c.Digest
				return err
			})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
	}
	if inserted.Load() != 1 {
		t.Fatalf("%d callers inserted the claim, want 1", inserted.Load())
	}
	for i := range n {
		if digests[i] != digests[0] {
			t.Fatalf("caller %d saw digest %q, caller 0 saw %q", i, digests[i], digests[0])
		}
	}
}

// beginAppend starts an Update that appends one event to the task as the task plane does
// (storetest.AppendNext) and then waits for release before committing. It reports the sequence
// on seq.
func beginAppend(s store.Store, principal, taskID, payload string, seq chan<- int64, release <-chan struct{}) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			n, err := storetest.AppendNext(ctx, tx, principal, taskID, "status", []byte(payload), t0)
			if err != nil {
				return err
			}
			seq <- n
			<-release
			return nil
		})
	}()
	return done
}

// connect opens a plain connection to u's schema, closed when the test ends: the SQL of another
// build, an administrator or a second session, beside the store.
func connect(t *testing.T, u *url.URL) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// waitLockWait waits until one of the test's backends waits on a lock while inserting a task
// event: a second writer of a sequence, waiting for the first one's event row.
func waitLockWait(t *testing.T, u *url.URL) { waitLockWaitOn(t, u, "INSERT INTO task_events%") }

// waitLockWaitOn waits until a backend of the test's schema waits on a lock in a statement like
// query (a LIKE pattern).
func waitLockWaitOn(t *testing.T, u *url.URL, query string) {
	t.Helper()
	conn := connect(t, u)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var waiting int
		err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE $2`,
			u.Query().Get("application_name"), query).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no statement like %q waited on a lock", query)
}

// The event-log resume guarantee: while one transaction has appended seq N to a task and not
// committed, a second writer that read the same task and appends N too waits for it, and loses
// once it commits; read again, it appends N+1. So sequence order is commit order, and a reader
// that resumes after the last sequence it saw never skips an event.
func TestAppendTaskEventOrdersCommits(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	a, b := open(t, u), open(t, u)
	seedTask(t, a, "alice", "task-1")
	ctx := context.Background()

	seq1, release1 := make(chan int64, 1), make(chan struct{})
	done1 := beginAppend(a, "alice", "task-1", `"first"`, seq1, release1)
	if got := <-seq1; got != 1 {
		t.Fatalf("first append got seq %d, want 1", got)
	}
	seq2, release2 := make(chan int64, 1), make(chan struct{})
	close(release2)
	done2 := beginAppend(b, "alice", "task-1", `"second"`, seq2, release2)
	waitLockWait(t, u)

	// Nothing is committed yet.
	if ev, err := a.TaskEvents(ctx, "alice", "task-1", 0, 0); err != nil || len(ev) != 0 {
		t.Fatalf("events before any commit = %v, %v", ev, err)
	}
	close(release1)
	if err := <-done1; err != nil {
		t.Fatal(err)
	}
	if err := <-done2; !errors.Is(err, store.ErrConcurrentModification) {
		t.Fatalf("second writer of seq 1 = %v, want ErrConcurrentModification once the first committed", err)
	}
	if err := <-beginAppend(b, "alice", "task-1", `"second"`, seq2, release2); err != nil {
		t.Fatal(err)
	}
	if got := <-seq2; got != 2 {
		t.Fatalf("second writer, read again, got seq %d, want 2", got)
	}
	ev, err := a.TaskEvents(ctx, "alice", "task-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ev {
		got = append(got, fmt.Sprint(e.Seq, "=", string(e.Payload)))
	}
	if diff := cmp.Diff([]string{`1="first"`, `2="second"`}, got); diff != "" {
		t.Errorf("event log (-want +got):\n%s", diff)
	}
	task, err := a.GetTask(ctx, "alice", "task-1")
	if err != nil || task.LastSeq != 2 {
		t.Errorf("task.LastSeq = %d, %v; want 2", task.LastSeq, err)
	}
}

// appendRetrying appends as the task plane does, reading the task again (a bounded number of
// times) while another writer takes the seq first.
func appendRetrying(s store.Store, principal, taskID string) error {
	var err error
	for range 200 {
		err = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			_, err := storetest.AppendNext(ctx, tx, principal, taskID, "status", nil, t0)
			return err
		})
		if !errors.Is(err, store.ErrConcurrentModification) {
			return err
		}
	}
	return fmt.Errorf("append still losing the race after 200 attempts: %w", err)
}

// A tailing reader that always resumes after the highest sequence it has seen, racing several
// writers in two Stores, sees every sequence exactly once and in order.
func TestTaskEventsTailNeverSkips(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	stores := []*postgres.Store{open(t, u), open(t, u)}
	seedTask(t, stores[0], "alice", "task-1")
	const writers, perWriter = 4, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for range perWriter {
				if err := appendRetrying(stores[w%2], "alice", "task-1"); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	writing := make(chan struct{})
	go func() { wg.Wait(); close(writing) }()

	var last int64
	for finished := false; ; {
		select {
		case <-writing:
			finished = true
		default:
		}
		ev, err := stores[1].TaskEvents(context.Background(), "alice", "task-1", last, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ev {
			if e.Seq != last+1 {
				t.Fatalf("after seq %d the reader saw seq %d", last, e.Seq)
			}
			last = e.Seq
		}
		if finished && len(ev) == 0 {
			break
		}
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if last != writers*perWriter {
		t.Errorf("reader ended at seq %d, want %d", last, writers*perWriter)
	}
}

// TestEvidenceFollowerNeverSkipsARecordCommittedLate: evidence ids are drawn at insert, and a
// transaction holding an earlier id can commit after a later one. A follower reading after an id
// stops short of such a gap for as long as the transaction stays open, however long that is, so it
// never steps over a record; a gap left by an insert that rolled back is passed once every
// transaction that could have drawn it has ended.
func TestEvidenceFollowerNeverSkipsARecordCommittedLate(t *testing.T) {
	u := newSchema(t)
	s := open(t, u)
	postgres.SetEvidenceWait(t, 50*time.Millisecond)
	ctx := context.Background()
	insert := func(kind string) error {
		return s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			return tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: kind, CreatedAt: time.Now()})
		})
	}
	if err := insert("first"); err != nil {
		t.Fatal(err)
	}
	first, err := s.ListEvidence(ctx, store.EvidenceFilter{})
	if err != nil || len(first) != 1 {
		t.Fatalf("seed: %v %v", err, first)
	}
	after := first[0].ID
	kinds := func() []string {
		t.Helper()
		ev, err := s.ListEvidence(ctx, store.EvidenceFilter{AfterID: after, Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for i := len(ev) - 1; i >= 0; i-- {
			out = append(out, ev[i].Kind)
		}
		return out
	}

	// A transaction draws the next id and stays open; a later one commits.
	drawn, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseSlow := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseSlow() // a failing check must not leave the store's Close waiting for it
	slow := make(chan error, 1)
	go func() {
		slow <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: "slow", CreatedAt: time.Now()}); err != nil {
				return err
			}
			if _, err := postgres.TxID(ctx, tx); err != nil { // sends the insert: the id is drawn
				return err
			}
			close(drawn)
			<-release
			return nil
		})
	}()
	<-drawn
	if err := insert("fast"); err != nil {
		t.Fatal(err)
	}
	// Many reads while it stays open, each waiting longer than the read's bound: none steps over.
	for held := time.Now().Add(time.Second); time.Now().Before(held); time.Sleep(20 * time.Millisecond) {
		if got := kinds(); len(got) != 0 {
			t.Fatalf("while the earlier id is in flight the follower read %v, stepping over it", got)
		}
	}
	releaseSlow()
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if got := kinds(); fmt.Sprint(got) != "[slow fast]" {
		t.Fatalf("after the commit the follower read %v, want [slow fast]", got)
	}

	// An insert that rolls back leaves a gap for good: it is passed once no transaction that could
	// have drawn it is open (other tests' transactions on the cluster may hold a read or two).
	after = 0
	all, _ := s.ListEvidence(ctx, store.EvidenceFilter{})
	after = all[0].ID
	rolledBack := errors.New("roll back")
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: "gone", CreatedAt: time.Now()}); err != nil {
			return err
		}
		if _, err := postgres.TxID(ctx, tx); err != nil {
			return err
		}
		return rolledBack
	}); !errors.Is(err, rolledBack) {
		t.Fatal(err)
	}
	if err := insert("later"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got := kinds(); fmt.Sprint(got) != "[later]"; got = kinds() {
		if len(got) != 0 || time.Now().After(deadline) {
			t.Fatalf("after a rolled-back insert the follower read %v, want [later] once settled", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pgError(code string) error { return &pgconn.PgError{Code: code, Message: "test"} }

func TestUpdateRetriesSerializationFailures(t *testing.T) {
	t.Parallel()
	s := open(t, newSchema(t))
	for _, code := range []string{"40001", "40P01"} {
		t.Run(code, func(t *testing.T) {
			var attempts int
			err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
				attempts++
				if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: code, CreatedAt: t0}); err != nil {
					return err
				}
				if attempts < 3 {
					return fmt.Errorf("wrapped: %w", pgError(code))
				}
				return nil
			})
			if err != nil || attempts != 3 {
				t.Fatalf("Update = %v after %d attempts, want nil after 3", err, attempts)
			}
			ev, err := s.ListEvidence(context.Background(), store.EvidenceFilter{Kind: code})
			if err != nil || len(ev) != 1 {
				t.Errorf("evidence rows = %d, %v; want 1 (the failed attempts rolled back)", len(ev), err)
			}
		})
	}
	t.Run("gives up", func(t *testing.T) {
		var attempts int
		err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			attempts++
			return pgError("40001")
		})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
			t.Errorf("Update = %v, want the serialization failure", err)
		}
		if attempts < 2 || attempts > 10 {
			t.Errorf("fn ran %d times, want a small bounded number", attempts)
		}
	})
}

// A real deadlock between two Updates of two processes: Postgres aborts one, Update runs it
// again, both commit. (Two Updates of one Store may share a transaction, where they cannot wait
// for each other.)
func TestUpdateRetriesDeadlock(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	setParam(u, "deadlock_timeout", "50ms")
	s, s2 := open(t, u), open(t, u)
	seedTask(t, s, "alice", "a")
	seedTask(t, s, "alice", "b")

	var barrier sync.WaitGroup
	barrier.Add(2)
	var attempts atomic.Int32
	lockBoth := func(s *postgres.Store, first, second string) error {
		var once bool
		fn := func(ctx context.Context, tx store.Tx) error {
			attempts.Add(1)
			if _, err := storetest.AppendNext(ctx, tx, "alice", first, "x", nil, t0); err != nil {
				return err
			}
			if !once {
				once = true
				barrier.Done()
				barrier.Wait() // both hold their first row now
			}
			_, err := storetest.AppendNext(ctx, tx, "alice", second, "x", nil, t0)
			return err
		}
		// The deadlock's victim, run again before the winner commits, reads a task the winner is
		// about to change and then finds its sequence taken (ErrConcurrentModification), as a
		// version-guarded writer would: it reads again, as the task plane does.
		for range 50 {
			err := s.Update(context.Background(), fn)
			if !errors.Is(err, store.ErrConcurrentModification) {
				return err
			}
		}
		return errors.New("still losing the race for a sequence after 50 attempts")
	}
	errs := make(chan error, 2)
	go func() { errs <- lockBoth(s, "a", "b") }()
	go func() { errs <- lockBoth(s2, "b", "a") }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("Update: %v", err)
		}
	}
	if attempts.Load() < 3 {
		t.Errorf("fn ran %d times, want at least 3 (one deadlock victim re-run)", attempts.Load())
	}
	for _, id := range []string{"a", "b"} {
		ev, err := s.TaskEvents(context.Background(), "alice", id, 0, 0)
		if err != nil || len(ev) != 2 {
			t.Errorf("task %s has %d events, %v; want 2", id, len(ev), err)
		}
	}
}

func TestUpdateReturnsFnErrorUnchanged(t *testing.T) {
	t.Parallel()
	s := open(t, newSchema(t))
	sentinel := errors.New("no thanks")
	var attempts int
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		attempts++
		if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: "k", CreatedAt: t0}); err != nil {
			return err
		}
		return sentinel
	})
	if err != sentinel || attempts != 1 {
		t.Fatalf("Update = %v after %d attempts, want the fn's error itself after 1", err, attempts)
	}
	if ev, _ := s.ListEvidence(context.Background(), store.EvidenceFilter{}); len(ev) != 0 {
		t.Errorf("evidence survived the failed Update: %v", ev)
	}
}

// Close makes a pending Update fail instead of waiting for it.
func TestCloseFailsPendingUpdate(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	holder := open(t, u)
	seedTask(t, holder, "alice", "task-1")
	s, err := postgres.Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	seq, release := make(chan int64, 1), make(chan struct{})
	held := beginAppend(holder, "alice", "task-1", `{}`, seq, release)
	<-seq
	pending := beginAppend(s, "alice", "task-1", `{}`, make(chan int64, 1), release)
	waitLockWait(t, u)
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case err := <-pending:
		if !errors.Is(err, postgres.ErrClosed) {
			t.Errorf("pending Update returned %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pending Update still running 10s after Close")
	}
	<-closed
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := s.Update(context.Background(), func(context.Context, store.Tx) error { return nil }); !errors.Is(err, postgres.ErrClosed) {
		t.Errorf("Update after Close = %v, want ErrClosed", err)
	}
}

// Times come back in UTC whatever the session time zone, at microsecond precision.
func TestTimesRoundTripInUTC(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	setParam(u, "timezone", "Asia/Kathmandu")
	s := open(t, u)
	at := time.Date(2026, 3, 1, 23, 59, 59, 123456000, time.UTC)
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return tx.InsertTask(ctx, store.Task{Principal: "alice", ID: "t", ContextID: "c", State: "working",
			StatusTime: at, Version: 1, CreatedAt: at, UpdatedAt: at})
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetTask(context.Background(), "alice", "t")
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]time.Time{"StatusTime": got.StatusTime, "CreatedAt": got.CreatedAt, "UpdatedAt": got.UpdatedAt} {
		if v != at {
			t.Errorf("%s = %v (%v), want %v", name, v, v.Location(), at)
		}
	}
}

// BenchmarkUpdate measures durable Updates from parallel callers (8 per GOMAXPROCS): one that
// inserts a claim, and one that appends a task event to one of 64 tasks as the task plane does
// (task read, event row, task update with the new last sequence, NOTIFY).
func BenchmarkUpdate(b *testing.B) {
	b.Run("InsertClaim", func(b *testing.B) {
		s := open(b, newSchema(b))
		var n atomic.Int64
		runParallelUpdates(b, s, func(ctx context.Context, tx store.Tx) error {
			_, _, err := tx.InsertClaim(ctx, store.Claim{Principal: "alice", Source: "bench",
				Identity: fmt.Sprint("ev-", n.Add(1)), State: store.ClaimPending, CreatedAt: t0, UpdatedAt: t0})
			return err
		})
	})
	b.Run("AppendTaskEvent", func(b *testing.B) {
		s := open(b, newSchema(b))
		const tasks = 64
		err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			for i := range tasks {
				err := tx.InsertTask(ctx, store.Task{Principal: "alice", ID: fmt.Sprint("task-", i), ContextID: "c",
					State: "working", StatusTime: t0, Version: 1, CreatedAt: t0, UpdatedAt: t0})
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		var n atomic.Int64
		runParallelUpdates(b, s, func(ctx context.Context, tx store.Tx) error {
			_, err := storetest.AppendNext(ctx, tx, "alice", fmt.Sprint("task-", n.Add(1)%tasks), "status", []byte(`{}`), t0)
			return err
		})
	})
}

func runParallelUpdates(b *testing.B, s store.Store, fn func(ctx context.Context, tx store.Tx) error) {
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			err := s.Update(context.Background(), fn)
			for errors.Is(err, store.ErrConcurrentModification) { // a seq taken by a concurrent writer
				err = s.Update(context.Background(), fn)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// holdCommitters holds every committer of s in an Update of its own, so the next Updates queue
// (one at a time: a committer takes what is queued, and two holders in one group would wait for
// each other). release lets the holders go, each running then (if any) before it commits, and
// fails t if one of them failed.
func holdCommitters(ctx context.Context, t *testing.T, s *postgres.Store, then func(ctx context.Context, tx store.Tx) error) (release func()) {
	t.Helper()
	n := s.Committers()
	unblock := make(chan struct{})
	held := make(chan error, n)
	for range n {
		running := make(chan struct{})
		go func() {
			held <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
				close(running)
				<-unblock
				if then == nil {
					return nil
				}
				return then(ctx, tx)
			})
		}()
		<-running
	}
	return func() {
		t.Helper()
		close(unblock)
		for range n {
			if err := <-held; err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Updates that wait for a committer share its next transaction, each in its own savepoint: one
// failing fn loses only its own writes, and the group commits once.
func TestQueuedUpdatesShareOneCommitAndAFailingFnLosesOnlyItsWrites(t *testing.T) {
	t.Parallel()
	s := open(t, newSchema(t))
	ctx := context.Background()
	release := holdCommitters(ctx, t, s, func(ctx context.Context, tx store.Tx) error {
		return tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: "held", CreatedAt: t0})
	})

	const queued = 12
	sentinel := errors.New("this one fails")
	var (
		mu    sync.Mutex
		txids = map[int64]int{}
	)
	errs := make(chan error, queued)
	for i := range queued {
		go func() {
			errs <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
				id, err := postgres.TxID(ctx, tx)
				if err != nil {
					return err
				}
				mu.Lock()
				txids[id]++
				mu.Unlock()
				kind := "queued"
				if i == 5 {
					kind = "lost"
				}
				if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: kind, CreatedAt: t0}); err != nil {
					return err
				}
				if i == 5 {
					return sentinel
				}
				return nil
			})
		}()
	}
	// Let every queued Update reach the queue before the committers are free.
	deadline := time.Now().Add(10 * time.Second)
	for s.Queued() < queued {
		if time.Now().After(deadline) {
			t.Fatalf("only %d Updates queued", s.Queued())
		}
		time.Sleep(time.Millisecond)
	}
	release()
	failed := 0
	for range queued {
		switch err := <-errs; {
		case errors.Is(err, sentinel):
			failed++
		case err != nil:
			t.Fatal(err)
		}
	}
	if failed != 1 {
		t.Fatalf("%d Updates returned the fn's error, want 1", failed)
	}
	if len(txids) >= queued {
		t.Errorf("the %d queued Updates ran in %d transactions; want them grouped", queued, len(txids))
	}
	for kind, want := range map[string]int{"held": s.Committers(), "queued": queued - 1, "lost": 0} {
		ev, err := s.ListEvidence(ctx, store.EvidenceFilter{Kind: kind})
		if err != nil || len(ev) != want {
			t.Errorf("%s evidence: %d rows, %v; want %d", kind, len(ev), err, want)
		}
	}
}

// A held-back write that must touch a row and touches none fails the Update, and nothing of the
// Update commits — though its COMMIT was pipelined behind the write.
func TestHeldBackWriteThatTouchesNoRowCommitsNothing(t *testing.T) {
	t.Parallel()
	s := open(t, newSchema(t))
	ctx := context.Background()
	writes := map[string]func(ctx context.Context, tx store.Tx) error{
		"TouchContext": func(ctx context.Context, tx store.Tx) error {
			return tx.TouchContext(ctx, "alice", "nope", t0)
		},
		"UpdateWake": func(ctx context.Context, tx store.Tx) error {
			return tx.UpdateWake(ctx, store.Wake{Principal: "alice", ID: "nope", State: store.WakeDone})
		},
		"SaveWake": func(ctx context.Context, tx store.Tx) error {
			return tx.SaveWake(ctx, store.Wake{Principal: "alice", ID: "nope", State: store.WakeDone})
		},
	}
	for name, write := range writes {
		err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: name, CreatedAt: t0}); err != nil {
				return err
			}
			return write(ctx, tx)
		})
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s of a missing row: Update = %v, want ErrNotFound", name, err)
		}
		if ev, err := s.ListEvidence(ctx, store.EvidenceFilter{Kind: name}); err != nil || len(ev) != 0 {
			t.Errorf("%s: the failed Update's evidence committed (%d rows, %v)", name, len(ev), err)
		}
	}
}

// An Update inside an Update fn is refused at once: the inner one could wait for the committer
// running the outer.
func TestNestedUpdateIsRefused(t *testing.T) {
	t.Parallel()
	s := open(t, newSchema(t))
	var inner error
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		inner = s.Update(ctx, func(context.Context, store.Tx) error { return nil })
		return nil
	})
	if err != nil || inner == nil || !strings.Contains(inner.Error(), "inside an Update fn") {
		t.Fatalf("outer %v, inner %v; want the inner Update refused", err, inner)
	}
}

// undoWakeCounts takes the schema at u back to before migration 0005 and returns the connection
// that did it, closed when the test ends.
func undoWakeCounts(t *testing.T, u *url.URL) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, u)
	if _, err := conn.Exec(ctx, `DROP FUNCTION wake_counts_note() CASCADE; DROP FUNCTION wake_counts_apply() CASCADE;
		DROP TABLE wake_counts; DELETE FROM schema_migrations WHERE version IN (5, 11)`); err != nil {
		t.Fatal(err)
	}
	return conn
}

// Migration 0005 counts the live wakes already in a schema, and its triggers count into the
// schema of the table they belong to, whatever the search_path of the session that changes it.
func TestWakeCountsAreSeededByTheMigrationAndKeptPerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, other := newSchema(t), newSchema(t)
	schema := u.Query().Get("search_path")
	s := open(t, u)
	wakes := []store.Wake{
		{Principal: "alice", ID: "w1", TaskID: "t1", State: store.WakePending},
		{Principal: "alice", ID: "w2", TaskID: "t2", State: store.WakePending},
		{Principal: "bob", ID: "w3", TaskID: "t3", State: store.WakeActive},
		{Principal: "bob", ID: "w4", TaskID: "t4", State: store.WakeDone},
	}
	err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for _, w := range wakes {
			w.Activation, w.CreatedAt, w.UpdatedAt = 1, t0, t0
			if err := tx.InsertWake(ctx, w); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	undoWakeCounts(t, u) // back to the schema as it was before 0005, with the wakes in it
	s = open(t, u)
	wantCount := func(step string, s *postgres.Store, state store.WakeState, want int) {
		t.Helper()
		n, err := s.CountWakes(ctx, state, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("%s: CountWakes(%s) = %d, want %d", step, state, n, want)
		}
	}
	wantCount("migrated", s, store.WakePending, 2)
	wantCount("migrated", s, store.WakeActive, 1)

	// A session of another store's schema deletes a wake of this one.
	o := open(t, other)
	oconn := connect(t, other)
	if _, err := oconn.Exec(ctx, `DELETE FROM `+pgx.Identifier{schema, "wakes"}.Sanitize()+` WHERE id IN ('w1', 'w3')`); err != nil {
		t.Fatal(err)
	}
	wantCount("deleted", s, store.WakePending, 1)
	wantCount("deleted", s, store.WakeActive, 0)
	wantCount("the other schema", o, store.WakePending, 0)
	wantCount("the other schema", o, store.WakeActive, 0)
}

// A delivery read in a transaction (the engine reading a row to record a provider call's outcome)
// stays out of another process's claim until the transaction ends, even when that process's clock
// says the lease has run out: the claim skips it rather than taking it between the read and the
// write, and the write never lands over a claim.
func TestDeliveryReadInATransactionIsHeldAgainstAClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := newSchema(t)
	a, b := open(t, u), open(t, u)
	d := store.Delivery{Principal: "alice", ID: "d1", TaskID: "t1", Source: "slack", Operation: "reply",
		Recovery: "lookup", PayloadDigest: "sha256:d1", Payload: []byte(`{}`), State: store.DeliverySending,
		Attempts: 1, NextAttemptAt: t0, LeaseOwner: "a", LeaseUntil: t0.Add(time.Minute), CreatedAt: t0, UpdatedAt: t0}
	if err := a.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		_, _, err := tx.InsertDelivery(ctx, d)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	read, claimed := make(chan struct{}), make(chan []store.Delivery, 1)
	go func() {
		<-read
		var got []store.Delivery
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := b.Update(cctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			got, err = tx.ClaimDeliveries(ctx, store.DeliveryClaim{Owner: "b", Now: t0.Add(2 * time.Minute),
				LeaseUntil: t0.Add(3 * time.Minute), Limit: 10})
			return err
		})
		if err != nil {
			t.Errorf("claim: %v", err)
		}
		claimed <- got
	}()
	err := a.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		cur, err := tx.GetDelivery(ctx, "alice", "d1")
		if err != nil {
			return err
		}
		close(read)
		if got := <-claimed; len(got) != 0 {
			t.Errorf("another store claimed %v while the outcome was being recorded", got[0].ID)
		}
		cur.State, cur.ProviderID, cur.LeaseOwner, cur.LeaseUntil = store.DeliveryDelivered, "ts-1", "", time.Time{}
		return tx.UpdateDelivery(ctx, cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.GetDelivery(ctx, "alice", "d1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.DeliveryDelivered || got.LeaseOwner != "" {
		t.Errorf("delivery = %s owned by %q, want delivered and unleased", got.State, got.LeaseOwner)
	}
}

// Two processes whose hosts' clocks are 45 s apart read one time from the store they share: each
// one's Now is its own clock moved onto the database's, so a lease one writes means the same
// instant to the other.
func TestHostsWithSkewedClocksShareTheDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := newSchema(t)
	const skew = 45 * time.Second
	behind, err := postgres.OpenOnHost(ctx, u, func() time.Time { return time.Now().Add(-skew) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { behind.Close() })
	onTime := open(t, u)
	if off := behind.ClockOffset(); (off - skew).Abs() > time.Second {
		t.Errorf("ClockOffset of the host 45 s behind = %v, want about 45s", off)
	}
	var db time.Time
	conn := connect(t, u)
	a := behind.Now()
	if err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	b := onTime.Now()
	// a, db and b were read in that order; allow for the time between them.
	if a.After(db.Add(time.Second)) || db.After(b.Add(time.Second)) || b.Sub(a) > 5*time.Second {
		t.Errorf("Now on the host behind = %v, the database's clock = %v, Now on the host on time = %v; want them in order, within a second", a, db, b)
	}
	if got := store.NowFunc(behind)(); time.Until(got).Abs() > 5*time.Second {
		t.Errorf("store.NowFunc(store) = %v, want the database's time (about %v)", got, time.Now())
	}
}

// A wake another process commits while migration 0005 runs (a rolling upgrade) is counted: the
// migration waits for writers in flight before it counts.
func TestWakeCountsMigrationWaitsForWritersInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := newSchema(t)
	open(t, u).Close()
	conn := undoWakeCounts(t, u)
	writer, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Exec(ctx, `INSERT INTO wakes (principal, id, task_id, activation, state, created_at, updated_at)
		VALUES ('alice', 'w1', 't1', 1, 'pending', now(), now())`); err != nil {
		t.Fatal(err)
	}
	opened := make(chan *postgres.Store, 1)
	go func() {
		s, err := postgres.Open(ctx, u)
		if err != nil {
			t.Error(err)
		}
		opened <- s
	}()
	// pg_stat_activity keeps the first 1 kB of the migration's text: its name, not its LOCK.
	waitLockWaitOn(t, u, "%0005_wake_counts%") // the migration reaches the writer's lock
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	s := <-opened
	if s == nil {
		return
	}
	defer s.Close()
	if n, err := s.CountWakes(ctx, store.WakePending, 0); err != nil || n != 1 {
		t.Errorf("CountWakes(pending) after the migration = %d, %v; want the 1 wake committed meanwhile", n, err)
	}
}

// A transaction holds its count slot only while it commits (migration 0011): another transaction
// whose id shares the slot moves wakes between the live states and commits while the first, which
// has moved wakes too, is still open; then the first commits, and the counts hold both.
func TestATransactionHoldsItsCountSlotOnlyWhileItCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := newSchema(t)
	s := open(t, u)
	a, b := connect(t, u), connect(t, u)
	for i, st := range []string{"pending", "active", "pending", "active"} {
		if _, err := a.Exec(ctx, `INSERT INTO wakes (principal, id, task_id, activation, state, created_at, updated_at)
			VALUES ('alice', $1, $1, 1, $2, now(), now())`, fmt.Sprint("w", i), st); err != nil {
			t.Fatal(err)
		}
	}
	txid := func(tx pgx.Tx) int64 {
		var id int64
		if err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	ta, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slot := txid(ta) % 64
	var tb pgx.Tx
	for range 1000 { // burn transaction ids until one shares ta's slot
		if tb, err = b.Begin(ctx); err != nil {
			t.Fatal(err)
		}
		if txid(tb)%64 == slot {
			break
		}
		tb.Rollback(ctx) //nolint:errcheck
		tb = nil
	}
	if tb == nil {
		t.Fatal("no transaction id shared the slot")
	}
	exec := func(ctx context.Context, tx pgx.Tx, sql string) error {
		_, err := tx.Exec(ctx, sql)
		return err
	}
	if err := exec(ctx, ta, `UPDATE wakes SET state = 'done' WHERE id = 'w2'`); err != nil { // pending -> done
		t.Fatal(err)
	}
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = exec(bctx, tb, `UPDATE wakes SET state = 'done' WHERE id = 'w3'`) // active -> done
	if err == nil {
		err = exec(bctx, tb, `UPDATE wakes SET state = 'pending' WHERE id = 'w1'`) // active -> pending
	}
	if err == nil {
		err = tb.Commit(bctx)
	}
	if err != nil {
		t.Fatalf("b, sharing the open transaction's count slot: %v", err)
	}
	if err := exec(ctx, ta, `UPDATE wakes SET state = 'active' WHERE id = 'w0'`); err != nil { // pending -> active
		t.Fatal(err)
	}
	if err := ta.Commit(ctx); err != nil {
		t.Fatalf("commit a: %v", err)
	}
	for state, want := range map[store.WakeState]int{store.WakePending: 1, store.WakeActive: 1} {
		if n, err := s.CountWakes(ctx, state, 0); err != nil || n != want {
			t.Errorf("CountWakes(%s) = %d, %v; want %d", state, n, err, want)
		}
	}
}

// A savepoint rolled back takes its wakes' changes out of the count its transaction writes at
// commit, and keeps the changes made before it.
func TestARolledBackSavepointTakesItsWakesOutOfTheCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := newSchema(t)
	s := open(t, u)
	conn := connect(t, u)
	if _, err := conn.Exec(ctx, `BEGIN;
		INSERT INTO wakes (principal, id, task_id, activation, state, created_at, updated_at)
			VALUES ('alice', 'w1', 't1', 1, 'pending', now(), now());
		SAVEPOINT fn;
		INSERT INTO wakes (principal, id, task_id, activation, state, created_at, updated_at)
			VALUES ('alice', 'w2', 't2', 1, 'pending', now(), now()), ('alice', 'w3', 't3', 1, 'active', now(), now());
		UPDATE wakes SET state = 'active' WHERE id = 'w1';
		ROLLBACK TO SAVEPOINT fn;
		COMMIT`); err != nil {
		t.Fatal(err)
	}
	for state, want := range map[store.WakeState]int{store.WakePending: 1, store.WakeActive: 0} {
		if n, err := s.CountWakes(ctx, state, 0); err != nil || n != want {
			t.Errorf("CountWakes(%s) = %d, %v; want %d", state, n, err, want)
		}
	}
}

// A follower whose filter matched nothing while more than the horizon's scan (10,000 ids) of other
// records arrived still gets the next record that matches, once the others have settled: the scan
// starts at the newest settled record, not at the follower's last id.
func TestFilteredEvidenceFollowerIsNotHeldBehindManyOtherRecords(t *testing.T) {
	u := newSchema(t)
	s := open(t, u)
	postgres.SetEvidenceWait(t, 200*time.Millisecond)
	ctx := context.Background()
	insert := func(kind string) {
		t.Helper()
		if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			return tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: kind, CreatedAt: time.Now()})
		}); err != nil {
			t.Fatal(err)
		}
	}
	insert("wanted")
	first, err := s.ListEvidence(ctx, store.EvidenceFilter{Kind: "wanted"})
	if err != nil || len(first) != 1 {
		t.Fatalf("seed: %v %v", err, first)
	}
	conn := connect(t, u)
	if _, err := conn.Exec(ctx, `INSERT INTO evidence (principal, source, kind, task_id, created_at)
		SELECT 'alice', '', 'noise', '', now() FROM generate_series(1, 10050)`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the noise settles
	insert("wanted")
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := s.ListEvidence(ctx, store.EvidenceFilter{Kind: "wanted", AfterID: first[0].ID, Forward: true, Follow: true, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second wanted record was not listed after the first's id (%d records)", len(got))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
