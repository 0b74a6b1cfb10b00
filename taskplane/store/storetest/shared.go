package storetest

import (
	"context"
	"net/url"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/taskplane/store"
)

// OpenPostgresShared opens n stores on one fresh Postgres schema (TEST_DATABASE_URL, as
// OpenPostgres): n separate pools, standing in for n Channels processes that share a database.
// The stores are closed and the schema dropped when the test ends. Like OpenPostgres it skips
// without TEST_DATABASE_URL, except under CI=true.
func OpenPostgresShared(t *testing.T, n int) []store.Store {
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
		skipOrFail(t, "no store driver is registered for scheme "+u.Scheme)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := "storetest_" + randomHex(t, 8)
	if err := execAdmin(ctx, raw, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("create schema %s on %s: %v", schema, store.Redact(u), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := execAdmin(ctx, raw, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	out := make([]store.Store, n)
	for i := range out {
		s, err := store.Open(ctx, u.String())
		if err != nil {
			t.Fatalf("open postgres store %d: %v", i, err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("close postgres store %d: %v", i, err)
			}
		})
		out[i] = s
	}
	return out
}
