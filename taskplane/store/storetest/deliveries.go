package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/channels-dev/channels/taskplane/store"
)

// deliveryCases prove store.DeliveryReader and store.DeliveryTx: rows, per-attempt evidence,
// leases (one worker per delivery, across processes), lanes (one slot per interval), and that
// retention never drops a delivery in sending.
func deliveryCases() []testCase {
	return []testCase{
		{"InsertThenGetRoundTripsAllFields", testDeliveryInsertGet},
		{"InsertDuplicateReturnsExistingNotInserted", testDeliveryDuplicate},
		{"UpdateStoresMutableFieldsOnly", testDeliveryUpdate},
		{"UpdateMissingIsNotFound", testDeliveryUpdateMissing},
		{"OtherPrincipalsDeliveryIsNotFound", testDeliveryScoping},
		{"ListFiltersNewestFirst", testDeliveryList},
		{"ListOmitsDeliveriesWhoseLatestAttemptAbandonedThem", testDeliveryListOmitAbandoned},
		{"ListLeaseRanOutBeforeKeepsStuckRowsBeforeTheLimit", testDeliveryListLeaseRanOut},
		{"AttemptsListInOrderWithAllFields", testDeliveryAttempts},
		{"ClaimLeasesDueRowsAndLeaseHoldsOthersOff", testDeliveryClaimLease},
		{"ClaimByIDTakesOnlyThatDueRow", testDeliveryClaimByID},
		{"ClaimTakesOneRowPerLaneAndSkipsWaitingLanes", testDeliveryClaimLanes},
		{"ClaimRestrictsToSources", testDeliveryClaimSources},
		{"20ConcurrentClaimersNeverShareARow", testDeliveryClaimConcurrent},
		{"ReserveLaneGrantsOneSlotPerInterval", testLaneReserve},
		{"20ConcurrentReserversGetOneSlot", testLaneReserveConcurrent},
		{"DelayLaneNeverMovesEarlier", testLaneDelay},
		{"NextDueCountsLeaseAndLane", testDeliveryNextDue},
		{"PruneDeliveriesKeepsPendingSendingAndAmbiguous", testDeliveryPrune},
		{"TaskPruneNeverTouchesDeliveries", testTaskPruneLeavesDeliveries},
		{"PruneDeliveriesKeepsThoseOfATaskGoingOn", testDeliveryPruneKeepsALiveTasks},
	}
}

// terminalStates are the task states PruneDeliveries is told are finished.
var terminalStates = []string{"completed", "failed", "canceled", "rejected"}

// pruneDeliveries runs one PruneDeliveries at t0 and returns how many deliveries it deleted.
func pruneDeliveries(t *testing.T, s store.Store, terminal []string, limit int) int {
	t.Helper()
	var n int
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		var err error
		n, err = tx.PruneDeliveries(ctx, t0, terminal, limit)
		return err
	})
	return n
}

func newDelivery(principal, id string, state store.DeliveryState, due time.Time) store.Delivery {
	return store.Delivery{
		Principal: principal, ID: id, TaskID: "task-" + id, Source: "slack", Operation: "reply",
		Recovery: "lookup", PayloadDigest: "sha256:" + id, Payload: []byte(`{"text":"` + id + `"}`),
		State: state, NextAttemptAt: due, CreatedAt: due, UpdatedAt: due,
	}
}

func insertDeliveries(t *testing.T, s store.Store, ds ...store.Delivery) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, d := range ds {
			if _, inserted, err := tx.InsertDelivery(ctx, d); err != nil {
				return err
			} else if !inserted {
				return fmt.Errorf("delivery %s was not inserted", d.ID)
			}
		}
		return nil
	})
}

func claimDeliveries(t *testing.T, s store.Store, c store.DeliveryClaim) []store.Delivery {
	t.Helper()
	var out []store.Delivery
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		var err error
		out, err = tx.ClaimDeliveries(ctx, c)
		return err
	})
	return out
}

