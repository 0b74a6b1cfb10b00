// Package storetest is the one suite every store driver passes (in the manner of River's
// riverdrivertest): a driver's own test calls Run with a function that opens a fresh, migrated,
// empty store, and the suite proves the store.Store contract on it, including the invariants the
// task plane relies on (gap-free event sequences, optimistic concurrency, principal scoping,
// retention that never drops live work).
//
// It also offers the helpers that open a store per driver for tests of shared code: OpenSQLite,
// OpenPostgres and ForEachDriver.
//
// Conventions the suite pins where store.go is silent, so every driver behaves the same:
//   - A limit of 0 means no limit (ListTasks, TaskEvents, ListEvidence, ListWakes, Prune).
//   - TaskEvents of a missing (or another principal's) task is ErrNotFound, not an empty log.
//   - TouchContext and UpdateWake of a missing row are ErrNotFound; wakes are scoped
//     by (Principal, ID) like every other key.
//   - TouchContext never moves LastEventAt backwards.
//   - EvidenceFilter.Since is inclusive, like TaskFilter.StatusAfter.
//   - Prune also bounds the claims and contexts it deletes per call by limit; callers loop.
//   - Close may be called more than once, and closes Done; Update after Close fails with store.ErrClosed,
//     reads with an error store.Unavailable reports.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/channels-dev/channels/taskplane/store"
)

// t0 is the suite's reference time: UTC and with a non-zero microsecond part, like the times
// callers pass, so a driver that loses precision or the zone fails the comparisons.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC)

// at returns t0 moved by d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// cmpOpts compare rows: times with time.Equal (cmp uses a type's Equal method), nil and empty
// byte slices alike (drivers may return either for an empty BLOB/bytea).
var cmpOpts = cmp.Options{cmpopts.EquateEmpty()}

type testCase struct {
	name string
	run  func(t *testing.T, s store.Store)
}

// Run proves the store contract on the stores open returns. open must return a new, empty,
// migrated store per call and close it when the test ends. Subtests run in parallel, each on its
// own store.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	groups := []struct {
		name  string
		cases []testCase
	}{
		{"Claims", []testCase{
			{"InsertThenGetRoundTrips", testClaimInsertGet},
			{"DuplicateReturnsExistingNotInserted", testClaimDuplicate},
			{"DeleteRemovesTheClaimOnlyWhileItNamesTheTask", testClaimDelete},
		}},
		{"Contexts", []testCase{
			{"EnsureSameKeyReturnsSameID", testEnsureContextSameKey},
			{"EnsureDistinctKeysGetDistinctIDs", testEnsureContextDistinctKeys},
			{"Ensure50ConcurrentUpdatesAgreeOnOneID", testEnsureContextConcurrent},
			{"EnsureOfAnExistingKeyRecordsActivityNeverBackwards", testEnsureContextTouches},
			{"EnsureWithoutAConversationKeyFailsAndCreatesNothing", testEnsureContextNoKey},
			{"InsertThenGetRoundTrips", testContextInsertGet},
			{"InsertOfAnExistingIDIsConcurrentModificationAndChangesNothing", testContextInsertTaken},
			{"TouchAdvancesLastEventAtNeverBackwards", testContextTouch},
			{"MissingIsNotFound", testContextMissing},
		}},
		{"Tasks", []testCase{
			{"InsertThenGetRoundTripsAllFields", testTaskInsertGet},
			{"InsertDuplicateIDFails", testTaskInsertDuplicate},
			{"UpdateWithCurrentVersionWritesAndBumpsVersion", testTaskUpdate},
			{"UpdateWithStaleVersionIsConcurrentModification", testTaskUpdateStale},
			{"UpdateMissingIsNotFound", testTaskUpdateMissing},
		}},
		{"TaskEvents", []testCase{
			{"AppendStoresEventsUnderTheirSeqsAndUpdateTheLastSeq", testEventsAppend},
			{"AppendUnderATakenSeqIsConcurrentModification", testEventsTakenSeq},
			{"AfterNReturnsExactlyLaterEventsInOrder", testEventsAfter},
			{"RolledBackAppendLeavesNoGap", testEventsRollbackNoGap},
			{"20ConcurrentAppendersGetSeqsOneToNWithoutGaps", testEventsConcurrent},
			{"OfMissingTaskIsNotFound", testEventsOfMissing},
			{"StrayEventsOfAMissingOrForeignTaskAreNeverServed", testEventsStray},
		}},
		{"ListTasks", []testCase{
			{"OrderedByStatusTimeDescThenIDDesc", testListOrder},
			{"FiltersByContextStateAndStatusAfterInclusive", testListFilters},
			{"CursorPagesThroughEveryRowOnceWithConstantTotal", testListCursor},
			{"MaxBytesStopsReadingAtTheRowThatPassesIt", testListMaxBytes},
		}},
		{"PrincipalScoping", []testCase{
			{"OtherPrincipalsRowsAreNotFoundLikeMissingOnes", testScopingReads},
			{"OtherPrincipalsRowsCannotBeWritten", testScopingWrites},
			{"SameKeysUnderAnotherPrincipalAreIndependent", testScopingIndependentKeys},
		}},
		{"Anchors", []testCase{
			{"PutGetAndReplace", testAnchors},
			{"PutForAMissingTaskIsNotFoundAndStoresNothing", testAnchorOfMissingTask},
		}},
		{"Checkpoints", []testCase{
			{"NeverRegressAndVersionCountsAdvances", testCheckpoints},
			{"TwoInstancesOfOneSourceKeepSeparatePositions", testCheckpointInstances},
			{"AnInstanceTakesOverTheCheckpointFromBeforeInstances", testCheckpointTakeOver},
		}},
		{"Evidence", []testCase{
			{"IDsIncreaseAndListIsNewestFirst", testEvidenceOrder},
			{"Filters", testEvidenceFilters},
			{"PruneDeletesOnlyOlderThanCutoffOldestFirst", testEvidencePrune},
		}},
		{"Wakes", []testCase{
			{"ListIsFIFOByCreatedAtWithinState", testWakesFIFO},
			{"UpdateMovesWakeBetweenStates", testWakesUpdate},
		}},
		{"WakeQueue", wakeQueueCases()},
		{"Prune", []testCase{
			{"DeletesOldTerminalWorkKeepsLiveWorkAndRecentContexts", testPrune},
			{"RespectsLimitAcrossCalls", testPruneLimit},
			{"LimitZeroMeansNoLimit", testPruneNoLimit},
			{"ATasksClaimsGoWithItWhateverTheLimit", testPruneTaskClaims},
		}},
		{"Deliveries", deliveryCases()},
		{"PushConfigs", pushConfigCases()},
		{"Summary", summaryCases()},
		{"Update", []testCase{
			{"FnErrorWritesNothingAndIsReturned", testUpdateFnError},
			{"CanceledContextFailsWithoutRunningFn", testUpdateCanceled},
			{"TxReadsSeeOwnWrites", testUpdateReadsOwnWrites},
			{"ConcurrentUpdatesAllCommit", testUpdateConcurrent},
		}},
		{"Driver", []testCase{
			{"ListenMatchesCapabilities", testListen},
			{"UpdateAndReadsAfterCloseAreUnavailableAndCloseTwiceIsHarmless", testClose},
		}},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, open(t))
				})
			}
		})
	}
}

// ---- helpers ----

// update runs fn in one Update and fails the test on error.
func update(t *testing.T, s store.Store, fn func(ctx context.Context, tx store.Tx) error) {
	t.Helper()
	if err := s.Update(context.Background(), fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func newTask(principal, id, contextID, state string, status time.Time) store.Task {
	return store.Task{
		Principal:  principal,
		ID:         id,
		ContextID:  contextID,
		Source:     "slack",
		State:      state,
		StatusTime: status,
		Version:    1,
		Body:       []byte(`{"task":"` + id + `"}`),
		CreatedAt:  status,
		UpdatedAt:  status,
	}
}

func newContext(principal, id string, last time.Time) store.Context {
	return store.Context{Principal: principal, ID: id, Source: "a2a", CreatedAt: last, LastEventAt: last}
}

func newClaim(principal, source, identity string, state store.ClaimState, updated time.Time) store.Claim {
	return store.Claim{
		Principal: principal, Source: source, Identity: identity, Digest: "sha256:" + identity,
		State: state, CreatedAt: updated, UpdatedAt: updated,
	}
}

func insertTasks(t *testing.T, s store.Store, tasks ...store.Task) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, task := range tasks {
			if err := tx.InsertTask(ctx, task); err != nil {
				return err
			}
		}
		return nil
	})
}

func insertContexts(t *testing.T, s store.Store, cs ...store.Context) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, c := range cs {
			if err := tx.InsertContext(ctx, c); err != nil {
				return err
			}
		}
		return nil
	})
}

func appendEvent(t *testing.T, s store.Store, principal, taskID, kind string) int64 {
	t.Helper()
	var seq int64
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		var err error
		seq, err = AppendNext(ctx, tx, principal, taskID, kind, []byte(`{"kind":"`+kind+`"}`), t0)
		return err
	})
	return seq
}

// AppendNext appends an event to a task's log the way the task plane does: it reads the task,
// appends under the sequence after its LastSeq, and writes the task with the new LastSeq
// (UpdateTask guarded by the version it read, which that bumps). It returns the sequence.
func AppendNext(ctx context.Context, tx store.Tx, principal, taskID, kind string, payload []byte, at time.Time) (int64, error) {
	task, err := tx.GetTask(ctx, principal, taskID)
	if err != nil {
		return 0, err
	}
	seq := task.LastSeq + 1
	if err := tx.AppendTaskEvent(ctx, principal, taskID, seq, kind, payload, at); err != nil {
		return 0, err
	}
	task.LastSeq = seq
	if err := tx.UpdateTask(ctx, task, task.Version); err != nil {
		return 0, err
	}
	return seq, nil
}

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s: err = %v, want ErrNotFound", what, err)
	}
}

func diff(t *testing.T, what string, want, got any) {
	t.Helper()
	if d := cmp.Diff(want, got, cmpOpts); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, d)
	}
}

func ids(tasks []store.Task) []string {
	out := make([]string, 0, len(tasks))
	for _, task := range tasks {
		out = append(out, task.ID)
	}
	return out
}

func seqs(events []store.TaskEvent) []int64 {
	out := make([]int64, 0, len(events))
	for _, e := range events {
		out = append(out, e.Seq)
	}
	return out
}

