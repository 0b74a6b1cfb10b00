package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/sqlite"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, storetest.OpenSQLite)
}

func openAt(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), &url.URL{Scheme: "sqlite", Path: path})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openTemp(t *testing.T) *sqlite.Store {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "channels.db"))
}

// childEnv names the database a re-executed test binary tries to open (see
// TestOpenRefusesSecondProcess).
const childEnv = "CHANNELS_SQLITE_TEST_CHILD_DB"

// Exit codes of the child process.
const (
	childOpened = 10
	childInUse  = 11
	childOther  = 12
)

func TestOpenRefusesSecondProcess(t *testing.T) {
	if path := os.Getenv(childEnv); path != "" {
		// The child: try to open the parent's database and report how it went.
		_, err := store.Open(context.Background(), "sqlite://"+path)
		switch {
		case err == nil:
			fmt.Println("opened")
			os.Exit(childOpened)
		case errors.Is(err, store.ErrInUse):
			fmt.Println(err)
			os.Exit(childInUse)
		default:
			fmt.Println(err)
			os.Exit(childOther)
		}
	}

	path := filepath.Join(t.TempDir(), "data", "channels.db")
	s := openAt(t, path)

	runChild := func() (int, string) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestOpenRefusesSecondProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+path)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return exit.ExitCode(), string(out)
	}

	code, out := runChild()
	if code != childInUse {
		t.Fatalf("second process: exit %d, want %d (ErrInUse); output:\n%s", code, childInUse, out)
	}
	real, err := filepath.EvalSymlinks(path) // the lock sits beside the file the path resolves to
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		real + ".lock",
		"another channels process",
		"pid " + strconv.Itoa(os.Getpid()),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("refusal %q does not mention %q", strings.TrimSpace(out), want)
		}
	}

	// Close releases the lock: now the second process gets in.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if code, out := runChild(); code != childOpened {
		t.Fatalf("process after Close: exit %d, want %d (opened); output:\n%s", code, childOpened, out)
	}
}

func TestOpenRefusesSecondOpenInSameProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "channels.db")
	s := openAt(t, path)
	_, err := sqlite.Open(context.Background(), &url.URL{Scheme: "sqlite", Path: path})
	if !errors.Is(err, store.ErrInUse) {
		t.Fatalf("second Open = %v, want ErrInUse", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again := openAt(t, path)
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}

// A symbolic link to the database file, or to its directory, is the same database: it takes the
// same lock, so a second writer cannot get in through another name.
func TestOpenThroughASymlinkTakesTheSameLock(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "data", "channels.db")
	s := openAt(t, path)
	fileLink := filepath.Join(dir, "file-link.db")
	dirLink := filepath.Join(dir, "dir-link")
	if err := os.Symlink(path, fileLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "data"), dirLink); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{fileLink, filepath.Join(dirLink, "channels.db")} {
		_, err := sqlite.Open(context.Background(), &url.URL{Scheme: "sqlite", Path: other})
		if !errors.Is(err, store.ErrInUse) {
			t.Errorf("Open through %s = %v, want ErrInUse", other, err)
		}
	}
	if got := s.Path(); got != path {
		t.Errorf("Path() = %s, want %s", got, path)
	}
}

