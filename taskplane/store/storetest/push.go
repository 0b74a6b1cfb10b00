package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/channels-dev/channels/taskplane/store"
)

// pushConfigCases prove store.PushReader and store.PushTx: configs scoped to (principal, task),
// the bound per task (also under concurrent puts), the cursor that only the registration holding
// it advances, the work listing that waits for a config's last delivery to settle, and the prune
// of a task's configs with the task.
func pushConfigCases() []testCase {
	return []testCase{
		{"PutThenGetRoundTripsAllFields", testPushPutGet},
		{"PutSameIDReplacesEveryField", testPushReplace},
		{"PutForMissingOrForeignTaskIsNotFound", testPushPutMissingTask},
		{"PutBeyondTheBoundIsRefusedButAReplaceIsNot", testPushLimit},
		{"20ConcurrentPutsNeverExceedTheBound", testPushLimitConcurrent},
		{"ListIsOrderedByIDPagesAndIsScoped", testPushList},
		{"GetAndDeleteAreScopedAndDeleteReportsExistence", testPushScopedDelete},
		{"AdvanceNeedsTheRegistrationAndTheExpectedCursor", testPushAdvance},
		{"WorkListsSnapshotsAndUnreadEventsOnceTheLastDeliverySettled", testPushWork},
		{"AFinishedConfigIsNoWorkUntilAPutRegistersItAgain", testPushFinished},
		{"TaskPruneDeletesTheTasksConfigsAndLeavesTheBackstopNothing", testPushPrune},
	}
}

func newPushConfig(principal, taskID, id string, created time.Time) store.PushConfig {
	return store.PushConfig{
		Principal: principal, TaskID: taskID, ID: id, URL: "https://hooks.example.com/" + id,
		Token: "tok-" + id, AuthScheme: "Bearer", AuthCredentials: "cred-" + id, Registration: "reg-" + id,
		Cursor: 1, Snapshot: []byte(`{"id":"` + taskID + `"}`), CreatedAt: created, UpdatedAt: created,
	}
}

func putPush(t *testing.T, s store.Store, c store.PushConfig, limit int) (bool, error) {
	t.Helper()
	var replaced bool
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		var err error
		replaced, err = tx.PutPushConfig(ctx, c, limit)
		return err
	})
	return replaced, err
}

func mustPutPush(t *testing.T, s store.Store, cs ...store.PushConfig) {
	t.Helper()
	for _, c := range cs {
		if _, err := putPush(t, s, c, 0); err != nil {
			t.Fatalf("PutPushConfig %s: %v", c.ID, err)
		}
	}
}

func pushIDs(cs []store.PushConfig) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Principal+"/"+c.TaskID+"/"+c.ID)
	}
	return out
}

func testPushPutGet(t *testing.T, s store.Store) {
	ctx := context.Background()
	insertTasks(t, s, newTask("p1", "t1", "c1", "working", at(0)))
	want := newPushConfig("p1", "t1", "cfg1", at(time.Second))
	want.LastDelivery = "dlv_1"
	replaced, err := putPush(t, s, want, 10)
	if err != nil || replaced {
		t.Fatalf("PutPushConfig = %v, %v; want false, nil", replaced, err)
	}
	got, err := s.GetPushConfig(ctx, "p1", "t1", "cfg1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	// The same read inside a transaction.
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		got, err := tx.GetPushConfig(ctx, "p1", "t1", "cfg1")
		if err != nil {
			return err
		}
		if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
			t.Errorf("round trip in tx (-want +got):\n%s", diff)
		}
		return nil
	})
	// A config without a snapshot reads back with none.
	bare := newPushConfig("p1", "t1", "cfg2", at(time.Second))
	bare.Snapshot = nil
	mustPutPush(t, s, bare)
	if got, err := s.GetPushConfig(ctx, "p1", "t1", "cfg2"); err != nil || len(got.Snapshot) != 0 {
		t.Fatalf("GetPushConfig without snapshot = %q, %v", got.Snapshot, err)
	}
}

