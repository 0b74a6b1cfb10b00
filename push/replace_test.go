package push_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/push"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// A config deleted (or replaced) and registered again under the same id, with a new URL and
// token: the old registration's pending notification must not go to the new receiver with the
// new receiver's secrets.
func TestAReplacedConfigsPendingNotificationNeverReachesTheNewReceiver(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		p := taskplane.New(open(t))
		old := newReceiver(t, func(string, int) int { return http.StatusServiceUnavailable })
		fresh := newReceiver(t, nil)
		n := push.New(p, fastOptions(push.Options{AllowPrivateNetworks: true}))
		task := acceptWithPush(t, p, "alice", "m1", taskplane.PushConfig{ID: "h1", URL: old.srv.URL, Token: "old-token"})
		if _, err := n.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		recs, _ := n.Engine().List(context.Background(), delivery.Filter{Principal: "alice", TaskID: task.ID})
		if len(recs) != 1 {
			t.Fatalf("%d deliveries", len(recs))
		}
		oldID := recs[0].ID
		if err := p.DeletePushConfig(context.Background(), "alice", task.ID, "h1"); err != nil {
			t.Fatal(err)
		}
		if _, err := p.SetPushConfig(context.Background(), "alice", task.ID,
			taskplane.PushConfig{ID: "h1", URL: fresh.srv.URL + "/new", Token: "new-token"}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// Only the engine runs (no new preparation): the old delivery's next attempt.
		go func() { _ = n.Engine().Run(ctx) }()
		rec, err := n.Engine().Wait(ctx, "alice", oldID)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("old delivery: %s %q", rec.State, rec.LastError)
		reqs, _ := fresh.snapshot()
		for _, r := range reqs {
			if r.Header.Get(push.HeaderDelivery) == oldID {
				t.Fatalf("old registration's notification %s (delivery %s, state %s) went to the new receiver with token %q",
					r.ID, oldID, rec.State, r.Header.Get(push.HeaderToken))
			}
		}
	})
}
