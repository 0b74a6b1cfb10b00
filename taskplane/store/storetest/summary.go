package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// summaryCases prove store.SummaryReader: the aggregate reads behind the operator summary, the
// dashboard's charts and the metrics.
func summaryCases() []testCase {
	return []testCase{
		{"CountEvidenceGroupsBySourceAndKindAndSumsCounts", testCountEvidence},
		{"CountEvidenceFilters", testCountEvidenceFilters},
		{"CountEvidenceBucketsFromSince", testCountEvidenceBuckets},
		{"CountEvidenceInsideATransactionSeesItsWrites", testCountEvidenceInTx},
		{"CountDeliveriesBySourceLaneAndState", testCountDeliveries},
		{"CountTasksByPrincipalSourceAndState", testCountTasks},
		{"ListCheckpointsAcrossPrincipals", testListCheckpoints},
	}
}

func insertEvidence(t *testing.T, s store.Store, es ...store.Evidence) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, e := range es {
			if err := tx.InsertEvidence(ctx, e); err != nil {
				return err
			}
		}
		return nil
	})
}

// summaryFixture: slack has 2 accepted, 1 duplicate and non-work rows standing for 7 events;
// webhook has 1 accepted of bob, 1 rejected row standing for 3 events and 3 malformed rows
// standing for 4: one whose detail holds a NUL (json.Marshal writes it \u0000; details carry
// provider-supplied identities and error texts), one whose count is too large to be one and one
// whose detail is not an object. None of them may fail the summary.
func summaryFixture(t *testing.T, s store.Store) {
	t.Helper()
	nul, err := json.Marshal(map[string]any{"reason": "invalid-event", "identity": "ev\x00id", "error": "\\u0000 \x00", "count": 2})
	if err != nil {
		t.Fatal(err)
	}
	insertEvidence(t, s,
		store.Evidence{Principal: "alice", Source: "slack", Kind: "accepted", TaskID: "t1", Detail: []byte(`{"identity":"E1"}`), CreatedAt: t0},
		store.Evidence{Principal: "alice", Source: "slack", Kind: "accepted", TaskID: "t2", CreatedAt: at(time.Minute)},
		store.Evidence{Principal: "alice", Source: "slack", Kind: "duplicate", TaskID: "t1", Detail: []byte(`{"identity":"E1"}`), CreatedAt: at(2 * time.Minute)},
		store.Evidence{Principal: "alice", Source: "slack", Kind: "non-work", Detail: []byte(`{"reason":"bot","count":5}`), CreatedAt: at(3 * time.Minute)},
		store.Evidence{Principal: "alice", Source: "slack", Kind: "non-work", Detail: []byte(`{"reason":"edit","count":2}`), CreatedAt: at(4 * time.Minute)},
		store.Evidence{Principal: "bob", Source: "webhook", Kind: "accepted", TaskID: "t3", Detail: []byte(`{"count":"many"}`), CreatedAt: at(5 * time.Minute)},
		store.Evidence{Principal: "bob", Source: "webhook", Kind: "rejected", Detail: []byte(`{"reason":"bad-signature","count":3}`), CreatedAt: at(6 * time.Minute)},
		store.Evidence{Principal: "bob", Source: "webhook", Kind: "malformed", Detail: nul, CreatedAt: at(7 * time.Minute)},
		store.Evidence{Principal: "bob", Source: "webhook", Kind: "malformed", Detail: []byte(`{"count":1e30}`), CreatedAt: at(8 * time.Minute)},
		store.Evidence{Principal: "bob", Source: "webhook", Kind: "malformed", Detail: []byte(`[{"count":9}]`), CreatedAt: at(9 * time.Minute)},
	)
}

func testCountEvidence(t *testing.T, s store.Store) {
	summaryFixture(t, s)
	got, err := s.CountEvidence(context.Background(), store.EvidenceCountFilter{})
	if err != nil {
		t.Fatal(err)
	}
	// A count that is not a number ("many"), too large to be a count (1e30) or not in an object
	// counts the row once.
	diff(t, "CountEvidence", []store.EvidenceCount{
		{Source: "slack", Kind: "accepted", Rows: 2, Events: 2, Last: at(time.Minute)},
		{Source: "slack", Kind: "duplicate", Rows: 1, Events: 1, Last: at(2 * time.Minute)},
		{Source: "slack", Kind: "non-work", Rows: 2, Events: 7, Last: at(4 * time.Minute)},
		{Source: "webhook", Kind: "accepted", Rows: 1, Events: 1, Last: at(5 * time.Minute)},
		{Source: "webhook", Kind: "malformed", Rows: 3, Events: 4, Last: at(9 * time.Minute)},
		{Source: "webhook", Kind: "rejected", Rows: 1, Events: 3, Last: at(6 * time.Minute)},
	}, got)
}