func testPushReplace(t *testing.T, s store.Store) {
	ctx := context.Background()
	insertTasks(t, s, newTask("p1", "t1", "c1", "working", at(0)))
	mustPutPush(t, s, newPushConfig("p1", "t1", "cfg1", at(time.Second)))
	next := store.PushConfig{Principal: "p1", TaskID: "t1", ID: "cfg1", URL: "https://other.example.com/",
		Registration: "reg-2", Cursor: 7, CreatedAt: at(2 * time.Second), UpdatedAt: at(2 * time.Second)}
	replaced, err := putPush(t, s, next, 1)
	if err != nil || !replaced {
		t.Fatalf("replace = %v, %v; want true, nil", replaced, err)
	}
	got, err := s.GetPushConfig(ctx, "p1", "t1", "cfg1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(next, got, cmpOpts); diff != "" {
		t.Fatalf("after replace (-want +got):\n%s", diff)
	}
}

func testPushPutMissingTask(t *testing.T, s store.Store) {
	insertTasks(t, s, newTask("p1", "t1", "c1", "working", at(0)))
	for _, c := range []store.PushConfig{newPushConfig("p1", "nope", "cfg1", at(0)), newPushConfig("p2", "t1", "cfg1", at(0))} {
		if _, err := putPush(t, s, c, 10); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("put on %s/%s: err = %v, want ErrNotFound", c.Principal, c.TaskID, err)
		}
	}
	if cs, err := s.ListPushConfigs(context.Background(), "p2", "t1", "", 0); err != nil || len(cs) != 0 {
		t.Fatalf("configs written for a foreign task: %v, %v", pushIDs(cs), err)
	}
}

func testPushLimit(t *testing.T, s store.Store) {
	insertTasks(t, s, newTask("p1", "t1", "c1", "working", at(0)), newTask("p1", "t2", "c1", "working", at(0)))
	for i := range 3 {
		if _, err := putPush(t, s, newPushConfig("p1", "t1", fmt.Sprintf("cfg%d", i), at(0)), 3); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if _, err := putPush(t, s, newPushConfig("p1", "t1", "cfg3", at(0)), 3); !errors.Is(err, store.ErrPushConfigLimit) {
		t.Fatalf("fourth put: err = %v, want ErrPushConfigLimit", err)
	}
	if replaced, err := putPush(t, s, newPushConfig("p1", "t1", "cfg1", at(time.Second)), 3); err != nil || !replaced {
		t.Fatalf("replace at the bound = %v, %v; want true, nil", replaced, err)
	}
	// The bound is per task.
	if _, err := putPush(t, s, newPushConfig("p1", "t2", "cfg3", at(0)), 3); err != nil {
		t.Fatalf("put on another task: %v", err)
	}
	// A failed put leaves the transaction usable: the caller decides.
	cs, err := s.ListPushConfigs(context.Background(), "p1", "t1", "", 0)
	if err != nil || len(cs) != 3 {
		t.Fatalf("configs of t1 = %v, %v; want 3", pushIDs(cs), err)
	}
}

func testPushLimitConcurrent(t *testing.T, s store.Store) {
	insertTasks(t, s, newTask("p1", "t1", "c1", "working", at(0)))
	const limit = 5
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ok, lim int
	)
	for i := range 20 {
		wg.Go(func() {
			_, err := putPush(t, s, newPushConfig("p1", "t1", fmt.Sprintf("cfg%02d", i), at(0)), limit)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, store.ErrPushConfigLimit):
				lim++
			default:
				t.Errorf("put %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	cs, err := s.ListPushConfigs(context.Background(), "p1", "t1", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if ok != limit || lim != 20-limit || len(cs) != limit {
		t.Fatalf("%d puts succeeded, %d refused, %d stored; want %d, %d, %d", ok, lim, len(cs), limit, 20-limit, limit)
	}
}

func testPushList(t *testing.T, s store.Store) {
	ctx := context.Background()
	insertTasks(t, s, newTask("p1", "t1", "c1", "working", at(0)), newTask("p1", "t2", "c1", "working", at(0)),
		newTask("p2", "t1", "c2", "working", at(0)))
	mustPutPush(t, s, newPushConfig("p1", "t1", "b", at(0)), newPushConfig("p1", "t1", "a", at(time.Second)),
		newPushConfig("p1", "t1", "c", at(0)), newPushConfig("p1", "t2", "a", at(0)), newPushConfig("p2", "t1", "z", at(0)))
	all, err := s.ListPushConfigs(ctx, "p1", "t1", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"p1/t1/a", "p1/t1/b", "p1/t1/c"}, pushIDs(all)); diff != "" {
		t.Fatalf("list (-want +got):\n%s", diff)
	}
	page, err := s.ListPushConfigs(ctx, "p1", "t1", "a", 1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"p1/t1/b"}, pushIDs(page)); diff != "" {
		t.Fatalf("page after a (-want +got):\n%s", diff)
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		cs, err := tx.ListPushConfigs(ctx, "p2", "t1", "", 0)
		if err != nil {
			return err
		}
		if diff := cmp.Diff([]string{"p2/t1/z"}, pushIDs(cs)); diff != "" {
			t.Errorf("p2's list in tx (-want +got):\n%s", diff)
		}
		return nil
	})
	if cs, err := s.ListPushConfigs(ctx, "p3", "t1", "", 0); err != nil || len(cs) != 0 {
		t.Fatalf("list of another principal = %v, %v", pushIDs(cs), err)
	}
}

