package push_test

import (
	"testing"
	"time"

	"github.com/channels-dev/channels/push"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// A config's next notification is prepared once the previous one settles, whoever sent it: the
// notifier's own attempt, or the delivery engine's loop that claimed it first. Nothing waits for
// the notifier's next look at the store (its poll, a minute here): a task's notifications follow
// one another as fast as the receiver takes them.
func TestANotificationSettledByTheEngineMovesItsConfigOn(t *testing.T) {
	p := taskplane.New(storetest.OpenSQLite(t))
	rc := newReceiver(t, nil)
	o := fastOptions(push.Options{AllowPrivateNetworks: true})
	o.Poll = time.Minute
	n := runNotifier(t, push.New(p, o))
	task := acceptWithPush(t, p, "alice", "m1", taskplane.PushConfig{ID: "h1", URL: "http://127.0.0.1:" + rc.port() + "/hook"})
	apply(t, p, "alice", task.ID, working, artifact, taskplane.SetStatus{State: taskplane.StateWorking,
		Message: &taskplane.Message{ID: "s2", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("still at it")}}}, completed)
	for range 20 { // several tasks' worth of races between the notifier and the engine's loop
		n.Registered("alice", task.ID)
	}
	rc.waitEffects(t, 5) // 20 s, against the minute the poll would take
}
