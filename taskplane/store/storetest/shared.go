package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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

// CheckCheckpointFromBeforeInstances checks s, just migrated from a schema without per-instance
// checkpoints that held alice's email position "uid:40" (seq 40, version 2, updated at
// updated): an instance without a position of its own reads it, the first to advance takes it
// over, and another instance starts with a position of its own.
func CheckCheckpointFromBeforeInstances(t *testing.T, s store.Store, updated time.Time) {
	t.Helper()
	ctx := context.Background()
	old := store.Checkpoint{Principal: "alice", Source: "email", Position: []byte("uid:40"), Seq: 40, Version: 2, UpdatedAt: updated}
	got, err := s.GetCheckpoint(ctx, "alice", "email", "box")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(old, got); d != "" {
		t.Errorf("GetCheckpoint after the migration (-want +got):\n%s", d)
	}
	var after store.Checkpoint
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.AdvanceCheckpoint(ctx, store.Checkpoint{Principal: "alice", Source: "email", Instance: "box",
			Position: []byte("uid:12"), Seq: 12, UpdatedAt: updated.Add(time.Minute)}); err != nil {
			return err
		}
		after, err = tx.AdvanceCheckpoint(ctx, store.Checkpoint{Principal: "alice", Source: "email", Instance: "other",
			Position: []byte("uid:3"), Seq: 3, UpdatedAt: updated.Add(time.Minute)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if after.Version != 1 || after.Seq != 3 {
		t.Errorf("a second instance's first advance = %+v, want its own position at version 1", after)
	}
	all, err := s.ListCheckpoints(ctx, "email")
	if err != nil {
		t.Fatal(err)
	}
	taken := old
	taken.Instance = "box"
	if d := cmp.Diff([]store.Checkpoint{taken, after}, all); d != "" {
		t.Errorf("checkpoints after the first advances (-want +got):\n%s", d)
	}
}