func TestOpenURLForms(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, c := range []struct {
		url  string
		want string // relative to dir, or "" for an error
	}{
		{"sqlite://" + filepath.Join(dir, "abs", "deep", "channels.db"), "abs/deep/channels.db"},
		{"sqlite://rel/channels.db", "rel/channels.db"},
		{"sqlite://channels.db", "channels.db"},
		{"sqlite:opaque.db", "opaque.db"},
		{"sqlite://./dot/channels.db", "dot/channels.db"},
		{"sqlite://", ""},
		{"sqlite:///dir/", ""},
		{"sqlite:///x.db?cache=shared", ""},
	} {
		t.Run(c.url, func(t *testing.T) {
			s, err := store.Open(context.Background(), c.url)
			if c.want == "" {
				if err == nil {
					s.Close()
					t.Fatal("Open succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			want := filepath.Join(dir, c.want)
			if got := s.(*sqlite.Store).Path(); got != want {
				t.Errorf("Path() = %q, want %q", got, want)
			}
			fi, err := os.Stat(filepath.Dir(want))
			if err != nil {
				t.Fatal(err)
			}
			if c.want != "channels.db" && c.want != "opaque.db" && fi.Mode().Perm() != 0o700 {
				t.Errorf("created directory mode %v, want 0700", fi.Mode().Perm())
			}
		})
	}
}

// A database the store creates, and its WAL and shared-memory files, are its owner's alone: they
// hold message bodies and push credentials. (The test's umask would give others read access.)
func TestANewDatabaseIsReadableByItsOwnerOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "channels.db")
	s := openAt(t, path)
	if err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return tx.InsertContext(ctx, store.Context{Principal: "alice", ID: "ctx-1", CreatedAt: time.Now(), LastEventAt: time.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %v, want no access for group or others", filepath.Base(f), perm)
		}
	}
}

func TestReopenKeepsDataAndSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "channels.db")
	s := openAt(t, path)
	task := store.Task{Principal: "alice", ID: "task-1", ContextID: "ctx-1", State: "working", Version: 1,
		StatusTime: time.Unix(1700000000, 123456000).UTC()}
	if err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return tx.InsertTask(ctx, task)
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path) // migrations already applied: must be a no-op
	got, err := s.GetTask(context.Background(), "alice", "task-1")
	if err != nil {
		t.Fatal(err)
	}
	if !got.StatusTime.Equal(task.StatusTime) {
		t.Errorf("StatusTime after reopen = %v, want %v", got.StatusTime, task.StatusTime)
	}
}

// blockWriter starts an Update whose fn holds the writer until release is called, and returns
// once that fn runs, so Updates issued next queue up and share the following batch.
func blockWriter(t *testing.T, s *sqlite.Store) (release func()) {
	t.Helper()
	running, unblock := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			close(running)
			<-unblock
			return nil
		})
	}()
	<-running
	return func() {
		close(unblock)
		if err := <-done; err != nil {
			t.Errorf("blocking Update: %v", err)
		}
	}
}

// waitQueued waits until n Updates sit in the writer's queue.
func waitQueued(t *testing.T, s *sqlite.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for sqlite.Queued(s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d Updates queued, want %d", sqlite.Queued(s), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func claim(identity string) store.Claim {
	now := time.Unix(1700000000, 0).UTC()
	return store.Claim{Principal: "alice", Source: "slack", Identity: identity, State: store.ClaimPending,
		CreatedAt: now, UpdatedAt: now}
}

func insertClaim(identity string) func(ctx context.Context, tx store.Tx) error {
	return func(ctx context.Context, tx store.Tx) error {
		_, _, err := tx.InsertClaim(ctx, claim(identity))
		return err
	}
}

func TestGroupCommit200ConcurrentUpdatesAllCommit(t *testing.T) {
	s := openTemp(t)
	const n = 200
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = s.Update(context.Background(), insertClaim(fmt.Sprintf("Ev%03d", i))) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Update %d: %v", i, err)
		}
	}
	for i := range n {
		if _, err := s.GetClaim(context.Background(), "alice", "slack", fmt.Sprintf("Ev%03d", i)); err != nil {
			t.Errorf("claim %d: %v", i, err)
		}
	}
	t.Logf("%d Updates committed in %d transactions", n, sqlite.Batches(s))
}

