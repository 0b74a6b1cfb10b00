package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/groupcommit"
)

func init() {
	opener := func(ctx context.Context, u *url.URL) (store.Store, error) {
		s, err := Open(ctx, u)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	store.Register("postgres", opener)
	store.Register("postgresql", opener)
}

// features are the Postgres mechanisms the driver uses beyond plain SQL. Each one sits behind a
// flag so that a driver for a Postgres-wire engine lacking it (docs/operations.md, "Postgres for several processes") changes the flag and
// the fallback, not the callers.
type features struct {
	// notify: pg_notify after an Update that appended task events, LISTEN in Listen
	// (Capabilities.Listen).
	notify bool
	// advisoryLocks: pg_advisory_lock serializes migrations (else a lease row would).
	advisoryLocks bool
}

var postgresFeatures = features{notify: true, advisoryLocks: true}

// ErrClosed is returned by Update and Listen after Close, and by Updates that Close interrupted.
var ErrClosed = fmt.Errorf("postgres %w", store.ErrClosed)

var errNoLockMechanism = errors.New("no lock mechanism for this engine")

// Update retry policy for serialization failures and deadlocks.
const (
	maxUpdateAttempts = 5
	retryBaseDelay    = 2 * time.Millisecond
)

// Store is a store.Store on a Postgres database, safe for use by many processes at once.
type Store struct {
	reader
	pool     *pgxpool.Pool
	features features
	channel  string // LISTEN/NOTIFY channel of this schema's task events
	// migratedFrom is the schema version Open found under the migration lock (store.Migrated).
	migratedFrom int

	closeOnce sync.Once
	closing   context.Context // canceled by Close; ends pending Updates and Listens
	close     context.CancelFunc

	queue *groupcommit.Queue // Updates waiting for a committer (see group.go)

	log atomic.Pointer[slog.Logger] // nil: slog.Default() (tests set one)

	local         func() time.Time                // this host's wall clock (time.Now)
	elapsed       func() time.Duration            // a monotonic clock: the time since Open (newElapsed)
	sampleSuspend func()                          // keeps elapsed counting a suspended host's time (keepClock)
	clock         atomic.Pointer[databaseClockAt] // the last measurement of the database's clock (see clock.go)
	latest        atomic.Int64                    // the latest time Now returned, in Unix nanoseconds (0: none yet)
	clockDone     sync.WaitGroup                  // keepClock
}

var (
	_ store.Store = (*Store)(nil)
	_ store.Clock = (*Store)(nil)
)

// Open connects to the database named by u (a postgres:// or postgresql:// URL, with any
// parameters pgx understands), applies the embedded migrations to the first schema of the
// connection's search_path, and returns the store. Unknown URL parameters are sent to the server as
// run-time parameters, so "?search_path=tenant_a" puts the tables in schema tenant_a (which must
// exist). Without pool_max_conns in the URL the pool holds up to max(8, 4×GOMAXPROCS) connections.
// Errors never contain the password.
func Open(ctx context.Context, u *url.URL) (*Store, error) { return open(ctx, u, time.Now, newElapsed) }

// sessionDefaults are run-time parameters every connection gets unless the URL sets them: a name
// for pg_stat_activity, and bounds on a session that stops answering mid-transaction — a process
// frozen, or its host cut off from the network, before its COMMIT arrives. The server would keep
// such a session "idle in transaction", holding its row locks (an event's claim that a
// redelivery to another process waits on, a wake counter slot every process updates), until TCP
// gave up, two hours later by default. With these the server ends it within about a minute and
// the other processes go on. No transaction of the store waits on its client for long: its fns
// run no I/O but their statements.
var sessionDefaults = map[string]string{
	"application_name":                    "channels",
	"idle_in_transaction_session_timeout": "60s",
	"tcp_keepalives_idle":                 "30",
	"tcp_keepalives_interval":             "10",
	"tcp_keepalives_count":                "3",
}

// setSessionDefaults adds to params the sessionDefaults the URL does not set.
func setSessionDefaults(params map[string]string) {
	for k, v := range sessionDefaults {
		if _, ok := params[k]; !ok {
			params[k] = v
		}
	}
}

// open is Open on a host whose wall clock is local (tests make it skewed) and whose monotonic
// clock is clock's (tests fake a suspend).
func open(ctx context.Context, u *url.URL, local func() time.Time, clock func() (elapsed func() time.Duration, sample func())) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		// pgx errors may quote the connection string; say only what was wrong.
		return nil, errors.New("postgres: invalid connection URL")
	}
	if !u.Query().Has("pool_max_conns") {
		cfg.MaxConns = int32(max(8, 4*runtime.GOMAXPROCS(0)))
	}
	setSessionDefaults(cfg.ConnConfig.RuntimeParams)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	s := &Store{reader: reader{q: pool}, pool: pool, features: postgresFeatures, local: local}
	s.elapsed, s.sampleSuspend = clock()
	s.closing, s.close = context.WithCancel(context.Background())
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	schema, err := s.migrate(ctx)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	s.channel = notifyChannel(schema)
	if err := s.measureClock(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s.clockDone.Add(1)
	go s.keepClock()
	s.startCommitters(committers(cfg.MaxConns))
	return s, nil
}

// MigratedFrom returns the schema version Open found under the migration lock.
func (s *Store) MigratedFrom() int { return s.migratedFrom }

// Capabilities reports a shared, multi-process store with cross-process notifications.
func (s *Store) Capabilities() store.Capabilities {
	return store.Capabilities{Name: "postgres", Listen: s.features.notify, MultiProcess: true}
}

// Done is closed when Close is called.
func (s *Store) Done() <-chan struct{} { return s.closing.Done() }

// Close cancels pending Updates and Listens, then closes the pool. It is safe to call twice.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.close()       // statements in flight fail, so the committers finish their groups
		s.queue.Close() // queued Updates fail; returns once the committers have stopped
		s.clockDone.Wait()
		s.pool.Close()
	})
	return nil
}

// bind returns a context that also ends when the store closes.
func (s *Store) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.closing, func() { cancel(ErrClosed) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// notifySQL sends the hints of one committed Update. It follows the COMMIT in the same pipeline
// (one round trip), in a transaction of its own that commits without waiting for its WAL flush: a
// hint needs no durability. It is not queued inside the writing transaction because a
// transaction that notifies holds a database-wide lock from queuing its notifications until its
// commit is flushed: every commit that appends events would then wait for the previous one's
// fsync. Measured on the dev machine (BenchmarkUpdate/AppendTaskEvent), notifying inside the
// transaction cut throughput about five times. The cost is that a crash between the commit and
// the hint loses the hint, which a follower's re-read of the event log covers, as for any lost
// hint. Failures are logged, not returned: the Update itself has committed.
// maxNotifyPayload is Postgres's bound on a NOTIFY payload: it must be shorter than this.
const maxNotifyPayload = 8000

const notifySQL = `SELECT set_config('synchronous_commit', 'off', true),
	(SELECT count(*) FROM (SELECT pg_notify($1, h) FROM unnest($2::text[]) AS h) AS sent)`

// retryable reports whether err means the transaction was aborted by a serialization failure or a
// deadlock, so running it again may succeed.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return pgErr.Code == "40001" || pgErr.Code == "40P01"
}