// ---- claims ----

func testClaimInsertGet(t *testing.T, s store.Store) {
	c := newClaim("alice", "slack", "Ev1", store.ClaimPending, t0)
	c.ContextID = "ctx-1"
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		got, inserted, err := tx.InsertClaim(ctx, c)
		if err != nil {
			return err
		}
		if !inserted {
			t.Error("first InsertClaim: inserted = false, want true")
		}
		diff(t, "InsertClaim result", c, got)
		return nil
	})
	got, err := s.GetClaim(context.Background(), "alice", "slack", "Ev1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "GetClaim", c, got)
	_, err = s.GetClaim(context.Background(), "alice", "slack", "Ev2")
	wantNotFound(t, "GetClaim of a missing claim", err)
}

// insertTaskClaim stores alice's done claim of slack event Ev1, whose outcome is task-1.
func insertTaskClaim(t *testing.T, s store.Store) store.Claim {
	t.Helper()
	c := newClaim("alice", "slack", "Ev1", store.ClaimDone, t0)
	c.OutcomeKind, c.TaskID = "task", "task-1"
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		_, _, err := tx.InsertClaim(ctx, c)
		return err
	})
	return c
}

func testClaimDelete(t *testing.T, s store.Store) {
	insertTaskClaim(t, s)
	for _, miss := range []struct{ principal, task string }{{"bob", "task-1"}, {"alice", "task-2"}} {
		update(t, s, func(ctx context.Context, tx store.Tx) error {
			deleted, err := tx.DeleteClaim(ctx, miss.principal, "slack", "Ev1", miss.task)
			if deleted {
				t.Errorf("DeleteClaim as %s of %s deleted alice's claim of task-1", miss.principal, miss.task)
			}
			return err
		})
	}
	if _, err := s.GetClaim(context.Background(), "alice", "slack", "Ev1"); err != nil {
		t.Fatalf("the claim after refused deletes: %v", err)
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		deleted, err := tx.DeleteClaim(ctx, "alice", "slack", "Ev1", "task-1")
		if !deleted {
			t.Error("DeleteClaim of the claim's own task did not delete it")
		}
		return err
	})
	if _, err := s.GetClaim(context.Background(), "alice", "slack", "Ev1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the claim after its delete: %v, want ErrNotFound", err)
	}
}

func testClaimDuplicate(t *testing.T, s store.Store) {
	first := insertTaskClaim(t, s)
	second := newClaim("alice", "slack", "Ev1", store.ClaimPending, at(time.Minute))
	second.Digest = "sha256:different"
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		got, inserted, err := tx.InsertClaim(ctx, second)
		if err != nil {
			return err
		}
		if inserted {
			t.Error("duplicate InsertClaim: inserted = true, want false")
		}
		diff(t, "duplicate InsertClaim returns the existing claim", first, got)
		return nil
	})
	got, err := s.GetClaim(context.Background(), "alice", "slack", "Ev1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "stored claim after duplicate insert", first, got)
}

// ---- contexts ----

func ensure(t *testing.T, s store.Store, principal, source, key, candidate string) string {
	t.Helper()
	var id string
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		var err error
		id, err = tx.EnsureContext(ctx, principal, source, key, candidate, t0)
		return err
	})
	return id
}

func testEnsureContextSameKey(t *testing.T, s store.Store) {
	id := ensure(t, s, "alice", "slack", "T1/C1/1700000000.000100", "ctx-a")
	if id != "ctx-a" {
		t.Errorf("first EnsureContext = %q, want the candidate ctx-a", id)
	}
	if again := ensure(t, s, "alice", "slack", "T1/C1/1700000000.000100", "ctx-b"); again != id {
		t.Errorf("second EnsureContext = %q, want %q", again, id)
	}
	got, err := s.GetContext(context.Background(), "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Context{Principal: "alice", ID: "ctx-a", Source: "slack", ConversationKey: "T1/C1/1700000000.000100",
		CreatedAt: t0, LastEventAt: t0}
	diff(t, "ensured context", want, got)
	_, err = s.GetContext(context.Background(), "alice", "ctx-b")
	wantNotFound(t, "the losing candidate ID", err)
}

func testEnsureContextDistinctKeys(t *testing.T, s store.Store) {
	a := ensure(t, s, "alice", "slack", "k1", "ctx-1")
	b := ensure(t, s, "alice", "slack", "k2", "ctx-2")
	c := ensure(t, s, "alice", "github", "k1", "ctx-3")
	if a == b || a == c || b == c {
		t.Errorf("ids %q %q %q: distinct (source, key) pairs must get distinct contexts", a, b, c)
	}
}

func testEnsureContextConcurrent(t *testing.T, s store.Store) {
	const n = 50
	got := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
				id, err := tx.EnsureContext(ctx, "alice", "slack", "T1/C1/race", fmt.Sprintf("ctx-%02d", i), t0)
				got[i] = id
				return err
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Update %d: %v", i, err)
		}
	}
	for i, id := range got {
		if id != got[0] {
			t.Fatalf("EnsureContext %d = %q, EnsureContext 0 = %q: concurrent callers must get one id", i, id, got[0])
		}
	}
	if _, err := s.GetContext(context.Background(), "alice", got[0]); err != nil {
		t.Errorf("GetContext(%q): %v", got[0], err)
	}
}

// EnsureContext of a conversation that has a context records the event's activity, as
// TouchContext would (the task plane does not touch it again).
func testEnsureContextTouches(t *testing.T, s store.Store) {
	const key = "T1/C1/1700000000.000100"
	ensureAt := func(now time.Time) {
		update(t, s, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.EnsureContext(ctx, "alice", "slack", key, "ctx-b", now)
			return err
		})
	}
	id := ensure(t, s, "alice", "slack", key, "ctx-a")
	for _, step := range []struct {
		ensure, want time.Time
	}{
		{at(time.Hour), at(time.Hour)},
		{at(time.Minute), at(time.Hour)}, // an older event does not make the context look older
		{at(2 * time.Hour), at(2 * time.Hour)},
	} {
		ensureAt(step.ensure)
		got, err := s.GetContext(context.Background(), "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		if !got.LastEventAt.Equal(step.want) || !got.CreatedAt.Equal(t0) {
			t.Errorf("after EnsureContext at %v: LastEventAt %v, CreatedAt %v; want %v, %v",
				step.ensure, got.LastEventAt, got.CreatedAt, step.want, t0)
		}
	}
}

// A context without a conversation key is InsertContext's to make: EnsureContext refuses an empty
// key rather than making a new context at every call.
func testEnsureContextNoKey(t *testing.T, s store.Store) {
	var id string
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		var err error
		id, err = tx.EnsureContext(ctx, "alice", "slack", "", "ctx-a", t0)
		return err
	})
	if err == nil {
		t.Errorf("EnsureContext with an empty key = %q, want an error", id)
	}
	_, err = s.GetContext(context.Background(), "alice", "ctx-a")
	wantNotFound(t, "the candidate context", err)
}

func testContextInsertGet(t *testing.T, s store.Store) {
	c := store.Context{Principal: "alice", ID: "ctx-1", Source: "a2a", CreatedAt: t0, LastEventAt: at(time.Second)}
	insertContexts(t, s, c)
	got, err := s.GetContext(context.Background(), "alice", "ctx-1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "GetContext", c, got)
	// Contexts without a conversation key never collide with each other.
	insertContexts(t, s, store.Context{Principal: "alice", ID: "ctx-2", Source: "a2a", CreatedAt: t0, LastEventAt: t0})
}

func testContextInsertTaken(t *testing.T, s store.Store) {
	c := store.Context{Principal: "alice", ID: "ctx-1", Source: "a2a", CreatedAt: t0, LastEventAt: t0}
	insertContexts(t, s, c)
	for _, name := range []string{"later transaction", "same transaction"} {
		err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			if name == "same transaction" {
				if err := tx.InsertContext(ctx, store.Context{Principal: "alice", ID: "ctx-2", Source: "a2a",
					CreatedAt: t0, LastEventAt: t0}); err != nil {
					return err
				}
			}
			return tx.InsertContext(ctx, store.Context{Principal: "alice", ID: "ctx-1", Source: "slack",
				CreatedAt: at(time.Hour), LastEventAt: at(time.Hour)})
		})
		if !errors.Is(err, store.ErrConcurrentModification) {
			t.Errorf("insert of an existing context (%s): err = %v, want ErrConcurrentModification", name, err)
		}
	}
	got, err := s.GetContext(context.Background(), "alice", "ctx-1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "the context after two refused inserts", c, got)
	if _, err := s.GetContext(context.Background(), "alice", "ctx-2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused transaction's other insert: err = %v, want ErrNotFound", err)
	}
	// The same id under another principal is another context.
	insertContexts(t, s, store.Context{Principal: "bob", ID: "ctx-1", Source: "a2a", CreatedAt: t0, LastEventAt: t0})
}

func testContextTouch(t *testing.T, s store.Store) {
	insertContexts(t, s, newContext("alice", "ctx-1", t0))
	for _, step := range []struct {
		touch, want time.Time
	}{
		{at(time.Hour), at(time.Hour)},
		{at(time.Minute), at(time.Hour)}, // an older event does not make the context look older
		{at(2 * time.Hour), at(2 * time.Hour)},
	} {
		update(t, s, func(ctx context.Context, tx store.Tx) error {
			return tx.TouchContext(ctx, "alice", "ctx-1", step.touch)
		})
		got, err := s.GetContext(context.Background(), "alice", "ctx-1")
		if err != nil {
			t.Fatal(err)
		}
		if !got.LastEventAt.Equal(step.want) {
			t.Errorf("after TouchContext(%v): LastEventAt = %v, want %v", step.touch, got.LastEventAt, step.want)
		}
		if !got.CreatedAt.Equal(t0) {
			t.Errorf("TouchContext changed CreatedAt to %v", got.CreatedAt)
		}
	}
}

func testContextMissing(t *testing.T, s store.Store) {
	_, err := s.GetContext(context.Background(), "alice", "nope")
	wantNotFound(t, "GetContext", err)
	err = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return tx.TouchContext(ctx, "alice", "nope", t0)
	})
	wantNotFound(t, "TouchContext", err)
}

// ---- tasks ----