func TestGroupCommitFailingFnDoesNotAffectOthersInBatch(t *testing.T) {
	s := openTemp(t)
	release := blockWriter(t, s)
	before := sqlite.Batches(s)

	errFail := errors.New("this fn fails")
	const n = 10
	fns := make([]func(ctx context.Context, tx store.Tx) error, n)
	for i := range n {
		id := fmt.Sprintf("Ev%d", i)
		switch i {
		case 3:
			fns[i] = func(ctx context.Context, tx store.Tx) error {
				if err := insertClaim(id)(ctx, tx); err != nil {
					return err
				}
				return errFail
			}
		case 6:
			fns[i] = func(ctx context.Context, tx store.Tx) error {
				if err := insertClaim(id)(ctx, tx); err != nil {
					return err
				}
				panic("fn panics")
			}
		case 8:
			// A statement error (duplicate primary key) after a write of its own.
			fns[i] = func(ctx context.Context, tx store.Tx) error {
				if err := insertClaim(id)(ctx, tx); err != nil {
					return err
				}
				task := store.Task{Principal: "alice", ID: "dup", State: "working", Version: 1}
				if err := tx.InsertTask(ctx, task); err != nil {
					return err
				}
				return tx.InsertTask(ctx, task)
			}
		default:
			fns[i] = insertClaim(id)
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = s.Update(context.Background(), fns[i]) })
	}
	waitQueued(t, s, n)
	release()
	wg.Wait()

	if got := sqlite.Batches(s) - before; got != 1 {
		t.Errorf("the %d queued Updates ran in %d transactions, want 1", n, got)
	}
	for i, err := range errs {
		_, getErr := s.GetClaim(context.Background(), "alice", "slack", fmt.Sprintf("Ev%d", i))
		switch i {
		case 3:
			if !errors.Is(err, errFail) {
				t.Errorf("fn 3: Update = %v, want its own error", err)
			}
		case 6:
			if err == nil || !strings.Contains(err.Error(), "fn panics") {
				t.Errorf("fn 6: Update = %v, want the panic as an error", err)
			}
		case 8:
			if err == nil {
				t.Errorf("fn 8: Update succeeded, want the duplicate key error")
			}
		default:
			if err != nil {
				t.Errorf("fn %d: Update = %v, want nil", i, err)
			}
			if getErr != nil {
				t.Errorf("fn %d's claim: %v", i, getErr)
			}
			continue
		}
		if !errors.Is(getErr, store.ErrNotFound) {
			t.Errorf("fn %d failed but its claim is there (GetClaim err %v)", i, getErr)
		}
	}
	if _, err := s.GetTask(context.Background(), "alice", "dup"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the failed fn's task survived: %v", err)
	}
	// The writer survived the panic.
	if err := s.Update(context.Background(), insertClaim("after")); err != nil {
		t.Fatalf("Update after the batch: %v", err)
	}
}

func TestUpdateCanceledWhileQueuedNeverRunsFn(t *testing.T) {
	s := openTemp(t)
	release := blockWriter(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	var ran atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			ran.Store(true)
			return nil
		})
	}()
	waitQueued(t, s, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Update canceled while queued = %v, want context.Canceled", err)
	}
	release()
	// One more Update through the writer proves it has passed the abandoned request.
	if err := s.Update(context.Background(), insertClaim("next")); err != nil {
		t.Fatal(err)
	}
	if ran.Load() {
		t.Error("fn of a canceled queued Update ran")
	}
}

func TestUpdateCanceledWhileRunningLeavesBatchIntact(t *testing.T) {
	s := openTemp(t)
	release := blockWriter(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	canceledErr := make(chan error, 1)
	go func() {
		canceledErr <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			if err := insertClaim("canceled")(ctx, tx); err != nil {
				return err
			}
			close(started)
			<-ctx.Done()
			// The caller gave up: the next operation fails with its context's error.
			return insertClaim("canceled-2")(ctx, tx)
		})
	}()
	waitQueued(t, s, 1)
	otherErr := make(chan error, 1)
	go func() { otherErr <- s.Update(context.Background(), insertClaim("other")) }()
	waitQueued(t, s, 2)
	release()
	<-started
	cancel()
	if err := <-canceledErr; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled Update = %v, want context.Canceled", err)
	}
	if err := <-otherErr; err != nil {
		t.Errorf("other Update in the same batch = %v, want nil", err)
	}
	if _, err := s.GetClaim(context.Background(), "alice", "slack", "other"); err != nil {
		t.Errorf("other claim: %v", err)
	}
	if _, err := s.GetClaim(context.Background(), "alice", "slack", "canceled"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("canceled fn's claim: err = %v, want ErrNotFound", err)
	}
}

func TestNestedUpdateFailsInsteadOfDeadlocking(t *testing.T) {
	s := openTemp(t)
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return s.Update(ctx, insertClaim("nested"))
	})
	if err == nil || !strings.Contains(err.Error(), "inside an Update") {
		t.Errorf("nested Update = %v, want an error naming the mistake", err)
	}
}

func TestTxUsedAfterFnReturnsFails(t *testing.T) {
	s := openTemp(t)
	var kept store.Tx
	if err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		kept = tx
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := kept.InsertClaim(context.Background(), claim("late")); err == nil {
		t.Error("a Tx kept past its fn still writes")
	}
}

func TestCloseFailsQueuedUpdates(t *testing.T) {
	s := openTemp(t)
	release := blockWriter(t, s)
	queued := make(chan error, 1)
	go func() { queued <- s.Update(context.Background(), insertClaim("queued")) }()
	waitQueued(t, s, 1)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	<-sqlite.Closing(s)
	release()
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-queued; !errors.Is(err, sqlite.ErrClosed) {
		t.Errorf("queued Update = %v, want ErrClosed", err)
	}
	if err := s.Update(context.Background(), insertClaim("late")); !errors.Is(err, sqlite.ErrClosed) {
		t.Errorf("Update after Close = %v, want ErrClosed", err)
	}
}