func deliveryIDs(ds []store.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func mustGetDelivery(t *testing.T, s store.Store, principal, id string) store.Delivery {
	t.Helper()
	d, err := s.GetDelivery(context.Background(), principal, id)
	if err != nil {
		t.Fatalf("GetDelivery(%s): %v", id, err)
	}
	return d
}

func testDeliveryInsertGet(t *testing.T, s store.Store) {
	d := store.Delivery{
		Principal: "alice", ID: "d-1", TaskID: "t-1", Source: "github", Operation: "question",
		Recovery: "lookup", Lane: "github:token-1", PayloadDigest: "sha256:abc", Payload: []byte(`{"a":1}`),
		State: store.DeliverySending, Attempts: 2, Reconciles: 1, NextAttemptAt: at(time.Second),
		LeaseOwner: "proc-1", LeaseUntil: at(time.Minute), ProviderID: "c-9", LastError: "timeout",
		CreatedAt: t0, UpdatedAt: at(2 * time.Second),
	}
	insertDeliveries(t, s, d)
	if diff := cmp.Diff(d, mustGetDelivery(t, s, "alice", "d-1"), cmpOpts); diff != "" {
		t.Errorf("GetDelivery (-inserted +got):\n%s", diff)
	}
	// A zero lease round-trips as zero: "not leased".
	z := newDelivery("alice", "d-zero", store.DeliveryPrepared, t0)
	insertDeliveries(t, s, z)
	if got := mustGetDelivery(t, s, "alice", "d-zero"); !got.LeaseUntil.IsZero() || got.LeaseOwner != "" {
		t.Errorf("zero lease read back as %v / %q", got.LeaseUntil, got.LeaseOwner)
	}
}

func testDeliveryDuplicate(t *testing.T, s store.Store) {
	first := newDelivery("alice", "d-1", store.DeliveryPrepared, t0)
	insertDeliveries(t, s, first)
	second := first
	second.PayloadDigest, second.TaskID = "sha256:other", "t-other"
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		existing, inserted, err := tx.InsertDelivery(ctx, second)
		if err != nil {
			return err
		}
		if inserted {
			t.Error("InsertDelivery of an existing key reported inserted")
		}
		if diff := cmp.Diff(first, existing, cmpOpts); diff != "" {
			t.Errorf("existing (-first +got):\n%s", diff)
		}
		return nil
	})
}

func testDeliveryUpdate(t *testing.T, s store.Store) {
	d := newDelivery("alice", "d-1", store.DeliveryPrepared, t0)
	insertDeliveries(t, s, d)
	changed := d
	changed.State, changed.Attempts, changed.Reconciles = store.DeliveryDelivered, 3, 2
	changed.NextAttemptAt, changed.LeaseOwner, changed.LeaseUntil = at(time.Hour), "p", at(2*time.Hour)
	changed.ProviderID, changed.LastError, changed.UpdatedAt = "m-1", "e", at(3*time.Hour)
	// Immutable fields are not written.
	ignored := changed
	ignored.TaskID, ignored.Source, ignored.Operation, ignored.Recovery = "x", "x", "x", "x"
	ignored.Lane, ignored.PayloadDigest, ignored.Payload, ignored.CreatedAt = "x", "x", []byte("x"), at(time.Hour)
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.UpdateDelivery(ctx, ignored) })
	if diff := cmp.Diff(changed, mustGetDelivery(t, s, "alice", "d-1"), cmpOpts); diff != "" {
		t.Errorf("after UpdateDelivery (-want +got):\n%s", diff)
	}
}

func testDeliveryUpdateMissing(t *testing.T, s store.Store) {
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return tx.UpdateDelivery(ctx, newDelivery("alice", "nope", store.DeliveryFailed, t0))
	})
	wantNotFound(t, "UpdateDelivery of a missing row", err)
}

func testDeliveryScoping(t *testing.T, s store.Store) {
	insertDeliveries(t, s, newDelivery("alice", "d-1", store.DeliveryPrepared, t0))
	_, err := s.GetDelivery(context.Background(), "bob", "d-1")
	wantNotFound(t, "GetDelivery of alice's delivery as bob", err)
	err = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return tx.UpdateDelivery(ctx, newDelivery("bob", "d-1", store.DeliveryFailed, t0))
	})
	wantNotFound(t, "UpdateDelivery of alice's delivery as bob", err)
	// The same ID under another principal is another row.
	insertDeliveries(t, s, newDelivery("bob", "d-1", store.DeliveryPrepared, t0))
	if got := claimDeliveries(t, s, store.DeliveryClaim{Owner: "o", Now: t0, LeaseUntil: at(time.Minute), Principal: "bob", ID: "d-1"}); len(got) != 1 || got[0].Principal != "bob" {
		t.Errorf("claim of bob's d-1 = %+v", got)
	}
	if got := mustGetDelivery(t, s, "alice", "d-1"); got.LeaseOwner != "" {
		t.Errorf("claiming bob's d-1 leased alice's: %+v", got)
	}
}