func testTaskInsertGet(t *testing.T, s store.Store) {
	tasks := []store.Task{
		newTask("alice", "task-1", "ctx-1", "submitted", t0),
		{
			Principal: "alice", ID: "task-2", ContextID: "ctx-1", Source: "github", State: "working",
			// Before 1970 (negative unix time) and at a microsecond boundary: both must survive.
			StatusTime: time.Date(1969, 7, 20, 20, 17, 40, 999999000, time.UTC),
			Version:    7, LastSeq: 0, Body: nil,
			CreatedAt: time.Date(2038, 1, 19, 3, 14, 8, 1000, time.UTC), UpdatedAt: at(time.Microsecond),
		},
	}
	insertTasks(t, s, tasks...)
	for _, want := range tasks {
		got, err := s.GetTask(context.Background(), want.Principal, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		diff(t, "GetTask "+want.ID, want, got)
		for _, f := range []struct {
			name      string
			want, got time.Time
		}{{"StatusTime", want.StatusTime, got.StatusTime}, {"CreatedAt", want.CreatedAt, got.CreatedAt}, {"UpdatedAt", want.UpdatedAt, got.UpdatedAt}} {
			if !f.got.Equal(f.want) {
				t.Errorf("%s %s = %v, want exactly %v", want.ID, f.name, f.got, f.want)
			}
		}
	}
	_, err := s.GetTask(context.Background(), "alice", "task-3")
	wantNotFound(t, "GetTask of a missing task", err)
}

func testTaskInsertDuplicate(t *testing.T, s store.Store) {
	insertTasks(t, s, newTask("alice", "task-1", "ctx-1", "submitted", t0))
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return tx.InsertTask(ctx, newTask("alice", "task-1", "ctx-2", "working", at(time.Second)))
	})
	if err == nil {
		t.Fatal("inserting a task with an existing ID succeeded")
	}
	got, err := s.GetTask(context.Background(), "alice", "task-1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "task after failed duplicate insert", newTask("alice", "task-1", "ctx-1", "submitted", t0), got)
}

func testTaskUpdate(t *testing.T, s store.Store) {
	orig := newTask("alice", "task-1", "ctx-1", "submitted", t0)
	insertTasks(t, s, orig)

	u := orig
	u.State, u.StatusTime, u.Body, u.UpdatedAt = "working", at(time.Second), []byte(`{"v":2}`), at(time.Second)
	u.LastSeq = 1 // as after appending the first event
	// Not UpdateTask's to write: context, source, creation time, version.
	u.ContextID, u.Source, u.CreatedAt, u.Version = "ctx-other", "other", at(time.Hour), 99
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.AppendTaskEvent(ctx, "alice", "task-1", 1, "status", nil, at(time.Second)); err != nil {
			return err
		}
		return tx.UpdateTask(ctx, u, 1)
	})

	want := orig
	want.State, want.StatusTime, want.Body, want.UpdatedAt = "working", at(time.Second), []byte(`{"v":2}`), at(time.Second)
	want.Version, want.LastSeq = 2, 1
	got, err := s.GetTask(context.Background(), "alice", "task-1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "task after UpdateTask", want, got)

	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.UpdateTask(ctx, u, 2) })
	got, err = s.GetTask(context.Background(), "alice", "task-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 3 {
		t.Errorf("Version after second UpdateTask = %d, want 3", got.Version)
	}
}

func testTaskUpdateStale(t *testing.T, s store.Store) {
	orig := newTask("alice", "task-1", "ctx-1", "submitted", t0)
	insertTasks(t, s, orig)
	u := orig
	u.State = "working"
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.UpdateTask(ctx, u, 1) })

	stale := orig
	stale.State = "canceled"
	for _, expect := range []int64{1, 3} {
		err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			return tx.UpdateTask(ctx, stale, expect)
		})
		if !errors.Is(err, store.ErrConcurrentModification) {
			t.Errorf("UpdateTask expecting version %d (stored 2): err = %v, want ErrConcurrentModification", expect, err)
		}
	}
	got, err := s.GetTask(context.Background(), "alice", "task-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "working" || got.Version != 2 {
		t.Errorf("after stale updates: state %q version %d, want working 2", got.State, got.Version)
	}
}

func testTaskUpdateMissing(t *testing.T, s store.Store) {
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return tx.UpdateTask(ctx, newTask("alice", "nope", "ctx-1", "working", t0), 1)
	})
	wantNotFound(t, "UpdateTask of a missing task", err)
}

// ---- task events ----

func testEventsAppend(t *testing.T, s store.Store) {
	insertTasks(t, s, newTask("alice", "task-1", "ctx-1", "submitted", t0))
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for i, kind := range []string{"task", "status", "artifact"} {
			err := tx.AppendTaskEvent(ctx, "alice", "task-1", int64(i+1), kind, []byte(`{"i":`+fmt.Sprint(i)+`}`), at(time.Duration(i)*time.Second))
			if err != nil {
				return err
			}
		}
		task := newTask("alice", "task-1", "ctx-1", "submitted", t0)
		task.LastSeq = 3
		return tx.UpdateTask(ctx, task, 1)
	})
	got, err := s.TaskEvents(context.Background(), "alice", "task-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.TaskEvent{
		{Principal: "alice", TaskID: "task-1", Seq: 1, Kind: "task", Payload: []byte(`{"i":0}`), CreatedAt: t0},
		{Principal: "alice", TaskID: "task-1", Seq: 2, Kind: "status", Payload: []byte(`{"i":1}`), CreatedAt: at(time.Second)},
		{Principal: "alice", TaskID: "task-1", Seq: 3, Kind: "artifact", Payload: []byte(`{"i":2}`), CreatedAt: at(2 * time.Second)},
	}
	diff(t, "TaskEvents", want, got)
	task, err := s.GetTask(context.Background(), "alice", "task-1")
	if err != nil {
		t.Fatal(err)
	}
	if task.LastSeq != 3 || task.Version != 2 {
		t.Errorf("task after 3 appends and its update: LastSeq %d Version %d, want 3 2", task.LastSeq, task.Version)
	}
}

// A seq the log holds is taken: appending under it again changes nothing and is
// ErrConcurrentModification, in the same transaction or a later one.
func testEventsTakenSeq(t *testing.T, s store.Store) {
	insertTasks(t, s, newTask("alice", "task-1", "ctx-1", "submitted", t0))
	appendEvent(t, s, "alice", "task-1", "task")
	for _, name := range []string{"later transaction", "same transaction"} {
		err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			if name == "same transaction" {
				if _, err := AppendNext(ctx, tx, "alice", "task-1", "status", []byte(`{"first":true}`), t0); err != nil {
					return err
				}
				return tx.AppendTaskEvent(ctx, "alice", "task-1", 2, "status", []byte(`{"again":true}`), t0)
			}
			return tx.AppendTaskEvent(ctx, "alice", "task-1", 1, "status", []byte(`{"again":true}`), t0)
		})
		if !errors.Is(err, store.ErrConcurrentModification) {
			t.Errorf("append under a taken seq (%s): err = %v, want ErrConcurrentModification", name, err)
		}
	}
	wantOnlyTheTaskEvent(t, s, "the log after two refused appends")
}

// wantOnlyTheTaskEvent fails unless alice's task-1 has exactly the event appendEvent(…, "task")
// gave it.
func wantOnlyTheTaskEvent(t *testing.T, s store.Store, what string) {
	t.Helper()
	got, err := s.TaskEvents(context.Background(), "alice", "task-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, what, []store.TaskEvent{
		{Principal: "alice", TaskID: "task-1", Seq: 1, Kind: "task", Payload: []byte(`{"kind":"task"}`), CreatedAt: t0},
	}, got)
}

func testEventsAfter(t *testing.T, s store.Store) {
	insertTasks(t, s, newTask("alice", "task-1", "ctx-1", "submitted", t0), newTask("alice", "task-2", "ctx-1", "submitted", t0))
	for range 5 {
		appendEvent(t, s, "alice", "task-1", "status")
		appendEvent(t, s, "alice", "task-2", "status") // interleaved: must not leak into task-1's log
	}
	for _, c := range []struct {
		after int64
		limit int
		want  []int64
	}{
		{0, 0, []int64{1, 2, 3, 4, 5}},
		{2, 0, []int64{3, 4, 5}},
		{4, 0, []int64{5}},
		{5, 0, nil},
		{9, 0, nil},
		{1, 2, []int64{2, 3}},
		{0, 1, []int64{1}},
	} {
		for _, via := range []string{"store", "tx"} {
			var got []store.TaskEvent
			var err error
			if via == "store" {
				got, err = s.TaskEvents(context.Background(), "alice", "task-1", c.after, c.limit)
			} else {
				err = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
					got, err = tx.TaskEvents(ctx, "alice", "task-1", c.after, c.limit)
					return err
				})
			}
			if err != nil {
				t.Fatalf("TaskEvents(after %d, limit %d) via %s: %v", c.after, c.limit, via, err)
			}
			if d := cmp.Diff(c.want, seqs(got), cmpOpts); d != "" {
				t.Errorf("TaskEvents(after %d, limit %d) via %s seqs (-want +got):\n%s", c.after, c.limit, via, d)
			}
			for _, e := range got {
				if e.TaskID != "task-1" || e.Principal != "alice" {
					t.Errorf("event %+v belongs to another task", e)
				}
			}
		}
	}
}

func testEventsRollbackNoGap(t *testing.T, s store.Store) {
	insertTasks(t, s, newTask("alice", "task-1", "ctx-1", "submitted", t0))
	appendEvent(t, s, "alice", "task-1", "task")
	errRollback := errors.New("roll back")
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		if _, err := AppendNext(ctx, tx, "alice", "task-1", "status", nil, t0); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("Update = %v, want the fn's error", err)
	}
	if seq := appendEvent(t, s, "alice", "task-1", "status"); seq != 2 {
		t.Errorf("append after a rolled-back append: seq = %d, want 2 (no gap)", seq)
	}
	got, err := s.TaskEvents(context.Background(), "alice", "task-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "seqs", []int64{1, 2}, seqs(got))
}

