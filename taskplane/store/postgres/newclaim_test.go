package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// A new claim whose identity another process claims and commits between the acceptance's read
// and its insert (held back, sent later) fails the whole Update with ErrConcurrentModification,
// alone in its transaction and inside a group: nothing of the losing acceptance commits, the
// winner's claim is left as it was, and the group's other Update commits.
func TestANewClaimTakenMeanwhileFailsItsUpdateWithNothingCommitted(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	setParam(u, "pool_max_conns", "4") // 2 committers
	s, other := open(t, u), open(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	claim := func(id, task string) store.Claim {
		return store.Claim{Principal: "alice", Source: "slack", Identity: id, Digest: "d-" + task, State: store.ClaimDone,
			OutcomeKind: "task", TaskID: task, CreatedAt: t0, UpdatedAt: t0}
	}
	evidence := func(kind string) store.Evidence {
		return store.Evidence{Principal: "alice", Source: "slack", Kind: kind, CreatedAt: t0}
	}
	loser := func(id string) func(ctx context.Context, tx store.Tx) error {
		return func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.GetClaim(ctx, "alice", "slack", id); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetClaim(%s) = %v, want not found", id, err)
			}
			// Another process claims the identity and commits.
			if err := other.Update(ctx, func(ctx context.Context, tx store.Tx) error {
				return store.InsertNewClaim(ctx, tx, claim(id, "winner"))
			}); err != nil {
				t.Error(err)
			}
			if err := tx.InsertEvidence(ctx, evidence("loser-"+id)); err != nil {
				return err
			}
			return store.InsertNewClaim(ctx, tx, claim(id, "loser"))
		}
	}
	check := func(id string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrConcurrentModification) {
			t.Errorf("%s: Update = %v, want ErrConcurrentModification", id, err)
		}
		if c, err := s.GetClaim(ctx, "alice", "slack", id); err != nil || c.TaskID != "winner" {
			t.Errorf("%s: claim = %+v, %v; want the winner's", id, c, err)
		}
		if ev, err := s.ListEvidence(ctx, store.EvidenceFilter{Kind: "loser-" + id}); err != nil || len(ev) != 0 {
			t.Errorf("%s: the losing Update's evidence = %v, %v; want none committed", id, ev, err)
		}
	}

	check("alone", s.Update(ctx, loser("alone")))

	release := holdCommitters(ctx, t, s, nil)
	lost, neighbour := make(chan error, 1), make(chan error, 1)
	go func() { lost <- s.Update(ctx, loser("grouped")) }()
	for s.Queued() < 1 {
		time.Sleep(time.Millisecond)
	}
	go func() {
		neighbour <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			return tx.InsertEvidence(ctx, evidence("neighbour"))
		})
	}()
	for s.Queued() < 2 {
		time.Sleep(time.Millisecond)
	}
	release()
	check("grouped", <-lost)
	if err := <-neighbour; err != nil {
		t.Fatalf("the group's other Update: %v", err)
	}
	if ev, err := s.ListEvidence(ctx, store.EvidenceFilter{Kind: "neighbour"}); err != nil || len(ev) != 1 {
		t.Errorf("the group's other Update's evidence = %v, %v; want it committed", ev, err)
	}
}