func testPushScopedDelete(t *testing.T, s store.Store) {
	ctx := context.Background()
	insertTasks(t, s, newTask("p1", "t1", "c1", "working", at(0)))
	mustPutPush(t, s, newPushConfig("p1", "t1", "cfg1", at(0)))
	if _, err := s.GetPushConfig(ctx, "p2", "t1", "cfg1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get by another principal: err = %v, want ErrNotFound", err)
	}
	if _, err := s.GetPushConfig(ctx, "p1", "t2", "cfg1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get under another task: err = %v, want ErrNotFound", err)
	}
	del := func(principal string) bool {
		var deleted bool
		update(t, s, func(ctx context.Context, tx store.Tx) error {
			var err error
			deleted, err = tx.DeletePushConfig(ctx, principal, "t1", "cfg1")
			return err
		})
		return deleted
	}
	if del("p2") {
		t.Fatal("another principal deleted the config")
	}
	if !del("p1") {
		t.Fatal("delete reported no config")
	}
	if del("p1") {
		t.Fatal("second delete reported a config")
	}
	if _, err := s.GetPushConfig(ctx, "p1", "t1", "cfg1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after delete: err = %v, want ErrNotFound", err)
	}
}

func advancePush(t *testing.T, s store.Store, c store.PushConfig, expect int64) bool {
	t.Helper()
	var ok bool
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		var err error
		ok, err = tx.AdvancePushConfig(ctx, c, expect)
		return err
	})
	return ok
}

func testPushAdvance(t *testing.T, s store.Store) {
	ctx := context.Background()
	insertTasks(t, s, newTask("p1", "t1", "c1", "working", at(0)))
	orig := newPushConfig("p1", "t1", "cfg1", at(0))
	mustPutPush(t, s, orig)

	next := orig
	next.Cursor, next.Snapshot, next.LastDelivery, next.UpdatedAt = 4, nil, "dlv_4", at(time.Minute)
	if advancePush(t, s, next, 2) {
		t.Fatal("advanced from a cursor that is not the stored one")
	}
	stale := next
	stale.Registration = "an-earlier-registration"
	if advancePush(t, s, stale, 1) {
		t.Fatal("advanced under another registration")
	}
	if !advancePush(t, s, next, 1) {
		t.Fatal("advance from the stored cursor failed")
	}
	got, err := s.GetPushConfig(ctx, "p1", "t1", "cfg1")
	if err != nil {
		t.Fatal(err)
	}
	want := orig
	want.Cursor, want.Snapshot, want.LastDelivery, want.UpdatedAt = 4, nil, "dlv_4", at(time.Minute)
	if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
		t.Fatalf("after advance (-want +got):\n%s", diff)
	}
	if advancePush(t, s, next, 1) {
		t.Fatal("the same advance applied twice")
	}
	missing := next
	missing.ID = "nope"
	if advancePush(t, s, missing, 4) {
		t.Fatal("advanced a missing config")
	}
}

