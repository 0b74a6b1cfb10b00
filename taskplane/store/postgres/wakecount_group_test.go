package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// Acceptances that share one transaction (a group) count the pending wakes once and follow their
// own inserts from there; a fn rolled back to its savepoint takes its wakes out of the count the
// next fn of the group reads, and a fn that changes a wake's state makes the next count read again.
func TestAGroupsPendingCountFollowsItsFnsAndTheirRollbacks(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	setParam(u, "pool_max_conns", "4") // 2 committers
	s := open(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wake := func(id string) store.Wake {
		return store.Wake{Principal: "alice", ID: id, TaskID: "t-" + id, Activation: 1, State: store.WakePending,
			CreatedAt: t0, UpdatedAt: t0}
	}
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return tx.InsertWake(ctx, wake("w0")) }); err != nil {
		t.Fatal(err)
	}
	counts := make([]int, 5)
	count := func(ctx context.Context, tx store.Tx, i int) error {
		n, err := tx.CountWakes(ctx, store.WakePending, 0)
		counts[i] = n
		return err
	}
	fns := []func(ctx context.Context, tx store.Tx) error{
		func(ctx context.Context, tx store.Tx) error { // counts 1, inserts one
			if err := count(ctx, tx, 0); err != nil {
				return err
			}
			return tx.InsertWake(ctx, wake("w1"))
		},
		func(ctx context.Context, tx store.Tx) error { // counts 2, inserts one, rolls back
			if err := count(ctx, tx, 1); err != nil {
				return err
			}
			if err := tx.InsertWake(ctx, wake("w2")); err != nil {
				return err
			}
			return errors.New("roll back")
		},
		func(ctx context.Context, tx store.Tx) error { // counts 2, then moves w0 to done
			if err := count(ctx, tx, 2); err != nil {
				return err
			}
			w := wake("w0")
			w.State = store.WakeDone
			return tx.SaveWake(ctx, w)
		},
		func(ctx context.Context, tx store.Tx) error { return count(ctx, tx, 3) }, // counts 1
		func(ctx context.Context, tx store.Tx) error { // a duplicate wake id fails the insert: counts 1
			if err := tx.InsertWake(ctx, wake("w1")); err != nil {
				return err
			}
			return nil
		},
	}
	release := holdCommitters(ctx, t, s, nil)
	errs := make([]chan error, len(fns))
	for i, fn := range fns {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- s.Update(ctx, fn) }()
		for s.Queued() < i+1 { // queued in order, so they run in order in one group
			select {
			case <-ctx.Done():
				t.Fatal("the Updates did not queue")
			case <-time.After(time.Millisecond):
			}
		}
	}
	// The last fn's insert fails when its held write goes out; a count after it reads again.
	last := make(chan error, 1)
	go func() {
		last <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return count(ctx, tx, 4) })
	}()
	for s.Queued() < len(fns)+1 {
		select {
		case <-ctx.Done():
			t.Fatal("the last Update did not queue")
		case <-time.After(time.Millisecond):
		}
	}
	release()
	for i, want := range []bool{true, false, true, true, false} {
		if err := <-errs[i]; (err == nil) != want {
			t.Errorf("fn %d: err = %v, want success %v", i, err, want)
		}
	}
	if err := <-last; err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 2, 2, 1, 1}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("counts read by the group's fns = %v, want %v", counts, want)
	}
	if n, err := s.CountWakes(ctx, store.WakePending, 0); err != nil || n != 1 {
		t.Errorf("CountWakes(pending) after the commit = %d, %v; want 1", n, err)
	}
}
