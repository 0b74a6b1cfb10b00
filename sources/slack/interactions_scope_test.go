package slack_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/channels-dev/channels/sources"
	slacksrc "github.com/channels-dev/channels/sources/slack"
	"github.com/channels-dev/channels/sources/sourcetest"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

func (a *app) list(p string) []store.Task {
	a.t.Helper()
	tasks, _, err := a.plane.Store().ListTasks(context.Background(), p, store.TaskFilter{})
	if err != nil {
		a.t.Fatal(err)
	}
	return tasks
}

// askAs makes principal p's only task wait on question q and posts it through p's instance,
// recording the reply anchor as the delivery engine does; it returns the task and the anchor.
func (a *app) askAs(p string, q taskplane.Message) (*taskplane.Task, string) {
	a.t.Helper()
	ctx := context.Background()
	tasks := a.list(p)
	if len(tasks) != 1 {
		a.t.Fatalf("%s has %d tasks", p, len(tasks))
	}
	task, err := a.plane.Apply(ctx, p, tasks[0].ID, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateInputRequired, Message: &q})
	if err != nil {
		a.t.Fatal(err)
	}
	rc, err := a.srcs[p].(sources.Sender).Send(ctx, sources.Delivery{ID: "d-" + p + q.ID, Principal: p, TaskID: task.ID,
		ContextID: task.ContextID, Operation: slacksrc.OpQuestion, State: task.Status.State, Locator: task.Origin.Locator, Message: q})
	if err != nil {
		a.t.Fatal(err)
	}
	if err := a.plane.RecordAnchor(ctx, p, slacksrc.Name, rc.ProviderID, task.ID); err != nil {
		a.t.Fatal(err)
	}
	return task, rc.ProviderID
}

func (a *app) state(p, id string) taskplane.State {
	a.t.Helper()
	for _, t := range a.list(p) {
		if t.ID == id {
			return taskplane.State(t.State)
		}
	}
	a.t.Fatalf("no task %s of %s", id, p)
	return ""
}

func cut(anchor string) (string, string) {
	for i := range anchor {
		if anchor[i] == ':' {
			return anchor[:i], anchor[i+1:]
		}
	}
	return anchor, ""
}

// bobsClick is a click, by a user of the second workspace, on the second installation's question
// (channel, ts), as Slack sends it: the team, the user's team, and the message its bot posted.
func bobsClick(channel, ts, root, trigger string) obj {
	c := blockAction(channel, ts, root, trigger, "channels_choice:0", `{"v":"prod"}`)
	c["team"], c["user"] = obj{"id": "T0SECOND", "domain": "second"}, obj{"id": "U0BOBHUMAN", "team_id": "T0SECOND"}
	c["message"].(obj)["user"], c["message"].(obj)["bot_id"] = "U0BOT2", "B0BOT2"
	return c
}

func bobsDialog(channel, ts, root, trigger, botID string) obj {
	ref, _ := json.Marshal(map[string]string{"c": channel, "ts": ts, "th": root})
	v := viewSubmission(trigger, string(ref), "from bob's workspace")
	v["team"], v["user"] = obj{"id": "T0SECOND", "domain": "second"}, obj{"id": "U0BOBHUMAN", "team_id": "T0SECOND"}
	if botID != "" {
		v["view"].(obj)["bot_id"], v["view"].(obj)["app_id"] = botID, "A0APP"
		v["view"].(obj)["team_id"], v["view"].(obj)["app_installed_team_id"] = "T0SECOND", "T0SECOND"
	}
	return v
}

func setupTwo(t *testing.T, mode string) (*app, *workspace, *workspace, *taskplane.Task, string, *taskplane.Task, string) {
	w1, w2 := newWorkspace(t), second(t)
	a := twoInstallations(t, mode, w1, w2)
	if got := a.deliver(w1, "alice", callback("Ev-a", mention("ops", "Ev-a", "deploy"))); got != sourcetest.Acked {
		t.Fatal(got)
	}
	if got := a.deliver(w1, "alice", forSecond(callback("Ev-b", mention("ops-b", "Ev-b", "deploy")), "T0SECOND")); got != sourcetest.Acked {
		t.Fatal(got)
	}
	q := taskplane.Message{ID: "q", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("which env?")}}
	at, aAnchor := a.askAs("alice", q)
	bt, bAnchor := a.askAs("bob", q)
	return a, w1, w2, at, aAnchor, bt, bAnchor
}

