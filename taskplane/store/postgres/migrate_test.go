package postgres_test

import (
	"context"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/postgres"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// A checkpoint stored while checkpoints were kept per (principal, source) survives migration
// 0006, which keys the table by (principal, source, instance): it stays under instance "", an
// instance without a position of its own reads it, and the first instance that advances takes it
// over and never goes behind it.
func TestCheckpointsFromBeforeInstancesSurviveTheMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Back to the schema before 0006, with a checkpoint in it.
	u, conn := beforeMigration(t, `ALTER TABLE checkpoints DROP CONSTRAINT checkpoints_pkey;
		ALTER TABLE checkpoints DROP COLUMN instance;
		ALTER TABLE checkpoints ADD PRIMARY KEY (principal, source);
		DELETE FROM schema_migrations WHERE version = 6`)
	if _, err := conn.Exec(ctx, `INSERT INTO checkpoints (principal, source, position, seq, version, updated_at)
		VALUES ('alice', 'email', 'uid:40', 40, 2, $1)`, t0); err != nil {
		t.Fatal(err)
	}

	storetest.CheckCheckpointFromBeforeInstances(t, open(t, u), t0)
}

// Wakes stored before migration 0007 keep the order they were served in, (created_at, id), and a
// wake admitted after it comes after them even with the same created_at; the queue's indexes are
// rebuilt in the new order.
func TestWakesFromBeforeTheirInsertionOrderKeepTheirOrderThroughTheMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Back to the schema before 0007, with wakes in it.
	u, conn := beforeMigration(t, `ALTER TABLE wakes DROP COLUMN seq;
		CREATE INDEX wakes_state_created ON wakes (state, created_at, id);
		CREATE INDEX wakes_live ON wakes (created_at, id) WHERE state IN ('pending', 'active');
		DELETE FROM schema_migrations WHERE version = 7`)
	for _, w := range []struct {
		id, task string
		created  time.Time
	}{{"w-b", "t1", t0}, {"w-a", "t2", t0}, {"w-c", "t3", t0.Add(-time.Second)}} {
		if _, err := conn.Exec(ctx, `INSERT INTO wakes (principal, id, task_id, activation, state, created_at, updated_at)
			VALUES ('alice', $1, $2, 1, 'pending', $3, $3)`, w.id, w.task, w.created); err != nil {
			t.Fatal(err)
		}
	}

	s := open(t, u)
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.InsertWake(ctx, store.Wake{Principal: "alice", ID: "w-0", TaskID: "t4", Activation: 1,
			State: store.WakePending, CreatedAt: t0, UpdatedAt: t0})
	}); err != nil {
		t.Fatal(err)
	}
	ids := func(ws []store.Wake) []string {
		var out []string
		for _, w := range ws {
			out = append(out, w.ID)
		}
		return out
	}
	want := []string{"w-c", "w-a", "w-b", "w-0"}
	ws, err := s.ListWakes(ctx, store.WakePending, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(ws); !slices.Equal(got, want) {
		t.Errorf("ListWakes after the migration = %v, want %v", got, want)
	}
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		ws, err = tx.ClaimWakes(ctx, store.WakeClaim{Owner: "p1", Now: t0, LeaseUntil: t0.Add(time.Minute), Limit: 10})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := ids(ws); !slices.Equal(got, want) {
		t.Errorf("ClaimWakes after the migration = %v, want %v", got, want)
	}
	for name, def := range map[string]string{
		"wakes_state_created": "(state, created_at, seq)",
		"wakes_live":          "(created_at, seq) WHERE",
	} {
		var got string
		if err := conn.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema()
			AND indexname = $1`, name).Scan(&got); err != nil {
			t.Fatalf("index %s: %v", name, err)
		}
		if !strings.Contains(got, def) {
			t.Errorf("index %s is %q, want it on %s", name, got, def)
		}
	}
}

// beforeMigration makes a schema with every migration applied, then runs undo on it (SQL that
// takes it back to before a migration), and returns its URL and a connection for seeding it,
// closed when the test ends.
func beforeMigration(t *testing.T, undo string) (*url.URL, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	u := newSchema(t)
	open(t, u).Close()
	conn := connect(t, u)
	if _, err := conn.Exec(ctx, undo); err != nil {
		t.Fatal(err)
	}
	return u, conn
}

// A role that only uses a store another role migrated — no CREATE on its schema, the tables'
// rows its to read and write — opens it: an up-to-date store creates nothing, so asks for no
// CREATE; and Inspect, config check's view of it, agrees. The same role on a store that still
// needs its schema is refused by both.
func TestARoleWithoutCreateUsesAMigratedStore(t *testing.T) {
	ctx := context.Background()
	u := newSchema(t)
	schema := u.Query().Get("search_path")
	owner := connect(t, u)
	role := "user_" + strings.ReplaceAll(schema, "storetest_", "")
	id := pgx.Identifier{schema}.Sanitize()
	if _, err := owner.Exec(ctx, `CREATE ROLE `+role+` LOGIN; GRANT USAGE ON SCHEMA `+id+` TO `+role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { owner.Exec(ctx, `DROP OWNED BY `+role+`; DROP ROLE `+role) })
	as := *u
	as.User = url.User(role)

	if _, err := postgres.Inspect(ctx, &as); err == nil || !strings.Contains(err.Error(), "may not create tables") {
		t.Fatalf("Inspect of a store without its schema, as a role without CREATE: %v", err)
	}
	open(t, u).Close() // the owner migrates it
	if _, err := owner.Exec(ctx, `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA `+id+` TO `+role+`;
		GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA `+id+` TO `+role); err != nil {
		t.Fatal(err)
	}
	if in, err := postgres.Inspect(ctx, &as); err != nil || in.Version != in.Latest {
		t.Fatalf("Inspect of the migrated store: %+v, %v", in, err)
	}
	s, err := postgres.Open(ctx, &as)
	if err != nil {
		t.Fatalf("a role without CREATE could not open a migrated store: %v", err)
	}
	s.Close()
}

// A process of an older build that has locked a wake in its transaction (a turn reading the wake
// it then writes: GetWake in a transaction, then SaveWake) while migration 0011 starts goes on to
// write the wake and commits; neither it nor the migration dies of a deadlock, and the counts
// hold its change.
func TestAWakeLockedByAnOlderProcessDoesNotDeadlockMigration0011(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Back to the schema before 0011, with a pending wake in it.
	u, conn := beforeMigration(t, undoWakeCountsAtCommit(t))
	if _, err := conn.Exec(ctx, `INSERT INTO wakes (principal, id, task_id, activation, state, created_at, updated_at)
		VALUES ('alice', 'w1', 't1', 1, 'pending', now(), now())`); err != nil {
		t.Fatal(err)
	}

	older, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer older.Rollback(ctx) //nolint:errcheck
	if _, err := older.Exec(ctx, `SELECT id FROM wakes WHERE principal = 'alice' AND id = 'w1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	opened := openAndClose(ctx, u)
	waitLockWaitOn(t, u, "%0011_wake_counts_at_commit%")
	olderWritesAndCommits(t, older, "write of its wake", `UPDATE wakes SET state = 'active' WHERE principal = 'alice' AND id = 'w1'`)
	if err := <-opened; err != nil {
		t.Fatalf("open (migration 0011) while an older process wrote its locked wake: %v", err)
	}
	s := open(t, u)
	for state, want := range map[store.WakeState]int{store.WakePending: 0, store.WakeActive: 1} {
		if n, err := s.CountWakes(ctx, state, 0); err != nil || n != want {
			t.Errorf("CountWakes(%s) = %d, %v; want %d", state, n, err, want)
		}
	}
}

// undoWakeCountsAtCommit returns SQL that takes a schema back to before migration 0011: 0005's
// triggers instead of 0011's.
func undoWakeCountsAtCommit(t *testing.T) string {
	t.Helper()
	track, err := os.ReadFile("migrations/0005_wake_counts.sql")
	if err != nil {
		t.Fatal(err)
	}
	_, triggers, ok := strings.Cut(string(track), "DO $migration$")
	if !ok {
		t.Fatal("0005 has no DO block")
	}
	return `DROP FUNCTION wake_counts_note() CASCADE; DROP FUNCTION wake_counts_apply() CASCADE;
		DO $migration$` + triggers + `
		DELETE FROM schema_migrations WHERE version = 11;`
}

// A store of a build before migration 0010 is opened by this one while a process of that build
// accepts an event: the acceptance has read the claim and written its wake, and inserts the claim
// only once 0010 has begun to build its claims indexes, so it waits for them; 0011 then waits for
// the acceptance's wake. Neither dies of a deadlock: the new process starts and the acceptance
// commits.
func TestAnOlderAcceptanceDuringMigrations0010And0011DoesNotFailTheStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, conn := beforeMigration(t, undoWakeCountsAtCommit(t)+`
		DROP INDEX claims_done_task; DROP INDEX claims_done_untasked;
		DELETE FROM schema_migrations WHERE version = 10`)

	older, err := conn.Begin(ctx) // the acceptance, as an older build runs it
	if err != nil {
		t.Fatal(err)
	}
	defer older.Rollback(ctx) //nolint:errcheck
	if _, err := older.Exec(ctx, `SELECT * FROM claims WHERE principal = 'alice' AND source = 'webhook' AND identity = 'e1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := older.Exec(ctx, `INSERT INTO wakes (principal, id, task_id, activation, state, created_at, updated_at)
		VALUES ('alice', 'w1', 't1', 1, 'pending', now(), now())`); err != nil {
		t.Fatal(err)
	}
	opened := openAndClose(ctx, u)
	waitLockWaitOn(t, u, "%0011_wake_counts_at_commit%") // 0010 is done and holds its locks
	olderWritesAndCommits(t, older, "claim insert", `INSERT INTO claims (principal, source, identity, state, task_id, created_at, updated_at)
		VALUES ('alice', 'webhook', 'e1', 'done', 't1', now(), now())`)
	if err := <-opened; err != nil {
		t.Fatalf("open (migrations 0010 and 0011) while an older process accepted an event: %v", err)
	}
	s := open(t, u)
	if n, err := s.CountWakes(ctx, store.WakePending, 0); err != nil || n != 1 {
		t.Errorf("CountWakes(pending) = %d, %v; want the acceptance's 1", n, err)
	}
}

// openAndClose opens a store of u in the background (migrating it), closes it, and sends the
// outcome of the open.
func openAndClose(ctx context.Context, u *url.URL) <-chan error {
	opened := make(chan error, 1)
	go func() {
		s, err := postgres.Open(ctx, u)
		if err == nil {
			s.Close()
		}
		opened <- err
	}()
	return opened
}

// olderWritesAndCommits runs sql (what it does, for the error) in older, an older process's
// transaction, within 10 s, and commits it; it ends older either way, so a migration waiting on
// it goes on.
func olderWritesAndCommits(t *testing.T, older pgx.Tx, what, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := older.Exec(ctx, sql); err != nil {
		t.Errorf("the older process's %s: %v", what, err)
	} else if err := older.Commit(ctx); err != nil {
		t.Errorf("the older process's commit: %v", err)
	}
	older.Rollback(context.Background()) //nolint:errcheck // ends it if sql failed
}
