package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// A following read of evidence inside an Update does not wait for the transactions that may own an
// id gap to end: its own is one of them, so it waited out evidenceWait (2 s) holding the group.
func TestAFollowReadInsideAnUpdateDoesNotWaitForItself(t *testing.T) {
	t.Parallel()
	s := open(t, newSchema(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ins := func(fail bool) {
		rb := errors.New("roll back")
		err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: "k", CreatedAt: t0}); err != nil {
				return err
			}
			if _, err := tx.GetTask(ctx, "alice", "flush"); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if fail {
				return rb
			}
			return nil
		})
		if err != nil && !errors.Is(err, rb) {
			t.Fatal(err)
		}
	}
	ins(false) // id 1
	ins(true)  // id 2 drawn and rolled back: a gap
	ins(false) // id 3
	var took time.Duration
	err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: "k", CreatedAt: t0}); err != nil {
			return err
		}
		start := time.Now()
		_, err := tx.ListEvidence(ctx, store.EvidenceFilter{AfterID: 1, Follow: true, Forward: true})
		took = time.Since(start)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if took > time.Second {
		t.Fatalf("a follow read inside an Update took %v: it waited for its own transaction", took)
	}
}
