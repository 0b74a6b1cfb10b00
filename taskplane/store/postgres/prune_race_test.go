package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/postgres"
	"github.com/jackc/pgx/v5"
)

// TestADeliveryRetriedWhileAPruneWaitsForItIsKept: an operator retries a failed delivery older
// than the retention window (delivery.Engine.Resolve with Retry: read it in a transaction, set it
// prepared, record a "resolve" attempt) while another process's retention prunes settled
// deliveries and waits for its row; the prune reads the row again and keeps it, and its attempts.
func TestADeliveryRetriedWhileAPruneWaitsForItIsKept(t *testing.T) {
	ctx := context.Background()
	old := t0.Add(-48 * time.Hour)
	u := newSchema(t)
	a, b := open(t, u), open(t, u)
	d := store.Delivery{Principal: "alice", ID: "d1", TaskID: "t1", Source: "slack", Operation: "reply",
		Recovery: "lookup", PayloadDigest: "sha256:d1", Payload: []byte(`{}`), State: store.DeliveryFailed,
		Attempts: 3, NextAttemptAt: old, CreatedAt: old, UpdatedAt: old}
	if err := a.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		_, _, err := tx.InsertDelivery(ctx, d)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	read, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseRetry := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseRetry() // a failing wait must not leave the stores' Close waiting for it
	resolved := make(chan error, 1)
	go func() {
		resolved <- a.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			cur, err := tx.GetDelivery(ctx, "alice", "d1")
			if err != nil {
				return err
			}
			close(read)
			<-release
			cur.State, cur.Attempts, cur.NextAttemptAt, cur.UpdatedAt = store.DeliveryPrepared, 0, t0, t0
			if err := tx.UpdateDelivery(ctx, cur); err != nil {
				return err
			}
			return tx.InsertDeliveryAttempt(ctx, store.DeliveryAttempt{Principal: "alice", DeliveryID: "d1",
				Kind: "resolve", Outcome: "retry", Owner: "operator", CreatedAt: t0})
		})
	}()
	<-read
	pruned := make(chan int, 1)
	go func() {
		var n int
		if err := b.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			n, err = tx.PruneDeliveries(ctx, t0.Add(-time.Hour), []string{"completed"}, 500)
			return err
		}); err != nil {
			t.Error(err)
		}
		pruned <- n
	}()
	waitLockWaitOn(t, u, "%DELETE FROM deliveries%")
	releaseRetry()
	if err := <-resolved; err != nil {
		t.Fatal(err)
	}
	n := <-pruned
	got, err := a.GetDelivery(ctx, "alice", "d1")
	if err != nil {
		atts, _ := a.ListDeliveryAttempts(ctx, "alice", "d1")
		t.Fatalf("the delivery the operator retried (prepared, updated now) was pruned (prune deleted %d): %v; its attempts left behind: %d", n, err, len(atts))
	}
	if got.State != store.DeliveryPrepared {
		t.Errorf("state %s, want prepared", got.State)
	}
}

