// Package postgres is the store.Store driver for PostgreSQL, on pgx v5. It is the store several
// Channels processes share (docs/operations.md, "Postgres for several processes").
//
// Import it for its side effect to make "postgres://" and "postgresql://" URLs open with
// store.Open, or call Open directly:
//
//	import _ "github.com/channels-dev/channels/taskplane/store/postgres"
//
//	s, err := store.Open(ctx, "postgres://channels@db.internal/channels?sslmode=verify-full")
//
// # Schema and migrations
//
// Open applies the embedded migrations (migrations/NNNN_name.sql, recorded in schema_migrations),
// each in a transaction of its own, so one migration's locks are released before the next takes
// its own (an older process still running may wait for one while holding what the next needs).
// Unqualified table names resolve through the connection's search_path, and
// pgx sends unknown URL parameters to the server as run-time parameters, so
// "?search_path=tenant_a" keeps a whole store in schema tenant_a; the tests give each test its own
// schema this way. Processes that start together serialize on an advisory lock keyed by the
// schema name, held across the migrations, so the schema migrates once.
//
// # Transactions
//
// Update runs its callback in a READ COMMITTED transaction and runs it again, a bounded number of
// times, when Postgres aborts it with a serialization failure (40001) or a deadlock (40P01).
//
// Group commit: Updates queue for a few committers (half the pool); each takes the Updates
// waiting for it, up to 32, runs their callbacks one after another in one transaction, each in a
// savepoint of its own (a failing callback is rolled back to it; the others keep their writes),
// and commits once. A lone Update takes no savepoint. Inside a transaction, statements are
// pipelined: BEGIN travels with the first statement, and writes whose result nobody reads
// (evidence, wakes, a claim's outcome, a context's touch, a new task) are held back and sent with
// the next statement that returns rows, the RELEASE of their savepoint, or the COMMIT; the task
// event hints follow the COMMIT in the same round trip. A held-back write's error is returned by
// the call that sent it, still wrapping the driver's error. An acceptance takes about six round
// trips instead of a dozen, and a WAL flush carries a group of them instead of one or two (see
// docs/benchmarks.md). Two Updates of one Store may share a transaction, so a callback must never
// wait for another Update of the same Store.
//
// Correctness under concurrency comes from row locks and unique indexes, not from isolation:
//
//   - InsertClaim and EnsureContext insert with ON CONFLICT DO NOTHING and then read. An insert
//     that meets a concurrent uncommitted row waits for its transaction, so concurrent callers
//     agree on one claim or one context id.
//   - AppendTaskEvent inserts the event under the sequence the caller allocated from the task
//     row it read; the caller writes the row with the new last sequence, guarded by its version.
//     A second writer of the same sequence waits on the first one's uncommitted event row and
//     fails (ErrConcurrentModification) once it commits, so the events of one task commit in
//     sequence order and a reader that resumes after sequence N never misses a lower sequence
//     committed later (the SSE Last-Event-ID guarantee).
//   - Prune skips rows that live transactions hold (FOR UPDATE SKIP LOCKED) instead of waiting.
//
// # Live wake counts
//
// The admission bound counts pending wakes in every acceptance. Counted in wakes, that read walked
// every index entry a pending wake left behind until vacuum removed it (588 µs per count on a
// fresh database under load, more than the acceptance's writes together). Triggers on wakes
// (migration 0005) keep the pending and active counts in wake_counts instead, in 64 slot rows
// chosen by transaction id, and CountWakes sums a column over the slots. The migration locks wakes
// against writers while it counts, so a wake committed meanwhile by another process is counted.
// A transaction gathers its changes to the counts in two transaction-local settings and adds them
// to its slot row once, at commit, by a deferred trigger (migration 0011): the slot row is locked
// only while the transaction commits, never for the length of a group of acceptances, and a
// transaction never locks two. CountWakes inside a transaction adds the settings, so it counts
// the transaction's own wakes; a savepoint rolled back restores them with its writes.
//
// # One clock for every process
//
// Leases, due times and lane slots are written by one process and compared by another. Store
// implements store.Clock: Now is this host's clock moved onto the database's, by an offset
// measured at Open and every minute after (clock.go), and the task plane, the delivery engine and
// the push notifier take it as their default clock. A host whose clock is off by more than a lease's
// margin then cannot take a delivery whose provider call is still in flight.
//
// # Engine features behind capability flags
//
// Two mechanisms are specific to PostgreSQL: LISTEN/NOTIFY and advisory locks (migrations).
// After an Update that appended task events commits, the driver sends one pg_notify hint per task,
// payload "principal/taskID", on the channel "channels_task_events/<schema>" (per schema, so stores
// sharing a database do not hear each other); a rolled-back Update sends none. Listen receives the
// hints on a dedicated connection outside the pool and reconnects with backoff when it drops.
// A hint NOTIFY cannot carry (a payload of 8,000 bytes or more) is not sent. Hints sent while it
// reconnects, or lost to a crash right after a commit, are gone, so a follower
// re-reads the event log by sequence and does not rely on every hint. Both mechanisms sit behind
// an internal feature set and the Listen capability, so a driver for a Postgres-wire engine
// without them (CockroachDB, YugabyteDB) changes the flags and the fallbacks — polling the event
// log by sequence, a lease row — and no caller changes: shared code asks Capabilities().Listen,
// never the driver type.
//
// The hints are sent after the commit (in their own transaction, which does not wait for its
// flush) rather than queued inside the writing transaction because
// a transaction that notifies holds a database-wide lock until its commit is flushed, which turns
// concurrent commits into one fsync each: on the 2-core dev machine, parallel Updates appending
// task events ran at about 1,000/s with in-transaction NOTIFY and about 5,300/s without
// (BenchmarkUpdate/AppendTaskEvent).
package postgres
