package operator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// TestAttentionLeavesOutDeliveriesAnOperatorAbandoned: `channels deliveries resolve --abandon`
// settles a delivery (it stays failed, for the record), so it leaves the deliveries that need
// attention; a delivery that failed on its own stays there, and so does an abandoned one an
// operator sent again that failed again.
func TestAttentionLeavesOutDeliveriesAnOperatorAbandoned(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := context.Background()
		st := open(t)
		now := time.Now().UTC().Truncate(time.Second)
		row := func(id string, state store.DeliveryState) store.Delivery {
			return store.Delivery{Principal: "alice", ID: id, TaskID: "task-" + id, Source: "email", Operation: "reply",
				Recovery: "ambiguous", PayloadDigest: "sha256:" + id, State: state, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}
		}
		if err := st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			for _, d := range []store.Delivery{row("d-failed", store.DeliveryFailed), row("d-ambiguous", store.DeliveryAmbiguous),
				row("d-failed-abandoned", store.DeliveryFailed)} {
				if _, _, err := tx.InsertDelivery(ctx, d); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		eng := delivery.New(st, nil)
		defer eng.Close()
		attention := func() map[string]string {
			t.Helper()
			views, err := operator.Attention(ctx, st, now, 0)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]string{}
			for _, v := range views {
				out[v.ID] = v.Why
			}
			return out
		}
		if got := attention(); len(got) != 3 {
			t.Fatalf("before any resolution, attention = %v, want all three", got)
		}
		for _, id := range []string{"d-ambiguous", "d-failed-abandoned"} {
			if _, err := eng.Resolve(ctx, "alice", id, delivery.Resolution{Abandon: true, By: "ops"}); err != nil {
				t.Fatal(err)
			}
		}
		if got := attention(); len(got) != 1 || got["d-failed"] != "failed" {
			t.Fatalf("after abandoning two, attention = %v, want only d-failed", got)
		}
		// Sent again and failed again: it needs attention again.
		if _, err := eng.Resolve(ctx, "alice", "d-ambiguous", delivery.Resolution{Retry: true, By: "ops"}); err != nil {
			t.Fatal(err)
		}
		if err := st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			d, err := tx.GetDelivery(ctx, "alice", "d-ambiguous")
			if err != nil {
				return err
			}
			d.State, d.LastError = store.DeliveryFailed, "550 mailbox unavailable"
			if err := tx.UpdateDelivery(ctx, d); err != nil {
				return err
			}
			return tx.InsertDeliveryAttempt(ctx, store.DeliveryAttempt{Principal: "alice", DeliveryID: d.ID, Attempt: 1,
				Kind: "send", Outcome: "failed", Error: d.LastError, CreatedAt: now})
		}); err != nil {
			t.Fatal(err)
		}
		if got := attention(); len(got) != 2 || got["d-ambiguous"] != "failed" {
			t.Fatalf("after the retry failed, attention = %v, want d-failed and d-ambiguous", got)
		}
	})
}

// The summary shows the position of each instance of a source apart: two mailboxes of one
// principal are two checkpoints, each named by its instance.
func TestSummaryShowsEachInstancesCheckpoint(t *testing.T) {
	ctx := context.Background()
	st := storetest.OpenSQLite(t)
	now := time.Now().UTC().Truncate(time.Second)
	if err := st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for _, c := range []store.Checkpoint{
			{Principal: "alice", Source: "email", Instance: "work", Position: []byte("uid:100"), Seq: 100, UpdatedAt: now},
			{Principal: "alice", Source: "email", Instance: "home", Position: []byte("uid:5"), Seq: 5, UpdatedAt: now},
		} {
			if _, err := tx.AdvanceCheckpoint(ctx, c); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sum, err := operator.Summarize(ctx, st, operator.SummaryOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	var got []operator.CheckpointView
	for _, s := range sum.Sources {
		if s.Source == "email" {
			got = s.Checkpoints
		}
	}
	if len(got) != 2 || got[0].Instance != "home" || got[0].Position != "uid:5" || got[1].Instance != "work" || got[1].Position != "uid:100" {
		t.Fatalf("email checkpoints = %+v, want home at uid:5 and work at uid:100", got)
	}
}

// TestAttentionListsAStuckDeliveryBehindFiftyInFlight: one delivery stuck in sending (its engine
// died ten minutes ago) is listed however many newer deliveries are in flight under live leases,
// and none of those is.
func TestAttentionListsAStuckDeliveryBehindFiftyInFlight(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := context.Background()
		st := open(t)
		now := time.Now().UTC().Truncate(time.Second)
		sending := func(id string, created, lease time.Time) store.Delivery {
			return store.Delivery{Principal: "p", ID: id, TaskID: "t", Source: "email", Operation: "reply",
				Recovery: "ambiguous", PayloadDigest: "sha256:" + id, Payload: []byte("{}"), State: store.DeliverySending,
				Attempts: 1, LeaseOwner: "o", LeaseUntil: lease, NextAttemptAt: created, CreatedAt: created, UpdatedAt: created}
		}
		rows := []store.Delivery{sending("stuck", now.Add(-time.Hour), now.Add(-10*time.Minute))}
		for n := range 50 {
			rows = append(rows, sending(fmt.Sprintf("live-%02d", n), now.Add(-time.Duration(50-n)*time.Second), now.Add(time.Minute)))
		}
		if err := st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			for _, d := range rows {
				if _, _, err := tx.InsertDelivery(ctx, d); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		att, err := operator.Attention(ctx, st, now, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(att) != 1 || att[0].ID != "stuck" || att[0].Why != "stuck in sending" {
			t.Fatalf("attention = %+v, want only the delivery stuck in sending", att)
		}
	})
}

// A delivery released in sending after an unknown outcome (no lease, its repeat scheduled) is
// listed once no engine has worked it for longer than any repeat or lookup waits (its source is
// no longer routed), and not while one may still, however many are being repeated.
func TestAttentionListsAnUnleasedDeliveryNoEngineWorks(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := context.Background()
		st := open(t)
		now := time.Now().UTC().Truncate(time.Second)
		unleased := func(id string, created time.Time) store.Delivery {
			return store.Delivery{Principal: "p", ID: id, TaskID: "t", Source: "webhook", Operation: "reply",
				Recovery: "idempotent", PayloadDigest: "sha256:" + id, Payload: []byte("{}"), State: store.DeliverySending,
				Attempts: 1, NextAttemptAt: created.Add(time.Minute), CreatedAt: created, UpdatedAt: created}
		}
		if err := st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			// Fifty newer ones being repeated (an outage) do not crowd the forgotten one out.
			ds := []store.Delivery{unleased("forgotten", now.Add(-3*time.Hour))}
			for n := range 50 {
				ds = append(ds, unleased(fmt.Sprintf("repeating-%02d", n), now.Add(-time.Duration(10+n)*time.Second)))
			}
			for _, d := range ds {
				if _, _, err := tx.InsertDelivery(ctx, d); err != nil {
					return err
				}
				if err := tx.InsertDeliveryAttempt(ctx, store.DeliveryAttempt{Principal: "p", DeliveryID: d.ID, Attempt: 1,
					Kind: "send", Outcome: "unknown", Owner: "engine", CreatedAt: d.CreatedAt}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		att, err := operator.Attention(ctx, st, now, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(att) != 1 || att[0].ID != "forgotten" || att[0].Why != "stuck in sending" {
			t.Fatalf("attention = %+v, want only the delivery no engine has worked for three hours", att)
		}
	})
}