// Payloads Slack sends for the second installation's question, received by the first instance
// (the app's one interactivity URL, or the Socket Mode connection Slack picked): routed to bob.
func TestAnotherInstallationsClicksAndDialogsGoToItsInstance(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		a, w1, _, at, _, bt, bAnchor := setupTwo(t, mode)
		ch, ts := cut(bAnchor)
		if got := a.deliverInteractive(w1, "alice", bobsClick(ch, ts, rootOf("ops-b"), "trig-b1")); got != sourcetest.Acked {
			t.Fatalf("bob's click at alice's instance: %s", got)
		}
		if s := a.state("bob", bt.ID); s != taskplane.StateSubmitted {
			t.Errorf("bob's waiting task is %s after his click, want submitted", s)
		}
		if n := len(a.list("alice")); n != 1 || a.state("alice", at.ID) != taskplane.StateInputRequired {
			t.Errorf("alice has %d tasks, waiting one %s", n, a.state("alice", at.ID))
		}
		// bob's dialog as Slack sends it (view.bot_id of the bot that opened it).
		if got := a.deliverInteractive(w1, "alice", bobsDialog(ch, ts, rootOf("ops-b"), "trig-b2", "B0BOT2")); got != sourcetest.Acked {
			t.Fatalf("bob's dialog at alice's instance: %s", got)
		}
		if n, b := len(a.list("alice")), len(a.list("bob")); n != 1 || b != 2 {
			t.Errorf("after bob's dialog: alice %d tasks, bob %d; want 1 and 2", n, b)
		}
	})
}

// A payload of the second workspace that names no bot (a dialog without view.bot_id; a click on
// an ephemeral message, without message) is decided by the installation it names, not taken by
// whichever instance receives it.
func TestAnInteractionNamingNoBotIsDecidedByItsTeam(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		a, w1, _, at, _, bt, bAnchor := setupTwo(t, mode)
		ch, ts := cut(bAnchor)
		a.deliverInteractive(w1, "alice", bobsDialog(ch, ts, rootOf("ops-b"), "trig-nb1", ""))
		eph := bobsClick(ch, ts, rootOf("ops-b"), "trig-nb2")
		delete(eph, "message")
		eph["container"].(obj)["is_ephemeral"] = true
		a.deliverInteractive(w1, "alice", eph)
		if n := len(a.list("alice")); n != 1 || a.state("alice", at.ID) != taskplane.StateInputRequired {
			t.Errorf("the second workspace's payloads that name no bot made alice %d task(s) (want 1, still waiting)", n)
		}
		if s := a.state("bob", bt.ID); s != taskplane.StateSubmitted {
			t.Errorf("bob's dialog answer left his task %s, want submitted", s)
		}
	})
}

// A user of the second workspace clicks the first installation's question in a shared channel:
// Slack names the posting installation's team (team.id), the user's own (user.team_id), and the
// first bot. It is the first principal's answer, by design (as events of its installation are).
func TestAClickOnOurQuestionInASharedChannelContinuesOurTask(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		a, _, w2, at, aAnchor, bt, _ := setupTwo(t, mode)
		ch, ts := cut(aAnchor)
		c := blockAction(ch, ts, rootOf("ops"), "trig-x", "channels_choice:0", `{"v":"prod"}`)
		c["user"] = obj{"id": "U0BOBHUMAN", "team_id": "T0SECOND"}
		// over the second installation's connection / bob's URL
		if got := a.deliverInteractive(w2, "bob", c); got != sourcetest.Acked {
			t.Fatal(got)
		}
		if s := a.state("alice", at.ID); s != taskplane.StateSubmitted {
			t.Errorf("alice's task %s", s)
		}
		if s := a.state("bob", bt.ID); s != taskplane.StateInputRequired || len(a.list("bob")) != 1 {
			t.Errorf("bob's task %s, %d tasks", s, len(a.list("bob")))
		}
	})
}