func TestCapabilities(t *testing.T) {
	s := openTemp(t)
	want := store.Capabilities{Name: "sqlite", Listen: false, MultiProcess: false}
	if got := s.Capabilities(); got != want {
		t.Errorf("Capabilities() = %+v, want %+v", got, want)
	}
	if err := s.Listen(context.Background(), func(string, string) {}, nil); !errors.Is(err, store.ErrNotSupported) {
		t.Errorf("Listen = %v, want ErrNotSupported", err)
	}
}

// BenchmarkUpdate measures durable Updates per second, each inserting one row: "serial" is one
// caller at a time (one fsync per Update), "parallel" many callers whose Updates the writer
// groups into shared commits.
func BenchmarkUpdate(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		s := openBench(b)
		var i int
		for b.Loop() {
			i++
			if err := s.Update(context.Background(), insertClaim(strconv.Itoa(i))); err != nil {
				b.Fatal(err)
			}
		}
		report(b, s)
	})
	b.Run("parallel", func(b *testing.B) {
		s := openBench(b)
		var n atomic.Int64
		b.SetParallelism(64)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.Update(context.Background(), insertClaim(strconv.FormatInt(n.Add(1), 10))); err != nil {
					b.Error(err)
					return
				}
			}
		})
		report(b, s)
	})
}