func testEventsConcurrent(t *testing.T, s store.Store) {
	const n = 20
	insertTasks(t, s, newTask("alice", "task-1", "ctx-1", "working", t0))
	got := make([]int64, n)
	errs := make([]error, n)
	var (
		wg   sync.WaitGroup
		lost atomic.Int32
	)
	for i := range n {
		wg.Go(func() {
			// As the task plane does: a writer that loses the race for a seq (on a store shared
			// by processes, where Updates run in concurrent transactions) reads again.
			for range 200 {
				errs[i] = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
					seq, err := AppendNext(ctx, tx, "alice", "task-1", "status", []byte(fmt.Sprint(i)), t0)
					got[i] = seq
					return err
				})
				if !errors.Is(errs[i], store.ErrConcurrentModification) {
					break
				}
				lost.Add(1)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("appender %d: %v", i, err)
		}
	}
	if !s.Capabilities().MultiProcess && lost.Load() > 0 {
		// One writer runs every Update in turn: a read never misses an earlier append.
		t.Errorf("%d appends lost a race on a single-writer store", lost.Load())
	}
	want := make([]int64, n)
	for i := range want {
		want[i] = int64(i + 1)
	}
	sorted := slices.Clone(got)
	slices.Sort(sorted)
	diff(t, "returned seqs, sorted", want, sorted)
	events, err := s.TaskEvents(context.Background(), "alice", "task-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "stored seqs", want, seqs(events))
	// Each appender's payload sits at the seq it was told.
	for i, seq := range got {
		if p := string(events[seq-1].Payload); p != fmt.Sprint(i) {
			t.Errorf("event %d holds payload %q, want appender %d's", seq, p, i)
		}
	}
	task, err := s.GetTask(context.Background(), "alice", "task-1")
	if err != nil {
		t.Fatal(err)
	}
	if task.LastSeq != n {
		t.Errorf("LastSeq = %d, want %d", task.LastSeq, n)
	}
}

// AppendTaskEvent does not check that the task exists (its caller reads or inserts the task in the
// same transaction). Should events ever be stored under a key with no task, as by a buggy caller
// or under another principal's task id, reading them is still ErrNotFound: missing looks missing.
func testEventsStray(t *testing.T, s store.Store) {
	insertTasks(t, s, newTask("alice", "task-1", "ctx-1", "submitted", t0))
	appendEvent(t, s, "alice", "task-1", "task")
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.AppendTaskEvent(ctx, "alice", "nope", 1, "status", nil, t0); err != nil {
			return err
		}
		return tx.AppendTaskEvent(ctx, "bob", "task-1", 1, "status", []byte(`{"bob":true}`), t0)
	})
	for _, k := range []struct{ principal, taskID string }{{"alice", "nope"}, {"bob", "task-1"}} {
		_, err := s.TaskEvents(context.Background(), k.principal, k.taskID, 0, 0)
		wantNotFound(t, fmt.Sprintf("TaskEvents of %s's stray events of %s", k.principal, k.taskID), err)
		err = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			_, err := tx.TaskEvents(ctx, k.principal, k.taskID, 0, 0)
			return err
		})
		wantNotFound(t, fmt.Sprintf("TaskEvents of %s's stray events of %s in an Update", k.principal, k.taskID), err)
	}
	wantOnlyTheTaskEvent(t, s, "alice's log beside bob's stray event")
}

func testEventsOfMissing(t *testing.T, s store.Store) {
	_, err := s.TaskEvents(context.Background(), "alice", "nope", 0, 0)
	wantNotFound(t, "TaskEvents of a missing task", err)
}

// ---- ListTasks ----

// listFixture inserts alice's tasks a..e (and one of bob's) and returns them by ID. In the order
// (StatusTime DESC, ID DESC) they are d, c, b, a, e; b and c share a StatusTime. e came from
// the webhook source, the others from slack.
func listFixture(t *testing.T, s store.Store) map[string]store.Task {
	t.Helper()
	tasks := []store.Task{
		newTask("alice", "a", "c1", "working", t0),
		newTask("alice", "b", "c1", "completed", at(time.Second)),
		newTask("alice", "c", "c2", "working", at(time.Second)),
		newTask("alice", "d", "c2", "input-required", at(2*time.Second)),
		newTask("alice", "e", "c1", "working", at(-time.Second)),
		newTask("bob", "x", "c1", "working", at(5*time.Second)),
	}
	tasks[4].Source = "webhook"
	insertTasks(t, s, tasks...)
	m := map[string]store.Task{}
	for _, task := range tasks {
		m[task.ID] = task
	}
	return m
}

func testListOrder(t *testing.T, s store.Store) {
	m := listFixture(t, s)
	got, total, err := s.ListTasks(context.Background(), "alice", store.TaskFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if total != 5 {
		t.Errorf("total = %d, want 5", total)
	}
	want := []store.Task{m["d"], m["c"], m["b"], m["a"], m["e"]}
	diff(t, "ListTasks", want, got)
}

func testListFilters(t *testing.T, s store.Store) {
	listFixture(t, s)
	for _, c := range []struct {
		name      string
		f         store.TaskFilter
		want      []string
		wantTotal int
	}{
		{"context", store.TaskFilter{ContextID: "c1"}, []string{"b", "a", "e"}, 3},
		{"state", store.TaskFilter{State: "working"}, []string{"c", "a", "e"}, 3},
		{"status after is inclusive", store.TaskFilter{StatusAfter: at(time.Second)}, []string{"d", "c", "b"}, 3},
		{"context and state", store.TaskFilter{ContextID: "c1", State: "working"}, []string{"a", "e"}, 2},
		{"limit keeps the total", store.TaskFilter{Limit: 2}, []string{"d", "c"}, 5},
		{"source", store.TaskFilter{Source: "webhook"}, []string{"e"}, 1},
		{"source before the limit", store.TaskFilter{Source: "webhook", Limit: 1}, []string{"e"}, 1},
		{"source and context", store.TaskFilter{Source: "slack", ContextID: "c1"}, []string{"b", "a"}, 2},
		{"no match", store.TaskFilter{ContextID: "c9"}, nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, total, err := s.ListTasks(context.Background(), "alice", c.f)
			if err != nil {
				t.Fatal(err)
			}
			diff(t, "ids", c.want, ids(got))
			if total != c.wantTotal {
				t.Errorf("total = %d, want %d", total, c.wantTotal)
			}
		})
	}
}

func testListCursor(t *testing.T, s store.Store) {
	m := listFixture(t, s)
	for _, c := range []struct {
		name  string
		f     store.TaskFilter
		pages [][]string
		total int
	}{
		{"all by two", store.TaskFilter{Limit: 2}, [][]string{{"d", "c"}, {"b", "a"}, {"e"}}, 5},
		{"context c1 by one", store.TaskFilter{ContextID: "c1", Limit: 1}, [][]string{{"b"}, {"a"}, {"e"}}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := c.f
			var pages [][]string
			for range 10 {
				got, total, err := s.ListTasks(context.Background(), "alice", f)
				if err != nil {
					t.Fatal(err)
				}
				if total != c.total {
					t.Errorf("page %d: total = %d, want %d regardless of the cursor", len(pages), total, c.total)
				}
				if len(got) == 0 {
					break
				}
				pages = append(pages, ids(got))
				last := got[len(got)-1]
				f.CursorTime, f.CursorID = last.StatusTime, last.ID
			}
			diff(t, "pages", c.pages, pages)
		})
	}
	// A cursor between the two tasks sharing a StatusTime splits them by ID.
	got, _, err := s.ListTasks(context.Background(), "alice", store.TaskFilter{CursorTime: m["c"].StatusTime, CursorID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "after cursor (t0+1s, c)", []string{"b", "a", "e"}, ids(got))
}

// testListMaxBytes: a listing bounded by MaxBytes stops at the first row past the first whose
// bodies together pass it, so a page bounded by size never reads its whole Limit of large rows.
func testListMaxBytes(t *testing.T, s store.Store) {
	m := listFixture(t, s) // d, c, b, a, e, each body 12 bytes
	for _, c := range []struct {
		max  int
		want []string
	}{{0, []string{"d", "c", "b", "a", "e"}}, {1, []string{"d", "c"}}, {20, []string{"d", "c"}},
		{24, []string{"d", "c", "b"}}, {30, []string{"d", "c", "b"}}, {1000, []string{"d", "c", "b", "a", "e"}}} {
		got, total, err := s.ListTasks(context.Background(), "alice", store.TaskFilter{Limit: 10, MaxBytes: c.max})
		if err != nil {
			t.Fatal(err)
		}
		if total != 5 {
			t.Errorf("MaxBytes %d: total = %d, want 5 regardless of the bound", c.max, total)
		}
		diff(t, fmt.Sprintf("MaxBytes %d", c.max), c.want, ids(got))
	}
	// With a cursor, a filter and a limit: the bound counts from the page's first row.
	for _, c := range []struct {
		name string
		f    store.TaskFilter
		want []string
	}{
		{"after d", store.TaskFilter{CursorTime: m["d"].StatusTime, CursorID: "d", MaxBytes: 20, Limit: 10}, []string{"c", "b"}},
		{"after d, more room", store.TaskFilter{CursorTime: m["d"].StatusTime, CursorID: "d", MaxBytes: 24, Limit: 10}, []string{"c", "b", "a"}},
		{"working", store.TaskFilter{State: "working", MaxBytes: 1, Limit: 10}, []string{"c", "a"}},
		{"limit first", store.TaskFilter{MaxBytes: 1000, Limit: 2}, []string{"d", "c"}},
	} {
		got, _, err := s.ListTasks(context.Background(), "alice", c.f)
		if err != nil {
			t.Fatal(err)
		}
		diff(t, c.name, c.want, ids(got))
	}
}

// ---- principal scoping ----

// scopingFixture writes one row of every kind for alice.
func scopingFixture(t *testing.T, s store.Store) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.InsertContext(ctx, newContext("alice", "ctx-1", t0)); err != nil {
			return err
		}
		task := newTask("alice", "task-1", "ctx-1", "working", t0)
		task.LastSeq = 1 // a task with its first event, as the task plane makes one
		if err := tx.InsertTask(ctx, task); err != nil {
			return err
		}
		if err := tx.AppendTaskEvent(ctx, "alice", "task-1", 1, "task", nil, t0); err != nil {
			return err
		}
		if _, _, err := tx.InsertClaim(ctx, newClaim("alice", "slack", "Ev1", store.ClaimPending, t0)); err != nil {
			return err
		}
		if err := tx.PutAnchor(ctx, store.Anchor{Principal: "alice", Source: "slack", ProviderID: "m1", TaskID: "task-1", CreatedAt: t0}); err != nil {
			return err
		}
		if err := tx.InsertWake(ctx, store.Wake{ID: "wake-1", Principal: "alice", TaskID: "task-1", State: store.WakePending, CreatedAt: t0, UpdatedAt: t0}); err != nil {
			return err
		}
		_, err := tx.AdvanceCheckpoint(ctx, store.Checkpoint{Principal: "alice", Source: "slack", Instance: "box", Position: []byte("p"), Seq: 1, UpdatedAt: t0})
		return err
	})
}

