package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/taskplane/store"
)

// ForEachDriver runs fn as one subtest per driver, named "sqlite" and "postgres", handing it the
// matching open helper. Shared code (the task plane, the bindings) uses it to prove it behaves
// the same on every driver.
func ForEachDriver(t *testing.T, fn func(t *testing.T, open func(t *testing.T) store.Store)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { fn(t, OpenSQLite) })
	t.Run("postgres", func(t *testing.T) { fn(t, OpenPostgres) })
}

// OpenSQLite opens a fresh SQLite store in a temporary directory and closes it when the test ends.
func OpenSQLite(t *testing.T) store.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "channels.db")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := store.Open(ctx, store.SQLiteURL(path))
	if err != nil {
		t.Fatalf("open sqlite store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close sqlite store: %v", err)
		}
	})
	return s
}

// PostgresURL returns TEST_DATABASE_URL pointed, by search_path, at a freshly created schema of its
// own (so tests run in parallel without seeing each other), dropped when the test ends. Stores
// opened on it migrate the schema. Tests that start a channels process use it directly; the
// others use OpenPostgres.
//
// Without TEST_DATABASE_URL the test is skipped, except under CI=true, where it fails: CI must
// not pass by silently skipping the Postgres half of the suite.
func PostgresURL(t *testing.T) string {
	t.Helper()
	raw := os.Getenv("TEST_DATABASE_URL")
	if raw == "" {
		skipOrFail(t, "TEST_DATABASE_URL is not set; it names the Postgres server the postgres tests use")
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL: invalid URL")
	}
	if !slices.Contains(store.Schemes(), u.Scheme) {
		skipOrFail(t, "no store driver is registered for scheme "+u.Scheme+
			" (blank-import the postgres driver in storetest/drivers.go)")
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := "storetest_" + randomHex(t, 8)
	if err := execAdmin(ctx, raw, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("create schema %s on %s: %v", schema, store.Redact(u), err)
	}
	// Registered before any store's Close, so it runs after them (cleanups run last-in first-out).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := execAdmin(ctx, raw, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})

	// search_path as a runtime parameter puts every unqualified table, migrations included, in
	// the test's schema.
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// OpenPostgres opens a store on a fresh schema of its own (see PostgresURL), closed when the test
// ends.
func OpenPostgres(t *testing.T) store.Store {
	t.Helper()
	return OpenPostgresShared(t, 1)[0]
}

func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// execAdmin runs one statement on its own connection, outside any store.
func execAdmin(ctx context.Context, rawURL, sql string) error {
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// TerminateBackends ends every backend of the Postgres server at adminURL (TEST_DATABASE_URL)
// whose application_name is app, as a database restart cuts a store's connections, and returns
// how many it ended.
func TerminateBackends(ctx context.Context, adminURL, app string) (int, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int
	err = conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&n)
	return n, err
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