func testPushWork(t *testing.T, s store.Store) {
	ctx := context.Background()
	insertTasks(t, s, newTask("p1", "t1", "c1", "working", at(0)), newTask("p2", "t2", "c2", "working", at(0)))
	appendEvents(t, s, "p1", "t1", 3)
	appendEvents(t, s, "p2", "t2", 1)
	snap := newPushConfig("p1", "t1", "snap", at(1*time.Second)) // a snapshot to send
	snap.Cursor = 3
	behind := newPushConfig("p1", "t1", "behind", at(2*time.Second)) // cursor 1 < last_seq 3
	behind.Snapshot = nil
	caughtUp := newPushConfig("p2", "t2", "caughtup", at(0)) // cursor 1 = last_seq 1, no snapshot
	caughtUp.Snapshot = nil
	waiting := newPushConfig("p2", "t2", "waiting", at(3*time.Second)) // its last delivery is pending
	waiting.Cursor, waiting.LastDelivery = 0, "dlv_pending"
	waiting.Snapshot = nil
	mustPutPush(t, s, snap, behind, caughtUp, waiting)
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		d := store.Delivery{Principal: "p2", ID: "dlv_pending", TaskID: "t2", Source: "a2a-push", Operation: "push",
			Recovery: "idempotent", PayloadDigest: "sha256:x", State: store.DeliveryPrepared, NextAttemptAt: at(0),
			CreatedAt: at(0), UpdatedAt: at(0)}
		_, _, err := tx.InsertDelivery(ctx, d)
		return err
	})

	work := func() []string {
		t.Helper()
		cs, err := s.ListPushWork(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return pushIDs(cs)
	}
	if diff := cmp.Diff([]string{"p1/t1/snap", "p1/t1/behind"}, work()); diff != "" {
		t.Fatalf("work (-want +got):\n%s", diff)
	}
	if cs, err := s.ListPushWork(ctx, 1); err != nil || len(cs) != 1 || cs[0].ID != "snap" {
		t.Fatalf("work with limit 1 = %v, %v; want the oldest-updated config", pushIDs(cs), err)
	}

	// The pending delivery settles: the config waiting on it has work again.
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		d, err := tx.GetDelivery(ctx, "p2", "dlv_pending")
		if err != nil {
			return err
		}
		d.State = store.DeliveryFailed
		return tx.UpdateDelivery(ctx, d)
	})
	if diff := cmp.Diff([]string{"p1/t1/snap", "p1/t1/behind", "p2/t2/waiting"}, work()); diff != "" {
		t.Fatalf("work after the delivery settled (-want +got):\n%s", diff)
	}

	// Sending the snapshot and reading the events clear the work.
	s1 := snap
	s1.Snapshot, s1.UpdatedAt = nil, at(time.Hour)
	b1 := behind
	b1.Cursor, b1.UpdatedAt = 3, at(time.Hour)
	w1 := waiting
	w1.Cursor, w1.LastDelivery, w1.UpdatedAt = 1, "", at(time.Hour)
	if !advancePush(t, s, s1, 3) || !advancePush(t, s, b1, 1) || !advancePush(t, s, w1, 0) {
		t.Fatal("advance failed")
	}
	if got := work(); len(got) != 0 {
		t.Fatalf("work after everything was read: %v", got)
	}
	// A new event makes every config of the task due again, inside a transaction too.
	appendEvents(t, s, "p1", "t1", 1)
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		cs, err := tx.ListPushWork(ctx, 0)
		if err != nil {
			return err
		}
		if diff := cmp.Diff([]string{"p1/t1/behind", "p1/t1/snap"}, pushIDs(cs)); diff != "" {
			t.Errorf("work after a new event (-want +got):\n%s", diff)
		}
		return nil
	})
}