func testDeliveryList(t *testing.T, s store.Store) {
	a := newDelivery("alice", "d-a", store.DeliveryAmbiguous, at(1*time.Second))
	b := newDelivery("alice", "d-b", store.DeliveryDelivered, at(2*time.Second))
	c := newDelivery("alice", "d-c", store.DeliveryAmbiguous, at(3*time.Second))
	c.Source = "github"
	d := newDelivery("bob", "d-d", store.DeliveryAmbiguous, at(4*time.Second))
	insertDeliveries(t, s, a, b, c, d)
	for _, tc := range []struct {
		name string
		f    store.DeliveryFilter
		want []string
	}{
		{"all", store.DeliveryFilter{}, []string{"d-d", "d-c", "d-b", "d-a"}},
		{"state", store.DeliveryFilter{State: store.DeliveryAmbiguous}, []string{"d-d", "d-c", "d-a"}},
		{"state and source", store.DeliveryFilter{State: store.DeliveryAmbiguous, Source: "slack"}, []string{"d-d", "d-a"}},
		{"principal", store.DeliveryFilter{Principal: "alice"}, []string{"d-c", "d-b", "d-a"}},
		{"id", store.DeliveryFilter{ID: "d-b"}, []string{"d-b"}},
		{"task", store.DeliveryFilter{TaskID: "task-d-c"}, []string{"d-c"}},
		{"limit", store.DeliveryFilter{Limit: 2}, []string{"d-d", "d-c"}},
	} {
		got, err := s.ListDeliveries(context.Background(), tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if diff := cmp.Diff(tc.want, deliveryIDs(got), cmpOpts); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// testDeliveryListOmitAbandoned: OmitAbandoned leaves out a delivery whose latest attempt is an
// operator's abandoning resolution, and only that one: not one abandoned, retried and failed
// again, nor another principal's delivery of the same ID.
func testDeliveryListOmitAbandoned(t *testing.T, s store.Store) {
	failed := func(principal, id string, sec int) store.Delivery {
		return newDelivery(principal, id, store.DeliveryFailed, at(time.Duration(sec)*time.Second))
	}
	insertDeliveries(t, s, failed("alice", "d-failed", 1), failed("alice", "d-abandoned", 2),
		failed("alice", "d-abandoned-retried-failed", 3), failed("alice", "d-no-attempts", 4), failed("bob", "d-abandoned", 5))
	step := func(principal, id, kind, outcome string) store.DeliveryAttempt {
		return store.DeliveryAttempt{Principal: principal, DeliveryID: id, Attempt: 1, Kind: kind, Outcome: outcome, CreatedAt: t0}
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, a := range []store.DeliveryAttempt{
			step("alice", "d-failed", "send", "failed"),
			step("alice", "d-abandoned", "send", "failed"),
			step("bob", "d-abandoned", "send", "failed"),
			step("alice", "d-abandoned", store.AttemptResolve, store.OutcomeAbandoned),
			step("alice", "d-abandoned-retried-failed", store.AttemptResolve, store.OutcomeAbandoned),
			step("alice", "d-abandoned-retried-failed", store.AttemptResolve, "retry"),
			step("alice", "d-abandoned-retried-failed", "send", "failed"),
		} {
			if err := tx.InsertDeliveryAttempt(ctx, a); err != nil {
				return err
			}
		}
		return nil
	})
	for _, tc := range []struct {
		f    store.DeliveryFilter
		want []string
	}{
		{store.DeliveryFilter{State: store.DeliveryFailed},
			[]string{"d-abandoned", "d-no-attempts", "d-abandoned-retried-failed", "d-abandoned", "d-failed"}},
		{store.DeliveryFilter{State: store.DeliveryFailed, OmitAbandoned: true},
			[]string{"d-abandoned", "d-no-attempts", "d-abandoned-retried-failed", "d-failed"}},
		{store.DeliveryFilter{Principal: "alice", OmitAbandoned: true},
			[]string{"d-no-attempts", "d-abandoned-retried-failed", "d-failed"}},
		{store.DeliveryFilter{State: store.DeliveryFailed, OmitAbandoned: true, Limit: 2},
			[]string{"d-abandoned", "d-no-attempts"}},
	} {
		got, err := s.ListDeliveries(context.Background(), tc.f)
		if err != nil {
			t.Fatalf("%+v: %v", tc.f, err)
		}
		if diff := cmp.Diff(tc.want, deliveryIDs(got), cmpOpts); diff != "" {
			t.Errorf("%+v (-want +got):\n%s", tc.f, diff)
		}
	}
	if got, _ := s.ListDeliveries(context.Background(), store.DeliveryFilter{Principal: "bob", OmitAbandoned: true}); len(got) != 1 {
		t.Errorf("bob's d-abandoned, which only failed, is left out by alice's resolution: %+v", deliveryIDs(got))
	}
}

// testDeliveryListLeaseRanOut: LeaseRanOutBefore keeps only leased rows whose lease ran out
// before it (not unleased rows, nor ones leased until then or later), and applies before the
// limit: one old row stuck in sending is listed however many newer rows are leased by live
// engines.
func testDeliveryListLeaseRanOut(t *testing.T, s store.Store) {
	leased := func(id string, created, until time.Time) store.Delivery {
		d := newDelivery("alice", id, store.DeliverySending, created)
		d.LeaseOwner, d.LeaseUntil = "engine", until
		return d
	}
	cutoff := at(time.Hour)
	ds := []store.Delivery{
		leased("d-stuck", at(1*time.Second), cutoff.Add(-10*time.Minute)),
		newDelivery("alice", "d-unleased", store.DeliverySending, at(2*time.Second)),
		leased("d-until-cutoff", at(3*time.Second), cutoff),
	}
	for n := range 5 {
		ds = append(ds, leased(fmt.Sprintf("d-live-%d", n), at(time.Duration(10+n)*time.Second), cutoff.Add(time.Minute)))
	}
	insertDeliveries(t, s, ds...)
	for _, tc := range []struct {
		f    store.DeliveryFilter
		want []string
	}{
		{store.DeliveryFilter{State: store.DeliverySending, LeaseRanOutBefore: cutoff, Limit: 2}, []string{"d-stuck"}},
		{store.DeliveryFilter{LeaseRanOutBefore: cutoff.Add(time.Microsecond)}, []string{"d-until-cutoff", "d-stuck"}},
		{store.DeliveryFilter{State: store.DeliverySending, Limit: 2}, []string{"d-live-4", "d-live-3"}},
		{store.DeliveryFilter{State: store.DeliverySending, UnleasedIdleBefore: cutoff, Limit: 2}, []string{"d-unleased"}},
		{store.DeliveryFilter{State: store.DeliverySending, UnleasedIdleBefore: at(time.Second)}, nil},
	} {
		got, err := s.ListDeliveries(context.Background(), tc.f)
		if err != nil {
			t.Fatalf("%+v: %v", tc.f, err)
		}
		if diff := cmp.Diff(tc.want, deliveryIDs(got), cmpOpts); diff != "" {
			t.Errorf("%+v (-want +got):\n%s", tc.f, diff)
		}
	}
}

func testDeliveryAttempts(t *testing.T, s store.Store) {
	insertDeliveries(t, s, newDelivery("alice", "d-1", store.DeliverySending, t0))
	want := []store.DeliveryAttempt{
		{Principal: "alice", DeliveryID: "d-1", Attempt: 1, Kind: "send", Outcome: "retry-after", Error: "429",
			ProviderStatus: "429", RetryAfter: 30 * time.Second, Owner: "p1", CreatedAt: at(time.Second)},
		{Principal: "alice", DeliveryID: "d-1", Attempt: 1, Kind: "send", Outcome: "delivered", ProviderStatus: "200",
			Owner: "p1", CreatedAt: at(time.Second)}, // same time: Seq orders them
		{Principal: "alice", DeliveryID: "d-1", Attempt: 1, Kind: "resolve", Outcome: "delivered", Owner: "operator",
			CreatedAt: at(time.Minute)},
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, a := range want {
			if err := tx.InsertDeliveryAttempt(ctx, a); err != nil {
				return err
			}
		}
		// Another delivery's evidence does not show.
		return tx.InsertDeliveryAttempt(ctx, store.DeliveryAttempt{Principal: "alice", DeliveryID: "d-2", Kind: "send",
			Outcome: "failed", CreatedAt: t0})
	})
	got, err := s.ListDeliveryAttempts(context.Background(), "alice", "d-1")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Seq <= got[i-1].Seq {
			t.Errorf("Seq not increasing: %d then %d", got[i-1].Seq, got[i].Seq)
		}
	}
	for i := range got {
		got[i].Seq = 0
	}
	if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
		t.Errorf("ListDeliveryAttempts (-want +got):\n%s", diff)
	}
	if other, _ := s.ListDeliveryAttempts(context.Background(), "bob", "d-1"); len(other) != 0 {
		t.Errorf("bob sees alice's attempts: %+v", other)
	}
}

