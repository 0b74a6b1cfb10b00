package checkpoint_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/channels-dev/channels/checkpoint"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func advance(t *testing.T, s store.Store, seq int64) (checkpoint.Checkpoint, bool) {
	t.Helper()
	var (
		c     checkpoint.Checkpoint
		moved bool
	)
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		var err error
		c, moved, err = checkpoint.AdvanceTx(ctx, tx, "alice", "email", checkpoint.Position{Instance: "box", Bytes: []byte{byte(seq)}, Seq: seq}, now)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, moved
}

func get(t *testing.T, s store.Store) checkpoint.Checkpoint {
	t.Helper()
	c, err := checkpoint.Get(context.Background(), s, "alice", "email", "box")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCheckpointNeverMovesBackwards(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		if c := get(t, s); c.Version != 0 || c.Position.Seq != 0 || c.Position.Instance != "box" {
			t.Fatalf("fresh checkpoint = %+v, want zero for instance box", c)
		}
		if c, moved := advance(t, s, 10); !moved || c.Position.Seq != 10 || c.Version != 1 {
			t.Fatalf("advance to 10: %+v moved=%v", c, moved)
		}
		for _, seq := range []int64{10, 3} {
			if c, moved := advance(t, s, seq); moved || c.Position.Seq != 10 || c.Version != 1 {
				t.Fatalf("advance to %d: %+v moved=%v, want held at 10", seq, c, moved)
			}
		}
		if c, moved := advance(t, s, 11); !moved || c.Position.Seq != 11 || c.Version != 2 {
			t.Fatalf("advance to 11: %+v moved=%v", c, moved)
		}
	})
}

func TestCheckpointHoldsWhenTheTransactionFails(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		advance(t, s, 5)
		boom := errors.New("acceptance failed")
		err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			if _, _, err := checkpoint.AdvanceTx(ctx, tx, "alice", "email", checkpoint.Position{Instance: "box", Seq: 6}, now); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Update = %v", err)
		}
		if c := get(t, s); c.Position.Seq != 5 {
			t.Fatalf("checkpoint = %d after a failed transaction, want 5", c.Position.Seq)
		}
	})
}

func TestClassifyAdvancesWithEvidence(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			_, err := checkpoint.ClassifyTx(ctx, tx, "alice", "email", checkpoint.Position{Instance: "box", Seq: 7}, "non-work", map[string]any{"reason": "auto-submitted"}, now)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if c := get(t, s); c.Position.Seq != 7 {
			t.Fatalf("checkpoint = %d, want 7", c.Position.Seq)
		}
		ev, err := s.ListEvidence(context.Background(), store.EvidenceFilter{Principal: "alice", Source: "email", Kind: "non-work"})
		if err != nil || len(ev) != 1 {
			t.Fatalf("evidence = %v, %v; want one non-work row", ev, err)
		}
	})
}

func TestResyncRecordsEvidenceAndRefusesToGoBack(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		advance(t, s, 40)
		ctx := context.Background()
		if _, err := checkpoint.Resync(ctx, s, "alice", "email", checkpoint.Position{Instance: "box", Seq: 12}, "uidvalidity changed", now); err == nil {
			t.Fatal("a resync below the stored seq must be refused")
		}
		c, err := checkpoint.Resync(ctx, s, "alice", "email", checkpoint.Position{Instance: "box", Bytes: []byte("v2:0"), Seq: 1 << 32}, "uidvalidity changed", now)
		if err != nil {
			t.Fatal(err)
		}
		if c.Position.Seq != 1<<32 || string(c.Position.Bytes) != "v2:0" {
			t.Fatalf("after resync: %+v", c)
		}
		ev, err := s.ListEvidence(ctx, store.EvidenceFilter{Principal: "alice", Kind: checkpoint.EvidenceResync})
		if err != nil || len(ev) != 1 {
			t.Fatalf("resync evidence = %v, %v; want one row (the refused resync wrote none)", ev, err)
		}
	})
}

