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
		c, moved, err = checkpoint.AdvanceTx(ctx, tx, "alice", "email", checkpoint.Position{Bytes: []byte{byte(seq)}, Seq: seq}, now)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, moved
}

func get(t *testing.T, s store.Store) checkpoint.Checkpoint {
	t.Helper()
	c, err := checkpoint.Get(context.Background(), s, "alice", "email")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCheckpointNeverMovesBackwards(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		if c := get(t, s); c.Version != 0 || c.Position.Seq != 0 {
			t.Fatalf("fresh checkpoint = %+v, want zero", c)
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
			if _, _, err := checkpoint.AdvanceTx(ctx, tx, "alice", "email", checkpoint.Position{Seq: 6}, now); err != nil {
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
			_, err := checkpoint.ClassifyTx(ctx, tx, "alice", "email", checkpoint.Position{Seq: 7}, "non-work", map[string]any{"reason": "auto-submitted"}, now)
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
		if _, err := checkpoint.Resync(ctx, s, "alice", "email", checkpoint.Position{Seq: 12}, "uidvalidity changed", now); err == nil {
			t.Fatal("a resync below the stored seq must be refused")
		}
		c, err := checkpoint.Resync(ctx, s, "alice", "email", checkpoint.Position{Bytes: []byte("v2:0"), Seq: 1 << 32}, "uidvalidity changed", now)
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
