package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// wakeQueueCases prove store.WakeReader and store.WakeTx: leases (one claimer per wake and one
// turn per task, across processes), FIFO claims, due times, the bounded count the admission limit
// reads, and the stale-task listing of the timeout sweep.
func wakeQueueCases() []testCase {
	return []testCase{
		{"ClaimIsFIFOAndLeasesTheRows", testWakeClaimFIFO},
		{"ClaimTakesOneWakePerTask", testWakeClaimOnePerTask},
		{"LiveLeaseHoldsTheWholeTaskOff", testWakeClaimLiveTurn},
		{"ExpiredLeaseOfActiveWakeIsClaimable", testWakeClaimExpired},
		{"PendingWakeWaitsForItsDueTime", testWakeClaimDue},
		{"ClaimSkipsDoneAndFailedAndRestrictsToPrincipals", testWakeClaimFilters},
		{"SaveStoresQueueFieldsAndGetReadsThem", testWakeSaveGet},
		{"InsertStoresALeaseThatHoldsTheTaskOff", testWakeInsertLeased},
		{"SaveOrGetOfMissingWakeIsNotFound", testWakeMissing},
		{"ListTaskWakesIsOldestFirstAndScoped", testWakeListTask},
		{"WakesOfOneCreatedAtAreListedAndClaimedInAdmissionOrder", testWakeAdmissionOrder},
		{"CountStopsAtUpTo", testWakeCount},
		{"CountFollowsChanges", testWakeCountFollowsChanges},
		{"CountInsideATransaction", testWakeCountInsideATransaction},
		{"ListStaleTasksFiltersByStateAndAge", testStaleTasks},
		{"20ConcurrentClaimersNeverShareAWakeOrATask", testWakeClaimConcurrent},
	}
}

func taskWake(principal, id, taskID string, created time.Time) store.Wake {
	return store.Wake{ID: id, Principal: principal, TaskID: taskID, Activation: 1, State: store.WakePending,
		CreatedAt: created, UpdatedAt: created}
}

func claimWakes(t *testing.T, s store.Store, c store.WakeClaim) []store.Wake {
	t.Helper()
	var out []store.Wake
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		var err error
		out, err = tx.ClaimWakes(ctx, c)
		return err
	})
	return out
}

func saveWake(t *testing.T, s store.Store, w store.Wake) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.SaveWake(ctx, w) })
}

func wakeIDs(ws []store.Wake) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.ID
	}
	return out
}

func claim(owner string, now time.Duration, limit int) store.WakeClaim {
	return store.WakeClaim{Owner: owner, Now: at(now), LeaseUntil: at(now + time.Minute), Limit: limit}
}