// Each instance of a source keeps its own position: one ahead of another neither holds the other
// back nor is moved back by it, and a resync of one leaves the other where it was.
func TestEachInstanceKeepsItsOwnCheckpoint(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		ctx := context.Background()
		at := func(instance string, seq int64) checkpoint.Position {
			return checkpoint.Position{Instance: instance, Bytes: []byte(instance), Seq: seq}
		}
		err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			for _, pos := range []checkpoint.Position{at("work", 100), at("home", 5), at("work", 50)} {
				if _, _, err := checkpoint.AdvanceTx(ctx, tx, "alice", "email", pos, now); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := checkpoint.Resync(ctx, s, "alice", "email", at("home", 1<<32), "uidvalidity changed", now); err != nil {
			t.Fatal(err)
		}
		for instance, want := range map[string]int64{"work": 100, "home": 1 << 32} {
			c, err := checkpoint.Get(ctx, s, "alice", "email", instance)
			if err != nil {
				t.Fatal(err)
			}
			if c.Position.Seq != want || c.Position.Instance != instance || string(c.Position.Bytes) != instance {
				t.Errorf("checkpoint of %s = %+v, want its own at seq %d", instance, c.Position, want)
			}
		}
	})
}

// A position that names no instance could be any instance's; it is refused, and nothing is
// written.
func TestAPositionWithoutAnInstanceIsRefused(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		ctx := context.Background()
		pos := checkpoint.Position{Bytes: []byte("uid:9"), Seq: 9}
		for name, call := range map[string]func() error{
			"AdvanceTx": func() error {
				return s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
					_, _, err := checkpoint.AdvanceTx(ctx, tx, "alice", "email", pos, now)
					return err
				})
			},
			"ClassifyTx": func() error {
				return s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
					_, err := checkpoint.ClassifyTx(ctx, tx, "alice", "email", pos, "non-work", nil, now)
					return err
				})
			},
			"Resync": func() error {
				_, err := checkpoint.Resync(ctx, s, "alice", "email", pos, "uidvalidity changed", now)
				return err
			},
		} {
			if err := call(); !errors.Is(err, checkpoint.ErrNoInstance) {
				t.Errorf("%s with a position of no instance = %v, want ErrNoInstance", name, err)
			}
		}
		if cps, err := s.ListCheckpoints(ctx, ""); err != nil || len(cps) != 0 {
			t.Errorf("checkpoints = %+v, %v; want none", cps, err)
		}
		if ev, err := s.ListEvidence(ctx, store.EvidenceFilter{Principal: "alice"}); err != nil || len(ev) != 0 {
			t.Errorf("evidence = %+v, %v; want none", ev, err)
		}
	})
}

// An instance resumes from the checkpoint its (principal, source) had before checkpoints were
// kept per instance, and takes it over with its first advance.
func TestAnInstanceResumesFromTheCheckpointFromBeforeInstances(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		ctx := context.Background()
		err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.AdvanceCheckpoint(ctx, store.Checkpoint{Principal: "alice", Source: "email", Position: []byte("uid:40"), Seq: 40, UpdatedAt: now})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if c := get(t, s); c.Position.Seq != 40 || c.Position.Instance != "" || c.Version != 1 {
			t.Fatalf("checkpoint of box before its first advance = %+v, want the one from before instances", c)
		}
		if c, moved := advance(t, s, 30); moved || c.Position.Seq != 40 || c.Position.Instance != "box" {
			t.Fatalf("advance to 30: %+v moved=%v, want the old position taken over and held at 40", c, moved)
		}
		if c, moved := advance(t, s, 41); !moved || c.Position.Seq != 41 || c.Version != 2 {
			t.Fatalf("advance to 41: %+v moved=%v", c, moved)
		}
		if c, err := checkpoint.Get(ctx, s, "alice", "email", "other"); err != nil || c.Version != 0 {
			t.Fatalf("checkpoint of another instance = %+v, %v; want none (the old one is box's now)", c, err)
		}
	})
}