func testDeliveryClaimLease(t *testing.T, s store.Store) {
	prepared := newDelivery("alice", "d-prepared", store.DeliveryPrepared, t0)
	later := newDelivery("alice", "d-later", store.DeliveryPrepared, at(time.Hour)) // not due
	settled := newDelivery("alice", "d-done", store.DeliveryDelivered, t0)
	ambiguous := newDelivery("alice", "d-amb", store.DeliveryAmbiguous, t0)
	// A sending row whose worker still holds the lease, and one whose lease ran out.
	held := newDelivery("alice", "d-held", store.DeliverySending, t0)
	held.LeaseOwner, held.LeaseUntil = "other", at(time.Minute)
	expired := newDelivery("alice", "d-expired", store.DeliverySending, at(-time.Second))
	expired.LeaseOwner, expired.LeaseUntil = "dead", at(-time.Millisecond)
	insertDeliveries(t, s, prepared, later, settled, ambiguous, held, expired)

	c := store.DeliveryClaim{Owner: "me", Now: t0, LeaseUntil: at(30 * time.Second), Limit: 10}
	got := claimDeliveries(t, s, c)
	if diff := cmp.Diff([]string{"d-expired", "d-prepared"}, deliveryIDs(got)); diff != "" {
		t.Fatalf("claimed (-want +got):\n%s", diff)
	}
	for _, d := range got {
		if d.LeaseOwner != "me" || !d.LeaseUntil.Equal(c.LeaseUntil) {
			t.Errorf("claimed %s has lease %q until %v, want me until %v", d.ID, d.LeaseOwner, d.LeaseUntil, c.LeaseUntil)
		}
	}
	if got[0].State != store.DeliverySending || got[1].State != store.DeliveryPrepared {
		t.Errorf("claim changed states: %s %s", got[0].State, got[1].State)
	}
	// The lease holds off every other claimer until it expires.
	if again := claimDeliveries(t, s, store.DeliveryClaim{Owner: "you", Now: at(29 * time.Second), LeaseUntil: at(time.Hour), Limit: 10}); len(again) != 0 {
		t.Errorf("claim while leased = %v, want none", deliveryIDs(again))
	}
	again := claimDeliveries(t, s, store.DeliveryClaim{Owner: "you", Now: at(time.Minute), LeaseUntil: at(time.Hour), Limit: 10})
	if diff := cmp.Diff([]string{"d-expired", "d-held", "d-prepared"}, deliveryIDs(again)); diff != "" {
		t.Errorf("claim after leases expired (-want +got):\n%s", diff)
	}
	// Limit bounds the claim.
	if n := len(claimDeliveries(t, s, store.DeliveryClaim{Owner: "x", Now: at(2 * time.Hour), LeaseUntil: at(3 * time.Hour), Limit: 2})); n != 2 {
		t.Errorf("claim with limit 2 took %d rows", n)
	}
}

