package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// OpenPostgresShared opens n stores on one fresh Postgres schema (see PostgresURL): n separate
// pools, standing in for n Channels processes that share a database. The stores are closed and
// the schema dropped when the test ends.
func OpenPostgresShared(t *testing.T, n int) []store.Store {
	t.Helper()
	raw := PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := make([]store.Store, n)
	for i := range out {
		s, err := store.Open(ctx, raw)
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

// Clocked is a store that keeps a clock (store.Clock), as a store shared by several processes
// does: components built on it without a clock of their own take this one.
type Clocked struct {
	store.Store
	Clock func() time.Time
}

// Now returns the store's time.
func (c Clocked) Now() time.Time { return c.Clock() }
