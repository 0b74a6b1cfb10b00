package push_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/channels-dev/channels/push"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// One notification id carries one body (docs/push.md: "Act on each id once"): a config registered
// after a change that adds no event (a settlement) gets a snapshot under another id than the one
// an earlier config got, so a receiver deduplicating by id still sees the new state.
func TestASnapshotsIDCarriesOneBody(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := context.Background()
		p := taskplane.New(open(t))
		rc := newReceiver(t, nil)
		n := push.New(p, fastOptions(push.Options{AllowPrivateNetworks: true}))
		task := acceptWithPush(t, p, "alice", "m1")
		apply(t, p, "alice", task.ID, working, completed)
		register := func(id string) {
			if _, err := p.SetPushConfig(ctx, "alice", task.ID, taskplane.PushConfig{ID: id, URL: rc.srv.URL}); err != nil {
				t.Fatal(err)
			}
			if _, err := n.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		register("a")
		if _, err := p.Settle(ctx, "alice", task.ID, taskplane.Settlement{Outcome: "accepted"}); err != nil {
			t.Fatal(err)
		}
		register("b")
		reqs, _ := rc.snapshot()
		if len(reqs) != 2 {
			t.Fatalf("%d requests", len(reqs))
		}
		if bytes.Equal(reqs[0].Body, reqs[1].Body) {
			t.Fatal("the settlement did not change the snapshot")
		}
		if reqs[0].ID == reqs[1].ID {
			t.Fatalf("id %s sent with two bodies:\n%s\n%s", reqs[0].ID, reqs[0].Body, reqs[1].Body)
		}
	})
}