func testCountEvidenceFilters(t *testing.T, s store.Store) {
	summaryFixture(t, s)
	cases := []struct {
		name string
		f    store.EvidenceCountFilter
		want []store.EvidenceCount
	}{
		{"principal", store.EvidenceCountFilter{Principal: "bob"}, []store.EvidenceCount{
			{Source: "webhook", Kind: "accepted", Rows: 1, Events: 1, Last: at(5 * time.Minute)},
			{Source: "webhook", Kind: "malformed", Rows: 3, Events: 4, Last: at(9 * time.Minute)},
			{Source: "webhook", Kind: "rejected", Rows: 1, Events: 3, Last: at(6 * time.Minute)},
		}},
		{"source and kind", store.EvidenceCountFilter{Source: "slack", Kind: "non-work"}, []store.EvidenceCount{
			{Source: "slack", Kind: "non-work", Rows: 2, Events: 7, Last: at(4 * time.Minute)},
		}},
		{"since inclusive, until exclusive", store.EvidenceCountFilter{Since: at(time.Minute), Until: at(4 * time.Minute)}, []store.EvidenceCount{
			{Source: "slack", Kind: "accepted", Rows: 1, Events: 1, Last: at(time.Minute)},
			{Source: "slack", Kind: "duplicate", Rows: 1, Events: 1, Last: at(2 * time.Minute)},
			{Source: "slack", Kind: "non-work", Rows: 1, Events: 5, Last: at(3 * time.Minute)},
		}},
		{"nothing", store.EvidenceCountFilter{Source: "email"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := s.CountEvidence(context.Background(), c.f)
			if err != nil {
				t.Fatal(err)
			}
			diff(t, "CountEvidence", c.want, got)
		})
	}
}

func testCountEvidenceBuckets(t *testing.T, s store.Store) {
	insertEvidence(t, s,
		store.Evidence{Principal: "alice", Source: "slack", Kind: "accepted", CreatedAt: at(10 * time.Minute)},
		store.Evidence{Principal: "alice", Source: "slack", Kind: "accepted", CreatedAt: at(70 * time.Minute)},
		store.Evidence{Principal: "alice", Source: "slack", Kind: "accepted", CreatedAt: at(119 * time.Minute)},
		store.Evidence{Principal: "alice", Source: "slack", Kind: "non-work", Detail: []byte(`{"count":4}`), CreatedAt: at(61 * time.Minute)},
		// Before Since: left out.
		store.Evidence{Principal: "alice", Source: "slack", Kind: "accepted", CreatedAt: at(-time.Minute)},
	)
	got, err := s.CountEvidence(context.Background(), store.EvidenceCountFilter{Since: t0, Bucket: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "hourly buckets", []store.EvidenceCount{
		{Source: "slack", Kind: "accepted", Bucket: t0, Rows: 1, Events: 1, Last: at(10 * time.Minute)},
		{Source: "slack", Kind: "accepted", Bucket: at(time.Hour), Rows: 2, Events: 2, Last: at(119 * time.Minute)},
		{Source: "slack", Kind: "non-work", Bucket: at(time.Hour), Rows: 1, Events: 4, Last: at(61 * time.Minute)},
	}, got)
	if _, err := s.CountEvidence(context.Background(), store.EvidenceCountFilter{Bucket: time.Hour}); err == nil {
		t.Fatal("buckets without Since: want an error")
	}
}

func testCountEvidenceInTx(t *testing.T, s store.Store) {
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "slack", Kind: "accepted", CreatedAt: t0}); err != nil {
			return err
		}
		got, err := tx.CountEvidence(ctx, store.EvidenceCountFilter{})
		if err != nil {
			return err
		}
		diff(t, "CountEvidence in tx", []store.EvidenceCount{{Source: "slack", Kind: "accepted", Rows: 1, Events: 1, Last: t0}}, got)
		return nil
	})
}

