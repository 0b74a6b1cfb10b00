package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/channels-dev/channels/taskplane/store"
)

// The errors a database restart gives the store's callers — the pooled connections it cut fail
// their next use, and a server that is down refuses new ones — are store.Unavailable (a client is
// told 503 and to retry), while the database's answers to a statement are not.
func TestTheErrorsOfARestartAreUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := newSchema(t)
	s := open(t, u)
	if _, err := s.GetTask(ctx, "alice", "nope"); !errors.Is(err, store.ErrNotFound) || store.Unavailable(err) {
		t.Fatalf("a task not found: %v, Unavailable %v", err, store.Unavailable(err))
	}
	conn := connect(t, u)
	// Every connection of the store's pool is cut, as a restart cuts them.
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()`, u.Query().Get("application_name")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	var failed error
	for range 4 { // each pooled connection fails once; a fresh one works
		if _, err := s.GetTask(ctx, "alice", "nope"); !errors.Is(err, store.ErrNotFound) {
			failed = err
			break
		}
	}
	if failed == nil {
		t.Fatal("no read failed after its connections were cut")
	}
	if !store.Unavailable(failed) {
		t.Errorf("a read on a cut connection: %v is not Unavailable", failed)
	}

	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, refused := pgconn.Connect(cctx, "postgres://someone@127.0.0.1:1/somedb?connect_timeout=2")
	if refused == nil || !store.Unavailable(refused) {
		t.Errorf("a refused connection: %v is not Unavailable", refused)
	}

	_, stmtErr := conn.Exec(ctx, `SELECT 1/0`)
	if stmtErr == nil || store.Unavailable(stmtErr) || store.StorageFault(stmtErr) {
		t.Errorf("a statement's error: %v is Unavailable", stmtErr)
	}
}
