package push_test

import (
	"context"
	"testing"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// A send that settles a finished task registers the webhook it carries, as any send does (it
// gets the task as it now stands), rather than accepting the send and dropping the config.
func TestASettlingSendRegistersItsPushConfig(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := context.Background()
		p := taskplane.New(open(t))
		task := acceptWithPush(t, p, "alice", "m1")
		apply(t, p, "alice", task.ID, working, completed)
		acc, err := p.Accept(ctx, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "m2", TaskID: task.ID,
			Message:     taskplane.Message{ID: "m2", TaskID: task.ID, Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("ok")}},
			Settlement:  &taskplane.Settlement{Outcome: "accepted"},
			PushConfigs: []taskplane.PushConfig{{ID: "h1", URL: "https://hooks.example.com/a2a"}}})
		if err != nil {
			t.Fatal(err)
		}
		page, err := p.ListPushConfigs(ctx, "alice", task.ID, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Configs) != 1 {
			t.Fatalf("send accepted (outcome %v) with a push config, but the task has %d configs", acc.Outcome, len(page.Configs))
		}
	})
}