// gatedPruner opens the store as a role whose reads of table pass through a gate that sleeps 1 s
// on the row id while a statement like query (a LIKE pattern) runs: a prune's statement takes its
// snapshot, then sleeps there before it locks the row, which holds open the window in which
// another transaction commits. wait returns once the pruner sleeps in the gate.
func gatedPruner(t *testing.T, u *url.URL, table, id, query string) (pruner *postgres.Store, wait func()) {
	t.Helper()
	ctx := context.Background()
	schema := u.Query().Get("search_path")
	role := "r" + schema
	conn := connect(t, u)
	for _, q := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT USAGE, CREATE ON SCHEMA ` + schema + ` TO ` + role,
		`GRANT ALL ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + role,
		`GRANT ALL ON ALL SEQUENCES IN SCHEMA ` + schema + ` TO ` + role,
		`CREATE FUNCTION prune_gate(id text) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
		BEGIN
			IF current_setting('test.gate', true) = 'on' AND id = '` + id + `' AND current_query() LIKE '` + query + `'
			THEN PERFORM pg_sleep(1); END IF;
			RETURN true;
		END $$`,
		`ALTER TABLE ` + table + ` ENABLE ROW LEVEL SECURITY`,
		`CREATE POLICY gate ON ` + table + ` USING (prune_gate(id)) WITH CHECK (true)`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, u.String())
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, `DROP OWNED BY `+role)
		_, _ = c.Exec(ctx, `DROP ROLE `+role)
	})
	pu := *u
	pu.User = nil
	setParam(&pu, "user", role)
	setParam(&pu, "test.gate", "on")
	setParam(&pu, "application_name", schema+"_pruner")
	return open(t, &pu), func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1
				AND wait_event = 'PgSleep'`, schema+"_pruner").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the prune never reached %s %s", table, id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// pruneAsync runs a prune of terminal work older than t0 on s, and returns its outcome's channel.
func pruneAsync(s *postgres.Store) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			_, err := tx.Prune(ctx, t0, []string{"completed"}, 100)
			return err
		})
	}()
	return done
}

// TestWhatATaskGainsWhileAPruneScansGoesWithIt: an anchor or a push config committed for a
// terminal task after a prune's snapshot and before the prune locks the task is deleted with the
// task, not left behind for good (an anchor is deleted only with its task; a push config would
// keep its token until the notifier's backstop).
func TestWhatATaskGainsWhileAPruneScansGoesWithIt(t *testing.T) {
	old := t0.Add(-48 * time.Hour)
	for name, c := range map[string]struct {
		put   func(ctx context.Context, tx store.Tx) error
		there func(s *postgres.Store) error
	}{
		"anchor": {
			put: func(ctx context.Context, tx store.Tx) error {
				return tx.PutAnchor(ctx, store.Anchor{Principal: "alice", Source: "slack", ProviderID: "m1", TaskID: "t1", CreatedAt: t0})
			},
			there: func(s *postgres.Store) error {
				_, err := s.GetAnchor(context.Background(), "alice", "slack", "m1")
				return err
			},
		},
		"push config": {
			put: func(ctx context.Context, tx store.Tx) error {
				_, err := tx.PutPushConfig(ctx, store.PushConfig{Principal: "alice", TaskID: "t1", ID: "p1", URL: "https://x",
					Token: "secret", Registration: "r1", CreatedAt: t0, UpdatedAt: t0}, 10)
				return err
			},
			there: func(s *postgres.Store) error {
				_, err := s.GetPushConfig(context.Background(), "alice", "t1", "p1")
				return err
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			u := newSchema(t)
			a := open(t, u) // the test's own role bypasses row security: never gated
			if err := a.Update(ctx, func(ctx context.Context, tx store.Tx) error {
				if err := tx.InsertContext(ctx, store.Context{Principal: "alice", ID: "c1", CreatedAt: old, LastEventAt: old}); err != nil {
					return err
				}
				return tx.InsertTask(ctx, store.Task{Principal: "alice", ID: "t1", ContextID: "c1", State: "completed",
					StatusTime: old, Version: 1, CreatedAt: old, UpdatedAt: old})
			}); err != nil {
				t.Fatal(err)
			}
			p, sleeping := gatedPruner(t, u, "tasks", "t1", "%")
			pruned := pruneAsync(p)
			sleeping()
			if err := a.Update(ctx, c.put); err != nil {
				t.Fatalf("put while the prune scans: %v", err)
			}
			if err := <-pruned; err != nil {
				t.Fatal(err)
			}
			if _, err := a.GetTask(ctx, "alice", "t1"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("the prune kept t1 (%v): the put was meant to commit before the prune locked it", err)
			}
			if err := c.there(a); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the %s outlives its pruned task (%v)", name, err)
			}
		})
	}
}

// TestATaskPutInAContextWhileAPruneScansItKeepsTheContext: a task committed into an idle context
// after the contexts statement's snapshot and before it locks the context keeps the context (the
// acceptance touches the context's row, which the prune then reads again).
func TestATaskPutInAContextWhileAPruneScansItKeepsTheContext(t *testing.T) {
	ctx := context.Background()
	old := t0.Add(-48 * time.Hour)
	u := newSchema(t)
	a := open(t, u)
	if err := a.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.InsertContext(ctx, store.Context{Principal: "alice", ID: "c1", CreatedAt: old, LastEventAt: old})
	}); err != nil {
		t.Fatal(err)
	}
	p, sleeping := gatedPruner(t, u, "contexts", "c1", "DELETE FROM contexts%")
	pruned := pruneAsync(p)
	sleeping()
	if err := a.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.GetContext(ctx, "alice", "c1"); err != nil {
			return err
		}
		if err := tx.InsertTask(ctx, store.Task{Principal: "alice", ID: "t2", ContextID: "c1", State: "working",
			StatusTime: t0, Version: 1, CreatedAt: t0, UpdatedAt: t0}); err != nil {
			return err
		}
		return tx.TouchContext(ctx, "alice", "c1", t0)
	}); err != nil {
		t.Fatalf("accept: %v", err)
	}
	if err := <-pruned; err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetContext(ctx, "alice", "c1"); err != nil {
		t.Errorf("the context of live task t2 is gone: %v", err)
	}
}

// TestASchemaNewerThanTheBinaryIsRefused: a store migrated by a newer build is not opened by an
// older one, which would write rows the newer schema does not expect.
func TestASchemaNewerThanTheBinaryIsRefused(t *testing.T) {
	u := newSchema(t)
	open(t, u).Close()
	conn := connect(t, u)
	if _, err := conn.Exec(context.Background(), `INSERT INTO schema_migrations (version, name) VALUES (99, 'future')`); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Open(context.Background(), u)
	if err == nil {
		s.Close()
		t.Fatal("a schema at version 99 was opened")
	}
	if !strings.Contains(err.Error(), "newer") {
		t.Errorf("refused with %q, want it to say the schema is newer", err)
	}
}
