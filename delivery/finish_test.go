package delivery_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// blipStore fails Updates while failing > 0 (a Postgres failover of a couple of seconds).
type blipStore struct {
	store.Store
	failing atomic.Int32
}

func (b *blipStore) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if b.failing.Load() > 0 {
		b.failing.Add(-1)
		return errors.New("connection refused (failover)")
	}
	return b.Store.Update(ctx, fn)
}

// A provider call that succeeded while the store was away for a few seconds (a failover) is
// recorded delivered once the store is back, not left to recovery, which would find it ambiguous.
func TestAReceiptSurvivesAStoreAwayForSeconds(t *testing.T) {
	s := &blipStore{Store: storetest.OpenSQLite(t)}
	c := newClock()
	p := newProvider(c)
	p.afterPost = func() { s.failing.Store(5) } // away for the next 5 Updates: past the 5 tries that were all a finish made
	e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Ambiguous}, c)
	rec := mustDeliver(t, e, request("t-1", "the answer"))
	t.Logf("after the call: %s", rec.State)
	c.Advance(2 * time.Minute) // the lease runs out; recovery
	if _, err := e.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ := e.Get(context.Background(), rec.Principal, rec.ID)
	t.Logf("after recovery: %s provider=%q last error %q; provider has %d post(s) with id %q", got.State, got.ProviderID,
		got.LastError, len(p.allPosts()), p.allPosts()[0].ProviderID)
	if got.State != delivery.StateDelivered {
		t.Fatalf("a delivery whose receipt the engine held is %s", got.State)
	}
}