func testDeliveryClaimByID(t *testing.T, s store.Store) {
	insertDeliveries(t, s,
		newDelivery("alice", "d-1", store.DeliveryPrepared, t0),
		newDelivery("alice", "d-2", store.DeliveryPrepared, t0),
		newDelivery("alice", "d-later", store.DeliveryPrepared, at(time.Hour)))
	got := claimDeliveries(t, s, store.DeliveryClaim{Owner: "me", Now: t0, LeaseUntil: at(time.Minute), Principal: "alice", ID: "d-2"})
	if diff := cmp.Diff([]string{"d-2"}, deliveryIDs(got)); diff != "" {
		t.Errorf("claim by id (-want +got):\n%s", diff)
	}
	if d := mustGetDelivery(t, s, "alice", "d-1"); d.LeaseOwner != "" {
		t.Errorf("claim by id leased another row: %+v", d)
	}
	if got := claimDeliveries(t, s, store.DeliveryClaim{Owner: "you", Now: t0, LeaseUntil: at(time.Minute), Principal: "alice", ID: "d-2"}); len(got) != 0 {
		t.Errorf("second claim of a leased row = %v", deliveryIDs(got))
	}
	if got := claimDeliveries(t, s, store.DeliveryClaim{Owner: "me", Now: t0, LeaseUntil: at(time.Minute), Principal: "alice", ID: "d-later"}); len(got) != 0 {
		t.Errorf("claim of a row not yet due = %v", deliveryIDs(got))
	}
	if got := claimDeliveries(t, s, store.DeliveryClaim{Owner: "me", Now: t0, LeaseUntil: at(time.Minute), Principal: "alice", ID: "nope"}); len(got) != 0 {
		t.Errorf("claim of a missing row = %v", deliveryIDs(got))
	}
}

