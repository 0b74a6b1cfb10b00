package slack_test

import (
	"testing"
	"time"

	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
)

// In a shared (Slack Connect) channel created by another workspace, Slack's event_callback
// carries that workspace's team_id, while the event was delivered for our installation (the
// case TestAnEventDeliveredForAnotherInstallationIsNotOursWhateverItsTeamID accepts). A second
// click on an answered question is "new work in the same context" (docs/sources/slack.md), i.e.
// in the context the thread's mention and replies share; and the deliveries of one channel share
// one rate lane.
func TestSharedChannelClickIsNewWorkInTheThreadsContext(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		timer := time.AfterFunc(60*time.Second, func() { panic("test timed out") })
		defer timer.Stop()

		h := newHarness(t, mode, nil)
		cb := callback("Ev-shared", mention("ops", "Ev-shared", "deploy"))
		cb["team_id"] = "T0HOSTWS" // the workspace that created the shared channel
		first := h.work("events", cb)

		q := taskplane.Message{ID: "q1", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("Which?")},
			Metadata: map[string]any{"https://channels.dev/a2a/ext/elicitation/v1": map[string]any{"requestedSchema": map[string]any{
				"type": "string", "enum": []any{"red", "blue"}}}}}
		_, posted := h.ask(first.Task.ID, q)
		buttons := buttonsOf(t, posted)

		ans := h.work("interactive", blockAction(channelOf("ops"), posted.TS, posted.ThreadTS, "trig-1", buttons[0].ActionID, buttons[0].Value))
		if ans.Outcome != taskplane.Continued {
			t.Fatalf("first click: %s", ans.Outcome)
		}
		// A plain thread reply is a new task in the thread's context.
		rc := callback("Ev-reply", threadReply("ops", "Ev-reply", "also this"))
		rc["team_id"] = "T0HOSTWS"
		reply := h.work("events", rc)
		if reply.ContextID != first.ContextID {
			t.Fatalf("thread reply in context %s, want %s", reply.ContextID, first.ContextID)
		}
		// A second click on the answered question: new work in the same context.
		again := h.work("interactive", blockAction(channelOf("ops"), posted.TS, posted.ThreadTS, "trig-2", buttons[1].ActionID, buttons[1].Value))
		if again.Outcome != taskplane.Created || again.ContextID != first.ContextID {
			t.Errorf("second click: %s in context %s, want created in the thread's context %s", again.Outcome, again.ContextID, first.ContextID)
		}
		laner := h.src.(sources.Laner)
		l1 := laner.Lane(sources.Delivery{Locator: h.task(first.Task.ID).Origin.Locator})
		l2 := laner.Lane(sources.Delivery{Locator: h.task(again.Task.ID).Origin.Locator})
		if l1 != l2 {
			t.Errorf("answers into one channel go through two rate lanes: %q and %q", l1, l2)
		}
	})
}