func openBench(b *testing.B) *sqlite.Store {
	b.Helper()
	s, err := sqlite.Open(context.Background(), &url.URL{Scheme: "sqlite", Path: filepath.Join(b.TempDir(), "bench.db")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func report(b *testing.B, s *sqlite.Store) {
	b.Helper()
	if sec := b.Elapsed().Seconds(); sec > 0 {
		b.ReportMetric(float64(b.N)/sec, "ops/s")
	}
	if batches := sqlite.Batches(s); batches > 0 {
		b.ReportMetric(float64(b.N)/float64(batches), "updates/commit")
	}
}

// A hard link to the database file is the same database too: the lock on the file itself refuses
// a second writer that comes in through it (the lock file beside each name cannot see it).
func TestOpenThroughAHardLinkIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "channels.db")
	openAt(t, path)
	link := filepath.Join(dir, "hard-link.db")
	if err := os.Link(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(context.Background(), &url.URL{Scheme: "sqlite", Path: link}); !errors.Is(err, store.ErrInUse) {
		t.Errorf("Open through a hard link = %v, want ErrInUse", err)
	}
}

// TestDashboardLoadsShareOneCachedStatement: every load of the dashboard counts evidence from
// another instant (Since) and in buckets; the query's text must not change with them, or each
// load would take a slot of the bounded statement cache until it is full for good.
func TestDashboardLoadsShareOneCachedStatement(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "channels.db"))
	ctx := context.Background()
	base := time.Now().Add(-24 * time.Hour)
	for i := range 20 {
		if _, err := s.CountEvidence(ctx, store.EvidenceCountFilter{Since: base.Add(time.Duration(i) * time.Second),
			Bucket: time.Duration(30+i) * time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if n := sqlite.CachedStatements(s); n > 1 {
		t.Errorf("20 dashboard loads left %d statements in the cache, want 1", n)
	}
}

// The writer's connection commits durably (synchronous=FULL) and has the WAL cut back to
// WALSizeLimit after a checkpoint that emptied it, so a burst does not keep its disk space.
func TestTheWriterIsDurableAndKeepsItsWALBounded(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	s, err := sqlite.Open(ctx, &url.URL{Scheme: "sqlite", Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct{ pragma, want string }{
		{"synchronous", "2"}, // FULL
		{"journal_mode", "wal"},
		{"journal_size_limit", fmt.Sprint(sqlite.WALSizeLimit)},
		{"wal_autocheckpoint", fmt.Sprint(sqlite.WALAutoCheckpoint)},
	} {
		if got, err := sqlite.WriterPragma(ctx, s, c.pragma); err != nil || got != c.want {
			t.Errorf("PRAGMA %s = %q (%v), want %q", c.pragma, got, err, c.want)
		}
	}
	// The mechanism, at a smaller limit and with checkpoints every 1,000 pages (SQLite's
	// default): a WAL grown to several MiB by one burst is cut back to the limit by the write
	// after the checkpoint that emptied it.
	const limit = 1 << 20
	for _, p := range []string{fmt.Sprintf("journal_size_limit=%d", limit), "wal_autocheckpoint=1000"} {
		if err := sqlite.SetWriterPragma(ctx, s, p); err != nil {
			t.Fatal(err)
		}
	}
	pad := strings.Repeat("x", 100<<10)
	burst := func(n int) {
		t.Helper()
		if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			for range n {
				if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "webhook", Kind: "accepted",
					Detail: []byte(`{"pad":"` + pad + `"}`), CreatedAt: time.Now()}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	wal := path + "-wal"
	burst(60) // ~6 MiB
	grown, err := os.Stat(wal)
	if err != nil || grown.Size() < 4*limit {
		t.Fatalf("the burst's WAL: %v %v", grown, err)
	}
	burst(1)
	burst(1)
	if after, err := os.Stat(wal); err != nil || after.Size() > limit+64<<10 {
		t.Fatalf("the WAL after the burst: %d bytes (%v), want at most about %d", after.Size(), err, limit)
	}
}

// The writer counts pending wakes once per transaction and follows its own inserts from there
// (the admission bound counts at every acceptance): every count within one transaction is the
// count a query would give, through inserts, a failed fn rolled back, a wake's change of state,
// and a count capped below the real one.
func TestPendingWakeCountsWithinOneTransactionAreExact(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	t0 := time.Unix(1700000000, 0).UTC()
	wake := func(id string, state store.WakeState) store.Wake {
		return store.Wake{ID: id, Principal: "alice", TaskID: "task-" + id, State: state, CreatedAt: t0, UpdatedAt: t0}
	}
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for _, id := range []string{"a", "b"} {
			if err := tx.InsertWake(ctx, wake(id, store.WakePending)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var got []int
	count := func(ctx context.Context, tx store.Tx, upTo int) error {
		n, err := tx.CountWakes(ctx, store.WakePending, upTo)
		got = append(got, n)
		return err
	}
	errFail := errors.New("this fn fails")
	fns := []func(ctx context.Context, tx store.Tx) error{
		func(ctx context.Context, tx store.Tx) error {
			if err := count(ctx, tx, 1); err != nil { // capped: 1
				return err
			}
			if err := count(ctx, tx, 10); err != nil { // 2
				return err
			}
			if err := tx.InsertWake(ctx, wake("c", store.WakePending)); err != nil {
				return err
			}
			return count(ctx, tx, 10) // 3
		},
		func(ctx context.Context, tx store.Tx) error {
			if err := tx.InsertWake(ctx, wake("d", store.WakePending)); err != nil {
				return err
			}
			if err := count(ctx, tx, 10); err != nil { // 4
				return err
			}
			return errFail // d is rolled back
		},
		func(ctx context.Context, tx store.Tx) error {
			if err := count(ctx, tx, 10); err != nil { // 3
				return err
			}
			if err := tx.InsertWake(ctx, wake("e", store.WakeFailed)); err != nil {
				return err
			}
			if err := count(ctx, tx, 10); err != nil { // 3
				return err
			}
			w, err := tx.GetWake(ctx, "alice", "a")
			if err != nil {
				return err
			}
			w.State = store.WakeDone
			if err := tx.SaveWake(ctx, w); err != nil {
				return err
			}
			if err := count(ctx, tx, 10); err != nil { // 2
				return err
			}
			return count(ctx, tx, 0) // 2, no cap
		},
	}
	release := blockWriter(t, s)
	before := sqlite.Batches(s)
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns { // queued in order: one batch runs them in this order
		wg.Go(func() { errs[i] = s.Update(ctx, fn) })
		waitQueued(t, s, i+1)
	}
	release()
	wg.Wait()
	if n := sqlite.Batches(s) - before; n != 1 {
		t.Fatalf("the Updates ran in %d transactions, want 1", n)
	}
	if errs[0] != nil || !errors.Is(errs[1], errFail) || errs[2] != nil {
		t.Fatalf("Updates: %v", errs)
	}
	if want := []int{1, 2, 3, 4, 3, 3, 2, 2}; !slices.Equal(got, want) {
		t.Errorf("counts %v, want %v", got, want)
	}
	if n, err := s.CountWakes(ctx, store.WakePending, 0); err != nil || n != 2 {
		t.Errorf("after the transaction: %d pending wakes (%v), want 2", n, err)
	}
}