func testDeliveryClaimLanes(t *testing.T, s store.Store) {
	var ds []store.Delivery
	for i := range 3 {
		d := newDelivery("alice", fmt.Sprintf("a-%d", i), store.DeliveryPrepared, at(time.Duration(i)*time.Millisecond))
		d.Lane = "slack:C1"
		ds = append(ds, d)
	}
	b := newDelivery("alice", "b-0", store.DeliveryPrepared, at(5*time.Millisecond))
	b.Lane = "slack:C2"
	w := newDelivery("alice", "w-0", store.DeliveryPrepared, at(6*time.Millisecond))
	w.Lane = "slack:C-waiting"
	free := newDelivery("alice", "n-0", store.DeliveryPrepared, at(7*time.Millisecond))
	free2 := newDelivery("alice", "n-1", store.DeliveryPrepared, at(8*time.Millisecond))
	// The same lane key under another principal is another lane.
	bob := newDelivery("bob", "a-bob", store.DeliveryPrepared, at(9*time.Millisecond))
	bob.Lane = "slack:C1"
	insertDeliveries(t, s, append(ds, b, w, free, free2, bob)...)
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		return tx.DelayLane(ctx, "alice", "slack:C-waiting", at(time.Second))
	})
	now := at(10 * time.Millisecond)
	got := claimDeliveries(t, s, store.DeliveryClaim{Owner: "me", Now: now, LeaseUntil: at(time.Minute), Limit: 10})
	if diff := cmp.Diff([]string{"a-0", "b-0", "n-0", "n-1", "a-bob"}, deliveryIDs(got)); diff != "" {
		t.Errorf("claim (-want +got):\n%s", diff)
	}
	// Once the waiting lane opens, its row is claimable.
	got = claimDeliveries(t, s, store.DeliveryClaim{Owner: "me", Now: at(time.Second), LeaseUntil: at(time.Minute), Limit: 10})
	if !slices.Contains(deliveryIDs(got), "w-0") {
		t.Errorf("claim after the lane opened = %v, want w-0 among them", deliveryIDs(got))
	}
}

func testDeliveryClaimSources(t *testing.T, s store.Store) {
	a := newDelivery("alice", "d-slack", store.DeliveryPrepared, t0)
	b := newDelivery("alice", "d-github", store.DeliveryPrepared, t0)
	b.Source = "github"
	c := newDelivery("alice", "d-email", store.DeliveryPrepared, t0)
	c.Source = "email"
	insertDeliveries(t, s, a, b, c)
	got := claimDeliveries(t, s, store.DeliveryClaim{Owner: "me", Now: t0, LeaseUntil: at(time.Minute), Limit: 10, Sources: []string{"github", "email"}})
	if diff := cmp.Diff([]string{"d-email", "d-github"}, sortedIDs(got)); diff != "" {
		t.Errorf("claim restricted to github and email (-want +got):\n%s", diff)
	}
	if got := claimDeliveries(t, s, store.DeliveryClaim{Owner: "me", Now: t0, LeaseUntil: at(time.Minute), Principal: "alice", ID: "d-slack", Sources: []string{"github"}}); len(got) != 0 {
		t.Errorf("claim by id outside the sources = %v", deliveryIDs(got))
	}
}

// sortedIDs returns the sorted ids.
func sortedIDs(ds []store.Delivery) []string {
	out := deliveryIDs(ds)
	slices.Sort(out)
	return out
}

func testDeliveryClaimConcurrent(t *testing.T, s store.Store) {
	const rows, claimers = 10, 20
	var ds []store.Delivery
	for i := range rows {
		ds = append(ds, newDelivery("alice", fmt.Sprintf("d-%02d", i), store.DeliveryPrepared, t0))
	}
	insertDeliveries(t, s, ds...)
	var (
		mu    sync.Mutex
		taken = map[string]string{}
		wg    sync.WaitGroup
		errs  = make([]error, claimers)
	)
	for i := range claimers {
		wg.Go(func() {
			owner := fmt.Sprintf("claimer-%d", i)
			errs[i] = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
				got, err := tx.ClaimDeliveries(ctx, store.DeliveryClaim{Owner: owner, Now: at(time.Second),
					LeaseUntil: at(time.Minute), Limit: 1})
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				for _, d := range got {
					if prev, ok := taken[d.ID]; ok && prev != owner {
						return fmt.Errorf("%s claimed by %s and %s", d.ID, prev, owner)
					}
					taken[d.ID] = owner
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
	if len(taken) != rows {
		t.Errorf("%d of %d rows claimed by 20 claimers of one row each", len(taken), rows)
	}
	for id, owner := range taken {
		if d := mustGetDelivery(t, s, "alice", id); d.LeaseOwner != owner {
			t.Errorf("%s: stored lease owner %q, claimed by %q", id, d.LeaseOwner, owner)
		}
	}
}

func reserveLane(t *testing.T, s store.Store, lane string, now time.Time, interval time.Duration) (bool, time.Time) {
	t.Helper()
	var granted bool
	var next time.Time
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		var err error
		granted, next, err = tx.ReserveLane(ctx, "alice", lane, now, now.Add(interval))
		return err
	})
	return granted, next
}

func testLaneReserve(t *testing.T, s store.Store) {
	if ok, next := reserveLane(t, s, "L", t0, time.Second); !ok || !next.Equal(at(time.Second)) {
		t.Errorf("first reserve = %v %v, want granted until t0+1s", ok, next)
	}
	if ok, next := reserveLane(t, s, "L", at(500*time.Millisecond), time.Second); ok || !next.Equal(at(time.Second)) {
		t.Errorf("reserve within the interval = %v %v, want refused, next t0+1s", ok, next)
	}
	if ok, _ := reserveLane(t, s, "other", at(500*time.Millisecond), time.Second); !ok {
		t.Error("another lane was refused: lanes must not share slots")
	}
	if ok, next := reserveLane(t, s, "L", at(time.Second), time.Second); !ok || !next.Equal(at(2*time.Second)) {
		t.Errorf("reserve at the next allowed time = %v %v, want granted until t0+2s", ok, next)
	}
}

func testLaneReserveConcurrent(t *testing.T, s store.Store) {
	const n = 20
	var granted sync.WaitGroup
	results := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		granted.Go(func() {
			errs[i] = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
				ok, _, err := tx.ReserveLane(ctx, "alice", "L", t0, at(time.Second))
				results[i] = ok
				return err
			})
		})
	}
	granted.Wait()
	count := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("reserver %d: %v", i, errs[i])
		}
		if results[i] {
			count++
		}
	}
	if count != 1 {
		t.Errorf("%d of %d concurrent reservers of one slot were granted, want 1", count, n)
	}
}