func testWakeClaimFIFO(t *testing.T, s store.Store) {
	// Inserted out of order: FIFO is by CreatedAt.
	insertWakes(t, s, taskWake("alice", "w3", "t3", at(3*time.Second)), taskWake("alice", "w1", "t1", t0),
		taskWake("alice", "w2", "t2", at(time.Second)))
	got := claimWakes(t, s, claim("p1", 10*time.Second, 2))
	diff(t, "first claim", []string{"w1", "w2"}, wakeIDs(got))
	for _, w := range got {
		if w.LeaseOwner != "p1" || !w.LeaseUntil.Equal(at(10*time.Second+time.Minute)) || w.State != store.WakePending {
			t.Errorf("claimed %s: owner %q until %v state %s, want p1, the lease, pending", w.ID, w.LeaseOwner, w.LeaseUntil, w.State)
		}
	}
	stored, err := s.GetWake(context.Background(), "alice", "w1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "stored claimed wake", got[0], stored)
	// The leased rows are not due for anyone else; the third is.
	diff(t, "second claim", []string{"w3"}, wakeIDs(claimWakes(t, s, claim("p2", 11*time.Second, 5))))
	diff(t, "third claim", []string{}, wakeIDs(claimWakes(t, s, claim("p3", 12*time.Second, 5))))
}

func testWakeClaimOnePerTask(t *testing.T, s store.Store) {
	insertWakes(t, s, taskWake("alice", "a1", "ta", t0), taskWake("alice", "a2", "ta", at(time.Second)),
		taskWake("alice", "b1", "tb", at(2*time.Second)))
	diff(t, "claim", []string{"a1", "b1"}, wakeIDs(claimWakes(t, s, claim("p1", time.Minute, 10))))
	// a1 is leased: a2 of the same task waits for it.
	diff(t, "claim while a1 is leased", []string{}, wakeIDs(claimWakes(t, s, claim("p2", time.Minute, 10))))
}

func testWakeClaimLiveTurn(t *testing.T, s store.Store) {
	insertWakes(t, s, taskWake("alice", "a1", "ta", t0), taskWake("alice", "a2", "ta", at(time.Second)))
	a1 := claimWakes(t, s, claim("p1", time.Minute, 1))[0]
	a1.State, a1.Attempts, a1.UpdatedAt = store.WakeActive, 1, at(time.Minute)
	saveWake(t, s, a1)
	// The turn holds its lease: no wake of the task is due, not even a newer one.
	diff(t, "claim mid-turn", []string{}, wakeIDs(claimWakes(t, s, claim("p2", 90*time.Second, 10))))
	// The turn ends and releases its lease: the newer wake is due.
	a1.State, a1.LeaseOwner, a1.LeaseUntil = store.WakeDone, "", time.Time{}
	saveWake(t, s, a1)
	diff(t, "claim after the turn", []string{"a2"}, wakeIDs(claimWakes(t, s, claim("p2", 91*time.Second, 10))))
}

func testWakeClaimExpired(t *testing.T, s store.Store) {
	insertWakes(t, s, taskWake("alice", "a1", "ta", t0))
	a1 := claimWakes(t, s, claim("p1", 0, 1))[0]
	a1.State, a1.Attempts = store.WakeActive, 1
	saveWake(t, s, a1)
	diff(t, "claim before expiry", []string{}, wakeIDs(claimWakes(t, s, claim("p2", 59*time.Second, 1))))
	got := claimWakes(t, s, claim("p2", time.Minute, 1))
	diff(t, "claim at expiry", []string{"a1"}, wakeIDs(got))
	if got[0].State != store.WakeActive || got[0].Attempts != 1 || got[0].LeaseOwner != "p2" {
		t.Errorf("reclaimed wake %+v: want active, 1 attempt, leased to p2", got[0])
	}
}

func testWakeClaimDue(t *testing.T, s store.Store) {
	w := taskWake("alice", "a1", "ta", t0)
	insertWakes(t, s, w)
	w.DueAt, w.Attempts, w.Detail, w.UpdatedAt = at(time.Hour), 2, "re-offer", at(time.Second)
	saveWake(t, s, w)
	diff(t, "claim before due", []string{}, wakeIDs(claimWakes(t, s, claim("p1", time.Hour-time.Second, 1))))
	diff(t, "claim when due", []string{"a1"}, wakeIDs(claimWakes(t, s, claim("p1", time.Hour, 1))))
}

func testWakeClaimFilters(t *testing.T, s store.Store) {
	done, failed := taskWake("alice", "d", "td", t0), taskWake("alice", "f", "tf", t0)
	done.State, failed.State = store.WakeDone, store.WakeFailed
	insertWakes(t, s, done, failed, taskWake("alice", "a", "ta", at(time.Second)),
		taskWake("bob", "b", "tb", at(2*time.Second)), taskWake("carol", "c", "tc", at(3*time.Second)))
	c := claim("p1", time.Minute, 10)
	c.Principals = []string{"bob", "carol"}
	diff(t, "claim for bob and carol", []string{"b", "c"}, wakeIDs(claimWakes(t, s, c)))
	diff(t, "claim for anyone", []string{"a"}, wakeIDs(claimWakes(t, s, claim("p2", time.Minute, 10))))
}

func testWakeSaveGet(t *testing.T, s store.Store) {
	w := taskWake("alice", "w1", "t1", t0)
	insertWakes(t, s, w)
	got, err := s.GetWake(context.Background(), "alice", "w1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "inserted wake (queue fields zero)", w, got)

	saved := w
	saved.State, saved.Attempts, saved.Detail, saved.Activation = store.WakeActive, 3, "offer 3", 7
	saved.LeaseOwner, saved.LeaseUntil, saved.DueAt, saved.UpdatedAt = "p1", at(time.Hour), at(time.Minute), at(time.Second)
	// TaskID and CreatedAt are not SaveWake's to write.
	arg := saved
	arg.TaskID, arg.CreatedAt = "other", at(48*time.Hour)
	saveWake(t, s, arg)
	got, err = s.GetWake(context.Background(), "alice", "w1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "saved wake", saved, got)
	listed, err := s.ListWakes(context.Background(), store.WakeActive, 0)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "ListWakes reads the queue fields", []store.Wake{saved}, listed)
}

// An acceptance that hands its new task's first turn to a claimer inserts the wake already leased.
func testWakeInsertLeased(t *testing.T, s store.Store) {
	w := taskWake("alice", "w1", "t1", t0)
	w.State, w.Attempts, w.Detail = store.WakeActive, 1, "offer 1 to p1"
	w.LeaseOwner, w.LeaseUntil = "p1", at(time.Minute)
	insertWakes(t, s, w)
	got, err := s.GetWake(context.Background(), "alice", "w1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "wake inserted leased", w, got)
	diff(t, "claim while the inserted lease lives", []string{}, wakeIDs(claimWakes(t, s, claim("p2", 59*time.Second, 1))))
	diff(t, "claim once it has expired", []string{"w1"}, wakeIDs(claimWakes(t, s, claim("p2", time.Minute, 1))))
}

func testWakeMissing(t *testing.T, s store.Store) {
	insertWakes(t, s, taskWake("alice", "w1", "t1", t0))
	_, err := s.GetWake(context.Background(), "bob", "w1")
	wantNotFound(t, "GetWake of another principal's wake", err)
	err = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return tx.SaveWake(ctx, taskWake("bob", "w1", "t1", t0))
	})
	wantNotFound(t, "SaveWake of another principal's wake", err)
}

func testWakeListTask(t *testing.T, s store.Store) {
	insertWakes(t, s, taskWake("alice", "w2", "t1", at(time.Second)), taskWake("alice", "w1", "t1", t0),
		taskWake("alice", "x", "t2", t0), taskWake("bob", "y", "t1", t0))
	got, err := s.ListTaskWakes(context.Background(), "alice", "t1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "ListTaskWakes(alice, t1)", []string{"w1", "w2"}, wakeIDs(got))
}

// Wakes admitted in one microsecond (or stamped by one clock reading) keep the order they were
// admitted in: the lists and the claims serve them first in, first out, whatever their ids.
func testWakeAdmissionOrder(t *testing.T, s store.Store) {
	// Each id sorts before the ids admitted earlier.
	insertWakes(t, s, taskWake("alice", "w-d", "t1", t0), taskWake("alice", "w-c", "t2", t0))
	insertWakes(t, s, taskWake("alice", "w-b", "t1", t0))
	insertWakes(t, s, taskWake("alice", "w-a", "t2", t0), taskWake("alice", "w-0", "t3", t0))
	ctx := context.Background()
	all, err := s.ListWakes(ctx, store.WakePending, 0)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "ListWakes(pending)", []string{"w-d", "w-c", "w-b", "w-a", "w-0"}, wakeIDs(all))
	first, err := s.ListWakes(ctx, store.WakePending, 2)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "ListWakes(pending, 2)", []string{"w-d", "w-c"}, wakeIDs(first))
	t1, err := s.ListTaskWakes(ctx, "alice", "t1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "ListTaskWakes(alice, t1)", []string{"w-d", "w-b"}, wakeIDs(t1))
	// Each task's first wake is its head, and the two heads admitted first are claimed, in order.
	diff(t, "claim of 2", []string{"w-d", "w-c"}, wakeIDs(claimWakes(t, s, claim("p1", time.Second, 2))))
	diff(t, "claim of the rest", []string{"w-0"}, wakeIDs(claimWakes(t, s, claim("p2", time.Second, 5))))
}

func testWakeCount(t *testing.T, s store.Store) {
	var ws []store.Wake
	for i := range 5 {
		ws = append(ws, taskWake("alice", fmt.Sprintf("w%d", i), fmt.Sprintf("t%d", i), at(time.Duration(i)*time.Second)))
	}
	ws[4].State = store.WakeDone
	insertWakes(t, s, ws...)
	for _, c := range []struct {
		state      store.WakeState
		upTo, want int
	}{{store.WakePending, 0, 4}, {store.WakePending, 2, 2}, {store.WakePending, 10, 4}, {store.WakeDone, 0, 1}, {store.WakeActive, 3, 0}} {
		n, err := s.CountWakes(context.Background(), c.state, c.upTo)
		if err != nil {
			t.Fatal(err)
		}
		if n != c.want {
			t.Errorf("CountWakes(%s, %d) = %d, want %d", c.state, c.upTo, n, c.want)
		}
	}
}

// The live counts follow every change of state, and a rolled-back insert counts nothing (a driver
// may keep them apart from the rows, as the Postgres one does).
func testWakeCountFollowsChanges(t *testing.T, s store.Store) {
	want := func(step string, pending, active int) {
		t.Helper()
		for state, n := range map[store.WakeState]int{store.WakePending: pending, store.WakeActive: active} {
			got, err := s.CountWakes(context.Background(), state, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got != n {
				t.Errorf("%s: CountWakes(%s) = %d, want %d", step, state, got, n)
			}
		}
	}
	w1, w2, w3 := taskWake("alice", "w1", "t1", t0), taskWake("alice", "w2", "t2", t0), taskWake("bob", "w3", "t3", t0)
	w3.State = store.WakeActive
	insertWakes(t, s, w1, w2, w3)
	want("inserted", 2, 1)
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		if err := tx.InsertWake(ctx, taskWake("alice", "w4", "t4", t0)); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	if err == nil {
		t.Fatal("Update with a failing fn succeeded")
	}
	want("an insert rolled back", 2, 1)
	w1.State = store.WakeActive
	saveWake(t, s, w1)
	want("pending to active", 1, 2)
	w1.Attempts++
	saveWake(t, s, w1)
	want("saved in the same state", 1, 2)
	w2.State = store.WakeDone
	saveWake(t, s, w2)
	want("pending to done", 0, 2)
	w3.State = store.WakeFailed
	saveWake(t, s, w3)
	want("active to failed", 0, 1)
	w2.State = store.WakePending
	saveWake(t, s, w2)
	want("done to pending", 1, 1)
}

// A count read inside a transaction includes the wakes the transaction itself inserted and moved,
// before it commits (the admission bound of a group of acceptances counts the group's own wakes).
func testWakeCountInsideATransaction(t *testing.T, s store.Store) {
	w1 := taskWake("alice", "w1", "t1", t0)
	insertWakes(t, s, w1)
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		want := func(step string, pending, active int) error {
			for state, n := range map[store.WakeState]int{store.WakePending: pending, store.WakeActive: active} {
				got, err := tx.CountWakes(ctx, state, 0)
				if err != nil {
					return err
				}
				if got != n {
					t.Errorf("%s: CountWakes(%s) in the transaction = %d, want %d", step, state, got, n)
				}
			}
			return nil
		}
		if err := want("before", 1, 0); err != nil {
			return err
		}
		for _, id := range []string{"w2", "w3"} {
			if err := tx.InsertWake(ctx, taskWake("alice", id, "t-"+id, t0)); err != nil {
				return err
			}
		}
		if err := want("two inserted", 3, 0); err != nil {
			return err
		}
		w1.State = store.WakeActive
		if err := tx.SaveWake(ctx, w1); err != nil {
			return err
		}
		return want("one moved to active", 2, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	for state, n := range map[store.WakeState]int{store.WakePending: 2, store.WakeActive: 1} {
		if got, err := s.CountWakes(context.Background(), state, 0); err != nil || got != n {
			t.Errorf("CountWakes(%s) after the commit = %d, %v; want %d", state, got, err, n)
		}
	}
}

func testStaleTasks(t *testing.T, s store.Store) {
	insertTasks(t, s,
		newTask("alice", "old-working", "c1", "working", t0),
		newTask("bob", "old-input", "c2", "input-required", at(time.Minute)),
		newTask("alice", "new-working", "c1", "working", at(time.Hour)),
		newTask("alice", "old-done", "c1", "completed", t0),
		newTask("alice", "old-submitted", "c1", "submitted", t0))
	states := []string{"working", "input-required"}
	got, err := s.ListStaleTasks(context.Background(), states, at(30*time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "stale before +30m", []string{"old-working", "old-input"}, ids(got))
	got, err = s.ListStaleTasks(context.Background(), states, at(2*time.Hour), 2)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "stale before +2h, limit 2", []string{"old-working", "old-input"}, ids(got))
	if got[1].Principal != "bob" || got[1].State != "input-required" {
		t.Errorf("stale task row %+v: want bob's input-required row", got[1])
	}
	// A finished task is never stale, whatever the states asked for.
	got, err = s.ListStaleTasks(context.Background(), []string{"completed", "submitted"}, at(30*time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "stale finished or submitted", []string{"old-submitted"}, ids(got))
}

func testWakeClaimConcurrent(t *testing.T, s store.Store) {
	// Ten tasks with two pending wakes each: twenty claimers of one wake each get at most one wake
	// of every task, and never a wake someone else got.
	const tasks, claimers = 10, 20
	var ws []store.Wake
	for i := range tasks {
		ws = append(ws, taskWake("alice", fmt.Sprintf("w-%02d-a", i), fmt.Sprintf("t-%02d", i), at(time.Duration(i)*time.Millisecond)),
			taskWake("alice", fmt.Sprintf("w-%02d-b", i), fmt.Sprintf("t-%02d", i), at(time.Second+time.Duration(i)*time.Millisecond)))
	}
	insertWakes(t, s, ws...)
	var (
		mu      sync.Mutex
		byWake  = map[string]string{}
		perTask = map[string]int{}
		wg      sync.WaitGroup
		errs    = make([]error, claimers)
	)
	for i := range claimers {
		wg.Go(func() {
			owner := fmt.Sprintf("claimer-%d", i)
			errs[i] = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
				got, err := tx.ClaimWakes(ctx, claim(owner, time.Minute, 1))
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				for _, w := range got {
					if prev, ok := byWake[w.ID]; ok && prev != owner {
						return fmt.Errorf("%s claimed by %s and %s", w.ID, prev, owner)
					}
					byWake[w.ID] = owner
					perTask[w.TaskID]++
				}
				return nil
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("claimer %d: %v", i, err)
		}
	}
	if len(perTask) != tasks {
		t.Errorf("%d of %d tasks claimed", len(perTask), tasks)
	}
	for task, n := range perTask {
		if n != 1 {
			t.Errorf("task %s: %d wakes claimed at once, want 1", task, n)
		}
	}
}