func testScopingReads(t *testing.T, s store.Store) {
	scopingFixture(t, s)
	reads := []struct {
		name string
		read func(ctx context.Context, r store.Reader, principal, id string) error
	}{
		{"GetTask", func(ctx context.Context, r store.Reader, p, id string) error {
			_, err := r.GetTask(ctx, p, "task-"+id)
			return err
		}},
		{"TaskEvents", func(ctx context.Context, r store.Reader, p, id string) error {
			_, err := r.TaskEvents(ctx, p, "task-"+id, 0, 0)
			return err
		}},
		{"GetContext", func(ctx context.Context, r store.Reader, p, id string) error {
			_, err := r.GetContext(ctx, p, "ctx-"+id)
			return err
		}},
		{"GetClaim", func(ctx context.Context, r store.Reader, p, id string) error {
			_, err := r.GetClaim(ctx, p, "slack", "Ev"+id)
			return err
		}},
		{"GetAnchor", func(ctx context.Context, r store.Reader, p, id string) error {
			_, err := r.GetAnchor(ctx, p, "slack", "m"+id)
			return err
		}},
		{"GetCheckpoint", func(ctx context.Context, r store.Reader, p, id string) error {
			source := "slack"
			if id != "1" {
				source = "github"
			}
			_, err := r.GetCheckpoint(ctx, p, source, "box")
			return err
		}},
	}
	for _, rd := range reads {
		t.Run(rd.name, func(t *testing.T) {
			for _, via := range []string{"store", "tx"} {
				run := func(principal, id string) error {
					if via == "store" {
						return rd.read(context.Background(), s, principal, id)
					}
					var rerr error
					if err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
						rerr = rd.read(ctx, tx, principal, id)
						return nil
					}); err != nil {
						t.Fatal(err)
					}
					return rerr
				}
				if err := run("alice", "1"); err != nil {
					t.Fatalf("%s: the owner's read failed: %v", via, err)
				}
				wantNotFound(t, via+": another principal's row", run("bob", "1"))
				wantNotFound(t, via+": a missing row", run("alice", "2"))
			}
		})
	}
	tasks, total, err := s.ListTasks(context.Background(), "bob", store.TaskFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 0 || total != 0 {
		t.Errorf("bob's ListTasks = %v (total %d), want none of alice's", ids(tasks), total)
	}
	ev, err := s.ListEvidence(context.Background(), store.EvidenceFilter{Principal: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 0 {
		t.Errorf("bob's evidence = %v, want none", ev)
	}
}

func testScopingWrites(t *testing.T, s store.Store) {
	scopingFixture(t, s)
	writes := []struct {
		name  string
		write func(ctx context.Context, tx store.Tx) error
	}{
		{"UpdateTask", func(ctx context.Context, tx store.Tx) error {
			return tx.UpdateTask(ctx, newTask("bob", "task-1", "ctx-1", "canceled", t0), 1)
		}},
		{"TouchContext", func(ctx context.Context, tx store.Tx) error {
			return tx.TouchContext(ctx, "bob", "ctx-1", at(time.Hour))
		}},
		{"UpdateWake", func(ctx context.Context, tx store.Tx) error {
			return tx.UpdateWake(ctx, store.Wake{ID: "wake-1", Principal: "bob", TaskID: "task-1", State: store.WakeDone, UpdatedAt: t0})
		}},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			err := s.Update(context.Background(), w.write)
			wantNotFound(t, "bob's "+w.name+" of alice's row", err)
		})
	}
	// Alice's rows are as she left them.
	task, err := s.GetTask(context.Background(), "alice", "task-1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "alice's task", store.Task{
		Principal: "alice", ID: "task-1", ContextID: "ctx-1", Source: "slack", State: "working", StatusTime: t0,
		Version: 1, LastSeq: 1, Body: []byte(`{"task":"task-1"}`), CreatedAt: t0, UpdatedAt: t0,
	}, task)
	claim, err := s.GetClaim(context.Background(), "alice", "slack", "Ev1")
	if err != nil {
		t.Fatal(err)
	}
	if claim.State != store.ClaimPending {
		t.Errorf("alice's claim state = %q, want pending", claim.State)
	}
	c, err := s.GetContext(context.Background(), "alice", "ctx-1")
	if err != nil {
		t.Fatal(err)
	}
	if !c.LastEventAt.Equal(t0) {
		t.Errorf("alice's context LastEventAt = %v, want %v", c.LastEventAt, t0)
	}
	wakes, err := s.ListWakes(context.Background(), store.WakePending, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(wakes) != 1 || wakes[0].Principal != "alice" {
		t.Errorf("pending wakes = %+v, want alice's wake-1 untouched", wakes)
	}
}

func testScopingIndependentKeys(t *testing.T, s store.Store) {
	scopingFixture(t, s)
	aliceCtx := ensure(t, s, "alice", "slack", "T1/C1/1", "ctx-alice")
	bobCtx := ensure(t, s, "bob", "slack", "T1/C1/1", "ctx-bob")
	if aliceCtx == bobCtx {
		t.Errorf("EnsureContext gave alice and bob the same context %q for the same conversation key", aliceCtx)
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		_, inserted, err := tx.InsertClaim(ctx, newClaim("bob", "slack", "Ev1", store.ClaimPending, t0))
		if err != nil {
			return err
		}
		if !inserted {
			t.Error("bob's claim on alice's identity: inserted = false, want true")
		}
		// The same task ID under another principal is another task.
		if err := tx.InsertTask(ctx, newTask("bob", "task-1", "ctx-bob", "submitted", t0)); err != nil {
			return err
		}
		cp, err := tx.AdvanceCheckpoint(ctx, store.Checkpoint{Principal: "bob", Source: "slack", Instance: "box", Position: []byte("b"), Seq: 1, UpdatedAt: t0})
		if err != nil {
			return err
		}
		if cp.Version != 1 || string(cp.Position) != "b" {
			t.Errorf("bob's first checkpoint = %+v, want his own at version 1", cp)
		}
		return nil
	})
}

// ---- anchors ----

func testAnchors(t *testing.T, s store.Store) {
	insertContexts(t, s, newContext("alice", "c1", t0))
	insertTasks(t, s, newTask("alice", "task-1", "c1", "working", t0), newTask("alice", "task-2", "c1", "working", t0))
	a := store.Anchor{Principal: "alice", Source: "slack", ProviderID: "1700000000.000200", TaskID: "task-1", InputSeq: 3, CreatedAt: t0}
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.PutAnchor(ctx, a) })
	got, err := s.GetAnchor(context.Background(), "alice", "slack", a.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "GetAnchor", a, got)

	b := a
	b.TaskID, b.InputSeq, b.CreatedAt = "task-2", 7, at(time.Minute)
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.PutAnchor(ctx, b); err != nil {
			return err
		}
		got, err := tx.GetAnchor(ctx, "alice", "slack", a.ProviderID)
		if err != nil {
			return err
		}
		diff(t, "GetAnchor inside the replacing Update", b, got)
		return nil
	})
	got, err = s.GetAnchor(context.Background(), "alice", "slack", a.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "GetAnchor after replace", b, got)

	_, err = s.GetAnchor(context.Background(), "alice", "github", a.ProviderID)
	wantNotFound(t, "anchor under another source", err)
}

// An anchor names a task that exists: one for a missing task, or for another principal's, is
// refused and leaves no anchor behind (retention deletes anchors with their tasks, so one put for
// a task already gone would never be deleted).
func testAnchorOfMissingTask(t *testing.T, s store.Store) {
	insertContexts(t, s, newContext("bob", "c1", t0))
	insertTasks(t, s, newTask("bob", "task-1", "c1", "working", t0))
	for _, a := range []store.Anchor{
		{Principal: "alice", Source: "slack", ProviderID: "m1", TaskID: "task-9", CreatedAt: t0},
		{Principal: "alice", Source: "slack", ProviderID: "m1", TaskID: "task-1", CreatedAt: t0},
	} {
		err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error { return tx.PutAnchor(ctx, a) })
		wantNotFound(t, "PutAnchor for task "+a.TaskID+" of "+a.Principal, err)
		_, err = s.GetAnchor(context.Background(), a.Principal, a.Source, a.ProviderID)
		wantNotFound(t, "the anchor of a missing task", err)
	}
}

// ---- checkpoints ----

func testCheckpoints(t *testing.T, s store.Store) {
	_, err := s.GetCheckpoint(context.Background(), "alice", "slack", "box")
	wantNotFound(t, "GetCheckpoint before any advance", err)

	cp := func(pos string, seq int64, updated time.Time) store.Checkpoint {
		return store.Checkpoint{Principal: "alice", Source: "slack", Instance: "box", Position: []byte(pos), Seq: seq, UpdatedAt: updated}
	}
	stored := func(pos string, seq, version int64, updated time.Time) store.Checkpoint {
		c := cp(pos, seq, updated)
		c.Version = version
		return c
	}
	for _, step := range []struct {
		name string
		arg  store.Checkpoint
		want store.Checkpoint
	}{
		{"first advance", cp("p5", 5, t0), stored("p5", 5, 1, t0)},
		{"lower seq is ignored", cp("p3", 3, at(time.Second)), stored("p5", 5, 1, t0)},
		{"equal seq is ignored", cp("p5-again", 5, at(2*time.Second)), stored("p5", 5, 1, t0)},
		{"higher seq advances", cp("p9", 9, at(3*time.Second)), stored("p9", 9, 2, at(3*time.Second))},
		{"seq jumps are fine", cp("p100", 100, at(4*time.Second)), stored("p100", 100, 3, at(4*time.Second))},
	} {
		var got store.Checkpoint
		update(t, s, func(ctx context.Context, tx store.Tx) error {
			var err error
			got, err = tx.AdvanceCheckpoint(ctx, step.arg)
			return err
		})
		diff(t, step.name+": AdvanceCheckpoint result", step.want, got)
		read, err := s.GetCheckpoint(context.Background(), "alice", "slack", "box")
		if err != nil {
			t.Fatal(err)
		}
		diff(t, step.name+": GetCheckpoint", step.want, read)
	}
	_, err = s.GetCheckpoint(context.Background(), "alice", "github", "box")
	wantNotFound(t, "checkpoint of another source", err)
}