func testLaneDelay(t *testing.T, s store.Store) {
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.DelayLane(ctx, "alice", "L", at(time.Minute)); err != nil {
			return err
		}
		return tx.DelayLane(ctx, "alice", "L", at(time.Second)) // earlier: ignored
	})
	if ok, next := reserveLane(t, s, "L", at(30*time.Second), time.Second); ok || !next.Equal(at(time.Minute)) {
		t.Errorf("reserve in a delayed lane = %v %v, want refused until t0+1m", ok, next)
	}
}

func testDeliveryNextDue(t *testing.T, s store.Store) {
	if _, ok, err := s.NextDeliveryDue(context.Background(), nil); err != nil || ok {
		t.Fatalf("NextDeliveryDue on an empty store = ok %v, %v", ok, err)
	}
	done := newDelivery("alice", "d-done", store.DeliveryDelivered, t0) // settled rows never count
	a := newDelivery("alice", "d-a", store.DeliveryPrepared, at(10*time.Second))
	b := newDelivery("alice", "d-b", store.DeliverySending, at(time.Second))
	b.LeaseUntil = at(20 * time.Second) // leased: due when the lease runs out
	c := newDelivery("alice", "d-c", store.DeliveryPrepared, at(2*time.Second))
	c.Lane = "L" // its lane opens at t0+15s
	// Lane M's head is in backoff until t0+40s; the row behind it, due at once, waits for it (a
	// claimer takes only a lane's oldest pending row): counting it made an engine spin.
	head := newDelivery("alice", "d-m1", store.DeliveryPrepared, at(-time.Minute))
	head.Lane, head.NextAttemptAt = "M", at(40*time.Second)
	behind := newDelivery("alice", "d-m2", store.DeliveryPrepared, at(-30*time.Second))
	behind.Lane = "M"
	insertDeliveries(t, s, done, a, b, c, head, behind)
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		return tx.DelayLane(ctx, "alice", "L", at(15*time.Second))
	})
	due, ok, err := s.NextDeliveryDue(context.Background(), nil)
	if err != nil || !ok || !due.Equal(at(10*time.Second)) {
		t.Errorf("NextDeliveryDue = %v %v %v, want t0+10s", due, ok, err)
	}
	// Only the given sources count: an engine must not wait on rows it cannot claim.
	other := newDelivery("alice", "d-other", store.DeliveryPrepared, at(time.Second))
	other.Source = "github"
	insertDeliveries(t, s, other)
	for _, c := range []struct {
		sources []string
		want    time.Time
		ok      bool
	}{
		{nil, at(time.Second), true},
		{[]string{"slack"}, at(10 * time.Second), true},
		{[]string{"github", "slack"}, at(time.Second), true},
		{[]string{"email"}, time.Time{}, false},
	} {
		due, ok, err := s.NextDeliveryDue(context.Background(), c.sources)
		if err != nil || ok != c.ok || !due.Equal(c.want) {
			t.Errorf("NextDeliveryDue(%v) = %v %v %v, want %v %v", c.sources, due, ok, err, c.want, c.ok)
		}
	}
}

