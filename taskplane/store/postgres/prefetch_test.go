package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// An acceptance's prefetched claim and context serve the reads of the same keys that follow, once:
// a read of other keys, or a second read, goes to the store and sees the transaction's own writes.
func TestPrefetchedAcceptanceReadsServeTheirOwnKeysOnce(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	s := open(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old := t0.Add(-time.Hour)
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.EnsureContext(ctx, "alice", "slack", "C1", "ctx-1", old); err != nil {
			return err
		}
		return store.InsertNewClaim(ctx, tx, store.Claim{Principal: "alice", Source: "slack", Identity: "Ev1", Digest: "d",
			State: store.ClaimDone, OutcomeKind: "task", TaskID: "t1", ContextID: "ctx-1", CreatedAt: old, UpdatedAt: old})
	}); err != nil {
		t.Fatal(err)
	}
	err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		// A known identity and conversation.
		if err := store.PrefetchAcceptance(ctx, tx, "alice", "slack", "Ev1", "C1"); err != nil {
			return err
		}
		if c, err := tx.GetClaim(ctx, "alice", "slack", "Ev1"); err != nil || c.TaskID != "t1" {
			t.Errorf("prefetched GetClaim(Ev1) = %+v, %v; want task t1", c, err)
		}
		if _, err := tx.GetClaim(ctx, "alice", "slack", "Ev2"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetClaim(Ev2) after a prefetch of Ev1 = %v, want not found", err)
		}
		if id, err := tx.EnsureContext(ctx, "alice", "slack", "C1", "ctx-new", t0); err != nil || id != "ctx-1" {
			t.Errorf("prefetched EnsureContext(C1) = %q, %v; want ctx-1", id, err)
		}
		// A new identity and conversation: the second read of each sees the transaction's writes.
		if err := store.PrefetchAcceptance(ctx, tx, "alice", "slack", "Ev3", "C3"); err != nil {
			return err
		}
		if _, err := tx.GetClaim(ctx, "alice", "slack", "Ev3"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("prefetched GetClaim(Ev3) = %v, want not found", err)
		}
		if err := store.InsertNewClaim(ctx, tx, store.Claim{Principal: "alice", Source: "slack", Identity: "Ev3", Digest: "d",
			State: store.ClaimDone, OutcomeKind: "task", TaskID: "t3", CreatedAt: t0, UpdatedAt: t0}); err != nil {
			return err
		}
		if c, err := tx.GetClaim(ctx, "alice", "slack", "Ev3"); err != nil || c.TaskID != "t3" {
			t.Errorf("second GetClaim(Ev3) = %+v, %v; want the claim this transaction inserted", c, err)
		}
		if id, err := tx.EnsureContext(ctx, "alice", "slack", "C3", "ctx-3", t0); err != nil || id != "ctx-3" {
			t.Errorf("prefetched EnsureContext(C3) of no context = %q, %v; want the candidate ctx-3", id, err)
		}
		if id, err := tx.EnsureContext(ctx, "alice", "slack", "C3", "ctx-other", t0); err != nil || id != "ctx-3" {
			t.Errorf("second EnsureContext(C3) = %q, %v; want ctx-3", id, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.GetContext(ctx, "alice", "ctx-1")
	if err != nil {
		t.Fatal(err)
	}
	if !c.LastEventAt.Equal(t0) {
		t.Errorf("ctx-1's last activity = %v, want %v (touched by the prefetched EnsureContext)", c.LastEventAt, t0)
	}
}