// advanceCheckpoints advances each of cs in one Update, in order, and returns what each call
// returned.
func advanceCheckpoints(t *testing.T, s store.Store, cs ...store.Checkpoint) []store.Checkpoint {
	t.Helper()
	var out []store.Checkpoint
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		out = out[:0]
		for _, c := range cs {
			got, err := tx.AdvanceCheckpoint(ctx, c)
			if err != nil {
				return err
			}
			out = append(out, got)
		}
		return nil
	})
	return out
}

// Two configured instances of one source for one principal (two mailboxes) each keep their own
// position: the one further ahead neither swallows nor replaces the other's, and each still
// never moves backwards.
func testCheckpointInstances(t *testing.T, s store.Store) {
	ctx := context.Background()
	box := func(instance, pos string, seq int64, updated time.Time) store.Checkpoint {
		return store.Checkpoint{Principal: "alice", Source: "email", Instance: instance, Position: []byte(pos), Seq: seq, UpdatedAt: updated}
	}
	stored := func(c store.Checkpoint, version int64) store.Checkpoint {
		c.Version = version
		return c
	}
	work100, home5 := box("work", "work:100", 100, t0), box("home", "home:5", 5, at(time.Second))
	got := advanceCheckpoints(t, s, work100, home5)
	diff(t, "first advances", []store.Checkpoint{stored(work100, 1), stored(home5, 1)}, got)

	home6 := box("home", "home:6", 6, at(2*time.Second))
	got = advanceCheckpoints(t, s,
		home6,
		box("work", "work:50", 50, at(2*time.Second)), // behind work's own position
		box("home", "home:3", 3, at(2*time.Second)),   // behind home's own position
	)
	diff(t, "second advances", []store.Checkpoint{stored(home6, 2), stored(work100, 1), stored(home6, 2)}, got)

	for _, want := range []store.Checkpoint{stored(work100, 1), stored(home6, 2)} {
		read, err := s.GetCheckpoint(ctx, "alice", "email", want.Instance)
		if err != nil {
			t.Fatal(err)
		}
		diff(t, "GetCheckpoint "+want.Instance, want, read)
	}
	_, err := s.GetCheckpoint(ctx, "alice", "email", "third")
	wantNotFound(t, "checkpoint of an instance that never advanced", err)
	all, err := s.ListCheckpoints(ctx, "email")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "ListCheckpoints", []store.Checkpoint{stored(home6, 2), stored(work100, 1)}, all)
}

// A checkpoint stored before checkpoints were per instance (Instance "", as schema version 6 kept
// them) is read by an instance that has none of its own, and taken over by the first instance
// that advances: it resumes from there and never goes back behind it, and the old position is
// then that instance's only, not handed to any other.
func testCheckpointTakeOver(t *testing.T, s store.Store) {
	ctx := context.Background()
	cp := func(instance, pos string, seq int64, updated time.Time) store.Checkpoint {
		return store.Checkpoint{Principal: "alice", Source: "email", Instance: instance, Position: []byte(pos), Seq: seq, UpdatedAt: updated}
	}
	advanceCheckpoints(t, s, cp("", "uid:30", 30, t0), cp("", "uid:40", 40, at(time.Second)))
	old := cp("", "uid:40", 40, at(time.Second))
	old.Version = 2
	read, err := s.GetCheckpoint(ctx, "alice", "email", "box")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "GetCheckpoint of an instance without one of its own", old, read)

	// Behind the old position: taken over, held.
	got := advanceCheckpoints(t, s, cp("box", "uid:35", 35, at(2*time.Second)))
	taken := old
	taken.Instance = "box"
	diff(t, "advance behind the old position", []store.Checkpoint{taken}, got)
	_, err = s.GetCheckpoint(ctx, "alice", "email", "")
	wantNotFound(t, "the old checkpoint after an instance took it over", err)

	got = advanceCheckpoints(t, s, cp("box", "uid:41", 41, at(3*time.Second)))
	moved := cp("box", "uid:41", 41, at(3*time.Second))
	moved.Version = 3
	diff(t, "advance past the old position", []store.Checkpoint{moved}, got)

	// Another instance, configured later, starts with no position rather than box's.
	_, err = s.GetCheckpoint(ctx, "alice", "email", "other")
	wantNotFound(t, "checkpoint of a second instance", err)
	got = advanceCheckpoints(t, s, cp("other", "uid:2", 2, at(4*time.Second)))
	other := cp("other", "uid:2", 2, at(4*time.Second))
	other.Version = 1
	diff(t, "a second instance's first advance", []store.Checkpoint{other}, got)
	all, err := s.ListCheckpoints(ctx, "email")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "ListCheckpoints", []store.Checkpoint{moved, other}, all)
}

// ---- evidence ----

// normalizeEvidence re-encodes Detail, so a driver that stores JSON structurally (jsonb) compares
// equal to the bytes written.
func normalizeEvidence(t *testing.T, es []store.Evidence) []store.Evidence {
	t.Helper()
	out := slices.Clone(es)
	for i := range out {
		if len(out[i].Detail) == 0 {
			out[i].Detail = nil
			continue
		}
		var v any
		if err := json.Unmarshal(out[i].Detail, &v); err != nil {
			t.Fatalf("evidence %d detail %q: %v", out[i].ID, out[i].Detail, err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out[i].Detail = b
	}
	return out
}

// evidenceFixture inserts six records over two Updates and returns them as stored (with IDs),
// in insertion order.
func evidenceFixture(t *testing.T, s store.Store) []store.Evidence {
	t.Helper()
	in := []store.Evidence{
		{Principal: "alice", Source: "slack", Kind: "accepted", TaskID: "t1", Detail: []byte(`{"event": "Ev1"}`), CreatedAt: t0},
		{Principal: "alice", Source: "slack", Kind: "deduplicated", TaskID: "t1", Detail: []byte(`{"event":"Ev1"}`), CreatedAt: at(time.Second)},
		{Principal: "alice", Source: "github", Kind: "accepted", TaskID: "t2", Detail: []byte(`{"n":1}`), CreatedAt: at(2 * time.Second)},
		{Principal: "bob", Source: "slack", Kind: "accepted", TaskID: "t3", Detail: []byte(`{}`), CreatedAt: at(3 * time.Second)},
		{Principal: "alice", Source: "slack", Kind: "delivered", TaskID: "t1", CreatedAt: at(4 * time.Second)},
		{Principal: "", Source: "", Kind: "retention", Detail: []byte(`{"tasks":3}`), CreatedAt: at(5 * time.Second)},
	}
	for _, part := range [][]store.Evidence{in[:3], in[3:]} {
		update(t, s, func(ctx context.Context, tx store.Tx) error {
			for _, e := range part {
				if err := tx.InsertEvidence(ctx, e); err != nil {
					return err
				}
			}
			return nil
		})
	}
	got, err := s.ListEvidence(context.Background(), store.EvidenceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(in) {
		t.Fatalf("ListEvidence returned %d records, want %d", len(got), len(in))
	}
	stored := slices.Clone(got)
	slices.Reverse(stored)
	return stored
}

func testEvidenceOrder(t *testing.T, s store.Store) {
	stored := evidenceFixture(t, s)
	for i, e := range stored {
		if e.ID <= 0 {
			t.Errorf("record %d: ID = %d, want a positive ID assigned by the store", i, e.ID)
		}
		if i > 0 && e.ID <= stored[i-1].ID {
			t.Errorf("record %d: ID %d not greater than the previous record's %d: IDs must increase in insertion order", i, e.ID, stored[i-1].ID)
		}
	}
	kinds := make([]string, len(stored))
	for i, e := range stored {
		kinds[i] = e.Principal + "/" + e.Source + "/" + e.Kind
	}
	diff(t, "insertion order", []string{
		"alice/slack/accepted", "alice/slack/deduplicated", "alice/github/accepted",
		"bob/slack/accepted", "alice/slack/delivered", "//retention",
	}, kinds)
	want := store.Evidence{ID: stored[0].ID, Principal: "alice", Source: "slack", Kind: "accepted", TaskID: "t1",
		Detail: []byte(`{"event": "Ev1"}`), CreatedAt: t0}
	diff(t, "first record", normalizeEvidence(t, []store.Evidence{want}), normalizeEvidence(t, stored[:1]))
}

func testEvidenceFilters(t *testing.T, s store.Store) {
	stored := evidenceFixture(t, s)
	for _, c := range []struct {
		name string
		f    store.EvidenceFilter
		want []int // indexes into stored, in the order listed (newest first unless Forward)
	}{
		{"none", store.EvidenceFilter{}, []int{5, 4, 3, 2, 1, 0}},
		{"principal", store.EvidenceFilter{Principal: "alice"}, []int{4, 2, 1, 0}},
		{"source", store.EvidenceFilter{Source: "slack"}, []int{4, 3, 1, 0}},
		{"kind", store.EvidenceFilter{Kind: "accepted"}, []int{3, 2, 0}},
		{"task", store.EvidenceFilter{TaskID: "t1"}, []int{4, 1, 0}},
		{"source and kind", store.EvidenceFilter{Source: "slack", Kind: "accepted"}, []int{3, 0}},
		{"since is inclusive", store.EvidenceFilter{Since: at(2 * time.Second)}, []int{5, 4, 3, 2}},
		{"until is inclusive", store.EvidenceFilter{Until: at(2 * time.Second)}, []int{2, 1, 0}},
		{"since and until", store.EvidenceFilter{Since: at(time.Second), Until: at(2 * time.Second), Limit: 1}, []int{2}},
		{"after id", store.EvidenceFilter{AfterID: stored[3].ID}, []int{5, 4}},
		{"after the newest id", store.EvidenceFilter{AfterID: stored[5].ID}, nil},
		{"forward keeps the oldest", store.EvidenceFilter{AfterID: stored[1].ID, Forward: true, Limit: 2}, []int{2, 3}},
		{"forward from the start", store.EvidenceFilter{Forward: true, Limit: 3}, []int{0, 1, 2}},
		{"limit keeps the newest", store.EvidenceFilter{Limit: 2}, []int{5, 4}},
		{"principal and limit", store.EvidenceFilter{Principal: "alice", Limit: 3}, []int{4, 2, 1}},
		{"no match", store.EvidenceFilter{Kind: "nope"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var want []store.Evidence
			for _, i := range c.want {
				want = append(want, stored[i])
			}
			got, err := s.ListEvidence(context.Background(), c.f)
			if err != nil {
				t.Fatal(err)
			}
			diff(t, "ListEvidence", normalizeEvidence(t, want), normalizeEvidence(t, got))
		})
	}
}

func testEvidencePrune(t *testing.T, s store.Store) {
	stored := evidenceFixture(t, s)
	prune := func(cutoff time.Time, limit int) int {
		var n int
		update(t, s, func(ctx context.Context, tx store.Tx) error {
			var err error
			n, err = tx.PruneEvidence(ctx, cutoff, limit)
			return err
		})
		return n
	}
	// Records 0..2 are older than the cutoff; a limit of 2 takes the oldest two.
	if n := prune(at(3*time.Second), 2); n != 2 {
		t.Fatalf("PruneEvidence with limit 2 deleted %d", n)
	}
	if n := prune(at(3*time.Second), 0); n != 1 {
		t.Fatalf("PruneEvidence without a limit deleted %d, want the one left before the cutoff", n)
	}
	got, err := s.ListEvidence(context.Background(), store.EvidenceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "evidence after prune", normalizeEvidence(t, []store.Evidence{stored[5], stored[4], stored[3]}), normalizeEvidence(t, got))
}

// ---- wakes ----

func newWake(id string, created time.Time) store.Wake {
	return store.Wake{ID: id, Principal: "alice", TaskID: "task-" + id, Activation: 1, State: store.WakePending,
		CreatedAt: created, UpdatedAt: created}
}

func insertWakes(t *testing.T, s store.Store, ws ...store.Wake) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, w := range ws {
			if err := tx.InsertWake(ctx, w); err != nil {
				return err
			}
		}
		return nil
	})
}