func testDeliveryPrune(t *testing.T, s store.Store) {
	old, recent := at(-48*time.Hour), at(time.Hour)
	var ds []store.Delivery
	for _, st := range []store.DeliveryState{store.DeliveryPrepared, store.DeliverySending, store.DeliveryAmbiguous,
		store.DeliveryDelivered, store.DeliveryFailed} {
		ds = append(ds, newDelivery("alice", "old-"+string(st), st, old), newDelivery("alice", "new-"+string(st), st, recent))
	}
	insertDeliveries(t, s, ds...)
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		return tx.InsertDeliveryAttempt(ctx, store.DeliveryAttempt{Principal: "alice", DeliveryID: "old-delivered",
			Kind: "send", Outcome: "delivered", CreatedAt: old})
	})
	n := pruneDeliveries(t, s, terminalStates, 1)
	if n != 1 {
		t.Errorf("PruneDeliveries with limit 1 deleted %d", n)
	}
	n = pruneDeliveries(t, s, terminalStates, 0)
	if n != 1 {
		t.Errorf("second PruneDeliveries deleted %d, want the 1 left", n)
	}
	left, err := s.ListDeliveries(context.Background(), store.DeliveryFilter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"new-ambiguous", "new-delivered", "new-failed", "new-prepared", "new-sending",
		"old-ambiguous", "old-prepared", "old-sending"}
	if diff := cmp.Diff(want, sortedIDs(left)); diff != "" {
		t.Errorf("left after prune (-want +got):\n%s", diff)
	}
	if a, _ := s.ListDeliveryAttempts(context.Background(), "alice", "old-delivered"); len(a) != 0 {
		t.Errorf("a pruned delivery's attempts remain: %+v", a)
	}
}

func testTaskPruneLeavesDeliveries(t *testing.T, s store.Store) {
	old := at(-48 * time.Hour)
	insertContexts(t, s, newContext("alice", "c-old", old))
	insertTasks(t, s, newTask("alice", "t-done", "c-old", "completed", old))
	var ds []store.Delivery
	for _, st := range []store.DeliveryState{store.DeliveryPrepared, store.DeliverySending, store.DeliveryAmbiguous,
		store.DeliveryDelivered} {
		d := newDelivery("alice", "d-"+string(st), st, old)
		d.TaskID = "t-done"
		ds = append(ds, d)
	}
	insertDeliveries(t, s, ds...)
	var r store.PruneResult
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		var err error
		r, err = tx.Prune(ctx, t0, []string{"completed"}, 0)
		return err
	})
	if r.Tasks != 1 {
		t.Fatalf("Prune deleted %d tasks, want the terminal one", r.Tasks)
	}
	for _, d := range ds {
		if _, err := s.GetDelivery(context.Background(), "alice", d.ID); err != nil {
			t.Errorf("delivery in %s after its task was pruned: %v", d.State, err)
		}
	}
	if _, err := s.GetTask(context.Background(), "alice", "t-done"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetTask after prune: %v", err)
	}
}

// A settled delivery is the record that it was sent: while its task goes on (a task waiting on an
// answer for longer than the window), the same delivery asked for again must find it, not be
// sent a second time. Once the task is gone, or finished (it asks for nothing more), so may the
// delivery be.
func testDeliveryPruneKeepsALiveTasks(t *testing.T, s store.Store) {
	old := at(-48 * time.Hour)
	insertContexts(t, s, newContext("alice", "c-1", old))
	insertTasks(t, s, newTask("alice", "t-live", "c-1", "input-required", old),
		newTask("alice", "t-done", "c-1", "completed", old))
	live := newDelivery("alice", "d-live", store.DeliveryDelivered, old)
	live.TaskID = "t-live"
	orphan := newDelivery("alice", "d-orphan", store.DeliveryFailed, old) // its task is gone
	other := newDelivery("bob", "d-bob", store.DeliveryDelivered, old)    // bob has no t-live
	other.TaskID = "t-live"
	done := newDelivery("alice", "d-done", store.DeliveryDelivered, old) // its task finished
	done.TaskID = "t-done"
	insertDeliveries(t, s, live, orphan, other, done)
	// Told of no terminal state, every stored task counts as going on.
	n := pruneDeliveries(t, s, nil, 0)
	if n != 2 {
		t.Errorf("PruneDeliveries with no terminal states deleted %d, want the 2 whose task is gone", n)
	}
	n = pruneDeliveries(t, s, terminalStates, 0)
	if n != 1 {
		t.Errorf("PruneDeliveries deleted %d, want the 1 whose task finished", n)
	}
	if _, err := s.GetDelivery(context.Background(), "alice", "d-live"); err != nil {
		t.Errorf("the delivery of a stored task was pruned: %v", err)
	}
	for _, k := range [][2]string{{"alice", "d-orphan"}, {"bob", "d-bob"}, {"alice", "d-done"}} {
		if _, err := s.GetDelivery(context.Background(), k[0], k[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("delivery %s of %s after prune: %v", k[1], k[0], err)
		}
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.Prune(ctx, t0, []string{"input-required"}, 0)
		return err
	})
	n = pruneDeliveries(t, s, terminalStates, 0)
	if n != 1 {
		t.Errorf("PruneDeliveries after the task went deleted %d, want 1", n)
	}
}