func appendEvents(t *testing.T, s store.Store, principal, taskID string, n int) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for range n {
			if _, err := AppendNext(ctx, tx, principal, taskID, "status", []byte(`{}`), at(0)); err != nil {
				return err
			}
		}
		return nil
	})
}

func testPushPrune(t *testing.T, s store.Store) {
	ctx := context.Background()
	insertContexts(t, s, newContext("p1", "c1", at(0)))
	insertTasks(t, s, newTask("p1", "old", "c1", "completed", at(0)), newTask("p1", "live", "c1", "working", at(0)))
	mustPutPush(t, s, newPushConfig("p1", "old", "a", at(0)), newPushConfig("p1", "old", "b", at(0)),
		newPushConfig("p1", "live", "a", at(0)))
	var r store.PruneResult
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		var err error
		r, err = tx.Prune(ctx, at(time.Hour), []string{"completed"}, 0)
		return err
	})
	if r.Tasks != 1 || r.PushConfigs != 2 {
		t.Fatalf("Prune = %+v, want 1 task and its 2 push configs", r)
	}
	// The pruned task's configs, with their tokens and credentials, went with it.
	for _, id := range []string{"a", "b"} {
		_, err := s.GetPushConfig(ctx, "p1", "old", id)
		wantNotFound(t, "config "+id+" of the pruned task", err)
	}
	if _, err := s.GetPushConfig(ctx, "p1", "live", "a"); err != nil {
		t.Fatalf("the live task's config went: %v", err)
	}
	// The backstop for configs an older build left behind finds none.
	var n int
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		var err error
		n, err = tx.PrunePushConfigs(ctx, 0)
		return err
	})
	if n != 0 {
		t.Fatalf("PrunePushConfigs deleted %d after the task prune, want 0", n)
	}
	if _, err := s.GetPushConfig(ctx, "p1", "live", "a"); err != nil {
		t.Fatalf("the live task's config went: %v", err)
	}
}

// A config whose notifications reached the end of its task is Finished: ListPushWork leaves it out
// (it reads no such config at all), whatever its cursor says; the flag reads back; a put (a new
// registration) clears it.
func testPushFinished(t *testing.T, s store.Store) {
	ctx := context.Background()
	insertTasks(t, s, newTask("p1", "t1", "c1", "completed", at(0)))
	appendEvents(t, s, "p1", "t1", 3)
	c := newPushConfig("p1", "t1", "a", at(time.Second))
	c.Snapshot = nil
	mustPutPush(t, s, c)
	if cs, err := s.ListPushWork(ctx, 0); err != nil || len(cs) != 1 {
		t.Fatalf("work before = %v, %v; want the config (cursor 1 < last_seq 3)", pushIDs(cs), err)
	}
	next := c
	next.Cursor, next.Finished, next.UpdatedAt = 2, true, at(2*time.Second) // say the end came at 2
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		ok, err := tx.AdvancePushConfig(ctx, next, c.Cursor)
		if err == nil && !ok {
			err = fmt.Errorf("not advanced")
		}
		return err
	})
	if cs, err := s.ListPushWork(ctx, 0); err != nil || len(cs) != 0 {
		t.Fatalf("work of a finished config = %v, %v; want none", pushIDs(cs), err)
	}
	if got, err := s.GetPushConfig(ctx, "p1", "t1", "a"); err != nil || !got.Finished {
		t.Fatalf("read back: Finished %v, %v", got.Finished, err)
	}
	mustPutPush(t, s, c) // registered again: a new snapshot-less registration at cursor 1
	if cs, err := s.ListPushWork(ctx, 0); err != nil || len(cs) != 1 || cs[0].Finished {
		t.Fatalf("work after a put = %+v, %v; want the config again, not finished", cs, err)
	}
}