func testCountDeliveries(t *testing.T, s store.Store) {
	a := newDelivery("alice", "d1", store.DeliveryDelivered, at(time.Minute))
	b := newDelivery("alice", "d2", store.DeliveryDelivered, t0)
	c := newDelivery("alice", "d3", store.DeliveryAmbiguous, at(2*time.Minute))
	c.Lane = "slack:C1"
	d := newDelivery("bob", "d4", store.DeliveryPrepared, at(3*time.Minute))
	d.Source = "webhook"
	insertDeliveries(t, s, a, b, c, d)

	got, err := s.CountDeliveries(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "CountDeliveries", []store.DeliveryCount{
		{Source: "slack", Lane: "", State: store.DeliveryDelivered, N: 2, Oldest: t0},
		{Source: "slack", Lane: "slack:C1", State: store.DeliveryAmbiguous, N: 1, Oldest: at(2 * time.Minute)},
		{Source: "webhook", Lane: "", State: store.DeliveryPrepared, N: 1, Oldest: at(3 * time.Minute)},
	}, got)
	got, err = s.CountDeliveries(context.Background(), "bob")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "CountDeliveries of bob", []store.DeliveryCount{
		{Source: "webhook", Lane: "", State: store.DeliveryPrepared, N: 1, Oldest: at(3 * time.Minute)},
	}, got)
}

func testCountTasks(t *testing.T, s store.Store) {
	insertContexts(t, s, newContext("alice", "c1", t0), newContext("bob", "c2", t0))
	w := newTask("bob", "t4", "c2", "TASK_STATE_WORKING", t0)
	w.Source = "webhook"
	insertTasks(t, s,
		newTask("alice", "t1", "c1", "TASK_STATE_COMPLETED", t0),
		newTask("alice", "t2", "c1", "TASK_STATE_COMPLETED", at(time.Second)),
		newTask("alice", "t3", "c1", "TASK_STATE_WORKING", at(2*time.Second)),
		w,
	)
	got, err := s.CountTasks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "CountTasks", []store.TaskCount{
		{Principal: "alice", Source: "slack", State: "TASK_STATE_COMPLETED", N: 2},
		{Principal: "alice", Source: "slack", State: "TASK_STATE_WORKING", N: 1},
		{Principal: "bob", Source: "webhook", State: "TASK_STATE_WORKING", N: 1},
	}, got)
}

func testListCheckpoints(t *testing.T, s store.Store) {
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, c := range []store.Checkpoint{
			{Principal: "bob", Source: "email", Instance: "inbox", Position: []byte("uid:7"), Seq: 7, UpdatedAt: at(time.Minute)},
			{Principal: "alice", Source: "email", Instance: "work", Position: []byte("uid:3"), Seq: 3, UpdatedAt: t0},
			{Principal: "alice", Source: "email", Instance: "home", Position: []byte("uid:9"), Seq: 9, UpdatedAt: t0},
			{Principal: "alice", Source: "github", Instance: "acme", Position: []byte("etag"), Seq: 1, UpdatedAt: t0},
		} {
			if _, err := tx.AdvanceCheckpoint(ctx, c); err != nil {
				return err
			}
		}
		return nil
	})
	all, err := s.ListCheckpoints(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "ListCheckpoints", []store.Checkpoint{
		{Principal: "alice", Source: "email", Instance: "home", Position: []byte("uid:9"), Seq: 9, Version: 1, UpdatedAt: t0},
		{Principal: "alice", Source: "email", Instance: "work", Position: []byte("uid:3"), Seq: 3, Version: 1, UpdatedAt: t0},
		{Principal: "bob", Source: "email", Instance: "inbox", Position: []byte("uid:7"), Seq: 7, Version: 1, UpdatedAt: at(time.Minute)},
		{Principal: "alice", Source: "github", Instance: "acme", Position: []byte("etag"), Seq: 1, Version: 1, UpdatedAt: t0},
	}, all)
	email, err := s.ListCheckpoints(context.Background(), "email")
	if err != nil {
		t.Fatal(err)
	}
	if len(email) != 3 || email[0].Principal != "alice" || email[2].Principal != "bob" {
		t.Fatalf("ListCheckpoints(email) = %+v", email)
	}
}