func testWakesFIFO(t *testing.T, s store.Store) {
	w1, w2, w3 := newWake("w1", t0), newWake("w2", at(time.Second)), newWake("w3", at(2*time.Second))
	w3.Activation, w3.Attempts, w3.Detail = 4, 2, "retrying"
	// Inserted out of order: FIFO means oldest CreatedAt first, not insertion order.
	insertWakes(t, s, w2)
	insertWakes(t, s, w3, w1)
	for _, c := range []struct {
		limit int
		want  []store.Wake
	}{
		{0, []store.Wake{w1, w2, w3}},
		{2, []store.Wake{w1, w2}},
		{10, []store.Wake{w1, w2, w3}},
	} {
		got, err := s.ListWakes(context.Background(), store.WakePending, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		diff(t, fmt.Sprintf("ListWakes(pending, %d)", c.limit), c.want, got)
	}
	got, err := s.ListWakes(context.Background(), store.WakeActive, 0)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "ListWakes(active)", []store.Wake(nil), got)
}

func testWakesUpdate(t *testing.T, s store.Store) {
	w1, w2 := newWake("w1", t0), newWake("w2", at(time.Second))
	insertWakes(t, s, w1, w2)

	active := w1
	active.State, active.Attempts, active.Detail, active.UpdatedAt = store.WakeActive, 1, "offered", at(time.Minute)
	// Only State, Attempts, UpdatedAt and Detail are UpdateWake's to write.
	arg := active
	arg.TaskID, arg.Activation, arg.CreatedAt = "other", 99, at(time.Hour)
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.UpdateWake(ctx, arg) })

	for _, c := range []struct {
		state store.WakeState
		want  []store.Wake
	}{
		{store.WakePending, []store.Wake{w2}},
		{store.WakeActive, []store.Wake{active}},
	} {
		got, err := s.ListWakes(context.Background(), c.state, 0)
		if err != nil {
			t.Fatal(err)
		}
		diff(t, "ListWakes("+string(c.state)+")", c.want, got)
	}

	// Back to pending (a retry): it keeps its place by CreatedAt.
	retry := active
	retry.State, retry.UpdatedAt = store.WakePending, at(2*time.Minute)
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.UpdateWake(ctx, retry) })
	got, err := s.ListWakes(context.Background(), store.WakePending, 0)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "ListWakes(pending) after retry", []store.Wake{retry, w2}, got)

	err = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return tx.UpdateWake(ctx, newWake("nope", t0))
	})
	wantNotFound(t, "UpdateWake of a missing wake", err)
}

// ---- prune ----

var terminal = []string{"completed", "canceled", "rejected"}

func prune(t *testing.T, s store.Store, cutoff time.Time, limit int) store.PruneResult {
	t.Helper()
	var r store.PruneResult
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		var err error
		r, err = tx.Prune(ctx, cutoff, terminal, limit)
		return err
	})
	return r
}

func testPrune(t *testing.T, s store.Store) {
	old, recent := at(-48*time.Hour), at(time.Hour)
	doneClaim := func(identity, taskID, contextID string, updated time.Time) store.Claim {
		c := newClaim("alice", "slack", identity, store.ClaimDone, updated)
		c.TaskID, c.ContextID = taskID, contextID
		c.OutcomeKind = "task"
		if taskID == "" {
			c.OutcomeKind, c.Message = "message", []byte(`{}`)
		}
		return c
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, c := range []store.Context{
			newContext("alice", "c-old", old),     // its only task is terminal: all goes
			newContext("alice", "c-live", old),    // a non-terminal task keeps it
			newContext("alice", "c-pending", old), // a pending claim keeps it
			newContext("alice", "c-empty", old),   // nothing in it: goes
			newContext("alice", "c-failed", old),  // "failed" is not in the terminal list
			newContext("alice", "c-recent", recent),
			newContext("alice", "c-finished", old), // its task finished after the cutoff
		} {
			if err := tx.InsertContext(ctx, c); err != nil {
				return err
			}
		}
		for _, task := range []store.Task{
			newTask("alice", "t-done", "c-old", "completed", old),
			newTask("alice", "t-live", "c-live", "working", old),
			newTask("alice", "t-failed", "c-failed", "failed", old),
			newTask("alice", "t-recent", "c-recent", "completed", old),
			// Accepted long ago in an idle conversation, finished recently: its retention runs
			// from its own last change, so neither it nor its claim goes yet.
			newTask("alice", "t-finished", "c-finished", "completed", recent),
		} {
			if err := tx.InsertTask(ctx, task); err != nil {
				return err
			}
		}
		for _, ev := range []string{"t-done", "t-done", "t-live", "t-recent"} {
			if _, err := AppendNext(ctx, tx, "alice", ev, "status", nil, old); err != nil {
				return err
			}
		}
		for _, a := range []store.Anchor{
			{Principal: "alice", Source: "slack", ProviderID: "m-done", TaskID: "t-done", CreatedAt: old},
			{Principal: "alice", Source: "slack", ProviderID: "m-live", TaskID: "t-live", CreatedAt: old},
		} {
			if err := tx.PutAnchor(ctx, a); err != nil {
				return err
			}
		}
		for _, w := range []store.Wake{
			{ID: "w-done", Principal: "alice", TaskID: "t-done", State: store.WakeDone, CreatedAt: old, UpdatedAt: old},
			{ID: "w-live", Principal: "alice", TaskID: "t-live", State: store.WakePending, CreatedAt: old, UpdatedAt: old},
		} {
			if err := tx.InsertWake(ctx, w); err != nil {
				return err
			}
		}
		for _, c := range []store.Claim{
			doneClaim("q-done", "t-done", "c-old", old),  // goes with its task
			doneClaim("q-live", "t-live", "c-live", old), // its task lives
			newClaim("alice", "slack", "q-pending", store.ClaimPending, old),
			doneClaim("q-recent", "t-recent", "c-recent", old),       // its task lives
			doneClaim("q-finished", "t-finished", "c-finished", old), // its task lives
			doneClaim("q-msg-recent-ctx", "", "c-recent", old),       // its context is recent
			doneClaim("q-msg-old", "", "", old),                      // message outcome, old: goes
			doneClaim("q-msg-young", "", "", recent),                 // younger than the cutoff
		} {
			if c.Identity == "q-pending" {
				c.ContextID = "c-pending"
			}
			if _, _, err := tx.InsertClaim(ctx, c); err != nil {
				return err
			}
		}
		return nil
	})

	got := prune(t, s, t0, 100)
	want := store.PruneResult{Tasks: 1, Events: 2, Claims: 2, Contexts: 2, Anchors: 1, Wakes: 1}
	diff(t, "PruneResult", want, got)

	ctx := context.Background()
	_, err := s.GetTask(ctx, "alice", "t-done")
	wantNotFound(t, "pruned task", err)
	_, err = s.TaskEvents(ctx, "alice", "t-done", 0, 0)
	wantNotFound(t, "pruned task's events", err)
	_, err = s.GetAnchor(ctx, "alice", "slack", "m-done")
	wantNotFound(t, "pruned task's anchor", err)
	for _, id := range []string{"q-done", "q-msg-old"} {
		_, err = s.GetClaim(ctx, "alice", "slack", id)
		wantNotFound(t, "pruned claim "+id, err)
	}
	for _, id := range []string{"c-old", "c-empty"} {
		_, err = s.GetContext(ctx, "alice", id)
		wantNotFound(t, "pruned context "+id, err)
	}

	for _, id := range []string{"t-live", "t-failed", "t-recent", "t-finished"} {
		if _, err := s.GetTask(ctx, "alice", id); err != nil {
			t.Errorf("task %s must survive: %v", id, err)
		}
	}
	for _, c := range []struct {
		task string
		n    int
	}{{"t-live", 1}, {"t-recent", 1}} {
		evs, err := s.TaskEvents(ctx, "alice", c.task, 0, 0)
		if err != nil || len(evs) != c.n {
			t.Errorf("events of %s: %d, %v; want %d", c.task, len(evs), err, c.n)
		}
	}
	if _, err := s.GetAnchor(ctx, "alice", "slack", "m-live"); err != nil {
		t.Errorf("live task's anchor must survive: %v", err)
	}
	for _, id := range []string{"q-live", "q-pending", "q-recent", "q-msg-recent-ctx", "q-msg-young", "q-finished"} {
		if _, err := s.GetClaim(ctx, "alice", "slack", id); err != nil {
			t.Errorf("claim %s must survive: %v", id, err)
		}
	}
	for _, id := range []string{"c-live", "c-pending", "c-failed", "c-recent", "c-finished"} {
		if _, err := s.GetContext(ctx, "alice", id); err != nil {
			t.Errorf("context %s must survive: %v", id, err)
		}
	}
	for _, c := range []struct {
		state store.WakeState
		want  []string
	}{{store.WakePending, []string{"w-live"}}, {store.WakeDone, nil}} {
		ws, err := s.ListWakes(ctx, c.state, 0)
		if err != nil {
			t.Fatal(err)
		}
		var gotIDs []string
		for _, w := range ws {
			gotIDs = append(gotIDs, w.ID)
		}
		diff(t, "wakes "+string(c.state), c.want, gotIDs)
	}

	diff(t, "second Prune", store.PruneResult{}, prune(t, s, t0, 100))
}

