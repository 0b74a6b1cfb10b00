package slack_test

import (
	"encoding/json"
	"testing"

	slacksrc "github.com/channels-dev/channels/sources/slack"
)

// Slack fires app_mention again, with a fresh event_id, when a message that mentions the bot is
// edited (the event carries "edited", the same ts and client_msg_id). An edit is non-work, as
// message_changed is: the mention made its task when it was posted, and the edit makes none.
func TestAnEditedMentionMakesNoSecondTask(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		h := newHarness(t, mode, nil)
		orig := mention("ops", "Ev0ORIG", "deploy the api")
		orig["client_msg_id"] = "c0ffee-1"
		first := h.work("events", callback("Ev0ORIG", orig))
		edited := mention("ops", "Ev0ORIG", "deploy the api to staging") // same ts
		edited["client_msg_id"] = "c0ffee-1"
		edited["edited"] = obj{"user": human, "ts": "1750000099.000000"}
		h.tr.deliver(t, "events", callback("Ev0EDIT", edited), nil)
		if tasks := h.tasks(); len(tasks) != 1 {
			t.Fatalf("an edit of one mentioned message made %d tasks (first %s); want 1", len(tasks), first.Task.ID)
		}
	})
}

// A task made from Slack records the instance it came through, so a principal's answers go out
// through the right workspace when it has several Slack instances.
func TestATaskRecordsTheInstanceItCameThrough(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		h := newHarness(t, mode, nil)
		acc := h.work("events", callback("Ev0INST", mention("ops", "Ev0INST", "hello")))
		var loc slacksrc.Locator
		if err := json.Unmarshal(acc.Task.Origin.Locator, &loc); err != nil {
			t.Fatal(err)
		}
		if loc.Instance != "default" {
			t.Fatalf("the task's locator %s names instance %q, want default", acc.Task.Origin.Locator, loc.Instance)
		}
	})
}