// pruneLimitFixture makes five old completed tasks (one event each) in one old context.
func pruneLimitFixture(t *testing.T, s store.Store) {
	t.Helper()
	old := at(-48 * time.Hour)
	insertContexts(t, s, newContext("alice", "c-old", old))
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for i := range 5 {
			id := fmt.Sprintf("t%d", i)
			if err := tx.InsertTask(ctx, newTask("alice", id, "c-old", "completed", old)); err != nil {
				return err
			}
			if _, err := AppendNext(ctx, tx, "alice", id, "status", nil, old); err != nil {
				return err
			}
		}
		return nil
	})
}

func testPruneLimit(t *testing.T, s store.Store) {
	pruneLimitFixture(t, s)
	for i, want := range []store.PruneResult{
		{Tasks: 2, Events: 2},
		{Tasks: 2, Events: 2},
		{Tasks: 1, Events: 1, Contexts: 1}, // the context goes with its last task
		{},
	} {
		diff(t, fmt.Sprintf("Prune call %d with limit 2", i+1), want, prune(t, s, t0, 2))
	}
	tasks, total, err := s.ListTasks(context.Background(), "alice", store.TaskFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if total != 0 {
		t.Errorf("tasks left: %v", ids(tasks))
	}
}

func testPruneNoLimit(t *testing.T, s store.Store) {
	pruneLimitFixture(t, s)
	diff(t, "Prune with limit 0", store.PruneResult{Tasks: 5, Events: 5, Contexts: 1}, prune(t, s, t0, 0))
	// The cutoff is exclusive: a context whose last event is exactly at the cutoff stays.
	insertContexts(t, s, newContext("alice", "c-edge", t0))
	diff(t, "Prune at the edge", store.PruneResult{}, prune(t, s, t0, 0))
}

// ---- Update ----

func testUpdateFnError(t *testing.T, s store.Store) {
	errFn := errors.New("fn failed")
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		if _, _, err := tx.InsertClaim(ctx, newClaim("alice", "slack", "Ev1", store.ClaimPending, t0)); err != nil {
			return err
		}
		if err := tx.InsertTask(ctx, newTask("alice", "task-1", "ctx-1", "submitted", t0)); err != nil {
			return err
		}
		if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: "accepted", CreatedAt: t0}); err != nil {
			return err
		}
		return fmt.Errorf("wrapped: %w", errFn)
	})
	if !errors.Is(err, errFn) {
		t.Fatalf("Update = %v, want the fn's error", err)
	}
	_, err = s.GetClaim(context.Background(), "alice", "slack", "Ev1")
	wantNotFound(t, "claim written by a failed fn", err)
	_, err = s.GetTask(context.Background(), "alice", "task-1")
	wantNotFound(t, "task written by a failed fn", err)
	ev, err := s.ListEvidence(context.Background(), store.EvidenceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 0 {
		t.Errorf("evidence written by a failed fn survived: %+v", ev)
	}
	// The store is still usable.
	insertTasks(t, s, newTask("alice", "task-1", "ctx-1", "submitted", t0))
}

func testUpdateCanceled(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		ran = true
		return tx.InsertTask(ctx, newTask("alice", "task-1", "ctx-1", "submitted", t0))
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Update with a canceled context = %v, want context.Canceled", err)
	}
	if ran {
		t.Error("fn ran although the context was canceled before Update")
	}
	_, err = s.GetTask(context.Background(), "alice", "task-1")
	wantNotFound(t, "task of a canceled Update", err)
}

func testUpdateReadsOwnWrites(t *testing.T, s store.Store) {
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		task := newTask("alice", "task-1", "ctx-1", "submitted", t0)
		if err := tx.InsertTask(ctx, task); err != nil {
			return err
		}
		got, err := tx.GetTask(ctx, "alice", "task-1")
		if err != nil {
			return fmt.Errorf("GetTask inside the writing Update: %w", err)
		}
		diff(t, "task read back in the same Update", task, got)
		if _, err := AppendNext(ctx, tx, "alice", "task-1", "task", nil, t0); err != nil {
			return err
		}
		evs, err := tx.TaskEvents(ctx, "alice", "task-1", 0, 0)
		if err != nil {
			return err
		}
		diff(t, "events read back in the same Update", []int64{1}, seqs(evs))
		list, total, err := tx.ListTasks(ctx, "alice", store.TaskFilter{})
		if err != nil {
			return err
		}
		if total != 1 || len(list) != 1 || list[0].LastSeq != 1 {
			t.Errorf("ListTasks in the same Update = %+v (total %d), want task-1 with LastSeq 1", list, total)
		}
		if _, _, err := tx.InsertClaim(ctx, newClaim("alice", "a2a", "m1", store.ClaimPending, t0)); err != nil {
			return err
		}
		if _, err := tx.GetClaim(ctx, "alice", "a2a", "m1"); err != nil {
			return fmt.Errorf("GetClaim inside the writing Update: %w", err)
		}
		if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: "accepted", CreatedAt: t0}); err != nil {
			return err
		}
		ev, err := tx.ListEvidence(ctx, store.EvidenceFilter{})
		if err != nil {
			return err
		}
		if len(ev) != 1 {
			t.Errorf("ListEvidence in the same Update: %d records, want 1", len(ev))
		}
		if err := tx.InsertWake(ctx, newWake("w1", t0)); err != nil {
			return err
		}
		ws, err := tx.ListWakes(ctx, store.WakePending, 0)
		if err != nil {
			return err
		}
		if len(ws) != 1 {
			t.Errorf("ListWakes in the same Update: %d wakes, want 1", len(ws))
		}
		return nil
	})
}

func testUpdateConcurrent(t *testing.T, s store.Store) {
	const n = 100
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
				_, _, err := tx.InsertClaim(ctx, newClaim("alice", "slack", fmt.Sprintf("Ev%03d", i), store.ClaimPending, t0))
				return err
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Update %d: %v", i, err)
		}
	}
	for i := range n {
		if _, err := s.GetClaim(context.Background(), "alice", "slack", fmt.Sprintf("Ev%03d", i)); err != nil {
			t.Errorf("claim %d: %v", i, err)
		}
	}
}

// ---- driver ----

func testListen(t *testing.T, s store.Store) {
	caps := s.Capabilities()
	if caps.Name == "" {
		t.Error("Capabilities().Name is empty")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	notified := make(chan [2]string, 16)
	done := make(chan error, 1)
	go func() {
		done <- s.Listen(ctx, func(principal, taskID string) {
			select {
			case notified <- [2]string{principal, taskID}:
			default:
			}
		}, nil)
	}()
	if !caps.Listen {
		select {
		case err := <-done:
			if !errors.Is(err, store.ErrNotSupported) {
				t.Errorf("Listen without the capability = %v, want ErrNotSupported", err)
			}
		case <-ctx.Done():
			t.Error("Listen without the capability did not return at once")
		}
		return
	}
	insertTasks(t, s, newTask("alice", "task-1", "ctx-1", "working", t0))
	// The listener may not be subscribed yet; keep appending until a notification arrives.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		appendEvent(t, s, "alice", "task-1", "status")
		select {
		case n := <-notified:
			if n != [2]string{"alice", "task-1"} {
				t.Errorf("notification %v, want [alice task-1]", n)
			}
			cancel()
			<-done
			return
		case err := <-done:
			t.Fatalf("Listen returned early: %v", err)
		case <-ctx.Done():
			t.Fatal("no notification for a committed task event")
		case <-tick.C:
		}
	}
}

func testClose(t *testing.T, s store.Store) {
	select {
	case <-s.Done():
		t.Fatal("Done is closed before Close")
	default:
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done is open after Close")
	}
	ran := false
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		ran = true
		return nil
	})
	if err == nil {
		t.Error("Update after Close succeeded")
	}
	if ran {
		t.Error("fn ran after Close")
	}
	// A closed store is one going away: what asks it is told to try again (503), not that it
	// failed (500). An embedding program may close it while requests are in flight.
	if !errors.Is(err, store.ErrClosed) || !store.Unavailable(err) {
		t.Errorf("Update after Close: %v (ErrClosed %v, Unavailable %v), want store.ErrClosed", err,
			errors.Is(err, store.ErrClosed), store.Unavailable(err))
	}
	if _, err = s.GetTask(context.Background(), "alice", "t1"); !store.Unavailable(err) {
		t.Errorf("GetTask after Close: %v, want an error Unavailable reports", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// A task's done claims go in the call that prunes the task, all of them, whatever the limit: they
// are found by task, not by the age sweep (which reads only claims of no task). A claim of a task
// still stored stays, however old.
func testPruneTaskClaims(t *testing.T, s store.Store) {
	old := at(-48 * time.Hour)
	insertContexts(t, s, newContext("alice", "c-old", old))
	insertTasks(t, s, newTask("alice", "t-done", "c-old", "completed", old), newTask("alice", "t-live", "c-old", "working", old))
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for i, task := range []string{"t-done", "t-done", "t-done", "t-live"} {
			c := newClaim("alice", "webhook", fmt.Sprint("ev-", i), store.ClaimDone, old)
			c.TaskID, c.ContextID, c.OutcomeKind = task, "c-old", "task"
			if _, _, err := tx.InsertClaim(ctx, c); err != nil {
				return err
			}
		}
		return nil
	})
	diff(t, "Prune with limit 1", store.PruneResult{Tasks: 1, Claims: 3}, prune(t, s, t0, 1))
	if _, err := s.GetClaim(context.Background(), "alice", "webhook", "ev-3"); err != nil {
		t.Errorf("the claim of a task still stored: %v", err)
	}
}
