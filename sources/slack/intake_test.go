package slack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/channels-dev/channels/sources"
	slacksrc "github.com/channels-dev/channels/sources/slack"
	"github.com/channels-dev/channels/sources/sourcetest"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

func mustUnmarshal(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

func text(m taskplane.Message) string {
	var out []string
	for _, p := range m.Parts {
		if p.Text != "" {
			out = append(out, p.Text)
		}
	}
	return strings.Join(out, "\n")
}

func TestSlackRefusesUnsignedRequestsWithEvidence(t *testing.T) {
	h := newHarness(t, slacksrc.ModeEvents, nil)
	d := h.tr.(*eventsDriver)
	good := body("events", callback("Ev1", mention("ops", "Ev1", "deploy")))
	now := time.Now()
	for _, tc := range []struct {
		name     string
		endpoint string
		body     []byte
		secret   string
		ts       time.Time
		header   http.Header
		code     int
		kind     string
		reason   string
		count    int64
	}{
		{"bad signature", "events", good, "another-signing-secret", now, nil, 401, "rejected", "bad-signature", 1},
		{"tampered body", "events", bytes.Replace(good, []byte("deploy"), []byte("delete"), 1), "", now,
			http.Header{"X-Slack-Request-Timestamp": {itoa(now)}, "X-Slack-Signature": {sign(signing, now, good)}}, 401, "rejected", "bad-signature", 2},
		{"stale timestamp", "events", good, signing, now.Add(-6 * time.Minute), nil, 401, "rejected", "stale-timestamp", 1},
		{"future timestamp", "events", good, signing, now.Add(6 * time.Minute), nil, 401, "rejected", "stale-timestamp", 2},
		{"missing headers", "events", good, "", now, nil, 401, "rejected", "unsigned", 1},
		{"missing signature", "events", good, "", now, http.Header{"X-Slack-Request-Timestamp": {itoa(now)}}, 401, "rejected", "unsigned", 2},
		{"signature without v0=", "events", good, "", now,
			http.Header{"X-Slack-Request-Timestamp": {itoa(now)}, "X-Slack-Signature": {strings.TrimPrefix(sign(signing, now, good), "v0=")}}, 401, "rejected", "bad-signature", 3},
		{"timestamp not a number", "events", good, "", now,
			http.Header{"X-Slack-Request-Timestamp": {"yesterday"}, "X-Slack-Signature": {sign(signing, now, good)}}, 401, "rejected", "bad-timestamp", 1},
		{"interactive with a bad signature", "interactive", body("interactive", blockAction("C1", "1.2", "1.2", "tr1", "channels_choice:0", `{"v":"x"}`)),
			"another-signing-secret", now, nil, 401, "rejected", "bad-signature", 4},
		{"oversize", "events", append([]byte(`{"pad":"`), bytes.Repeat([]byte("x"), slacksrc.DefaultMaxBody)...), signing, now, nil, 413, "rejected", "oversize", 1},
		{"signed but not JSON", "events", []byte(`{"type": "event_callback", `), signing, now, nil, 200, "malformed-envelope", "invalid JSON", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := d.post(t, tc.endpoint, tc.body, tc.secret, tc.ts, tc.header)
			if code != tc.code {
				t.Fatalf("answer %d %q, want %d", code, msg, tc.code)
			}
			if got := h.counted(tc.kind)[tc.reason]; got != tc.count {
				t.Fatalf("%s evidence %q = %d, want %d", tc.kind, tc.reason, got, tc.count)
			}
		})
	}
	if n := len(h.tasks()); n != 0 {
		t.Fatalf("tasks = %d after refused requests, want 0", n)
	}
	if n := len(h.evidence(sources.EvidenceAccepted)); n != 0 {
		t.Fatalf("accepted evidence = %d, want 0", n)
	}
	// The endpoint check: a signed url_verification is answered with its challenge, an unsigned
	// one is refused.
	challenge := []byte(`{"token":"legacy","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
	if code, msg := d.post(t, "events", challenge, signing, time.Now(), nil); code != 200 || !strings.Contains(msg, `"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"`) {
		t.Fatalf("url_verification: %d %s", code, msg)
	}
	if code, _ := d.post(t, "events", challenge, "", time.Now(), nil); code != 401 {
		t.Fatalf("unsigned url_verification: %d, want 401", code)
	}
	// The same endpoint still accepts Slack's requests.
	h.work("events", callback("Ev1", mention("ops", "Ev1", "deploy")))
}

func itoa(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

func TestSlackRetryOfAnAcceptedEventReturnsThePriorTask(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		h := newHarness(t, mode, nil)
		ev := callback("Ev0RETRY", mention("ops", "Ev0RETRY", "deploy the api"))
		first := h.work("events", ev)
		if first.Outcome != taskplane.Created {
			t.Fatalf("first delivery: %s", first.Outcome)
		}
		retry := http.Header{"X-Slack-Retry-Num": {"1"}, "X-Slack-Retry-Reason": {"http_timeout"}}
		h.deliver("events", ev, sourcetest.Acked, retry)
		h.mu.Lock()
		again := h.accepted[len(h.accepted)-1]
		h.mu.Unlock()
		if again.Outcome != taskplane.Duplicate || again.Task.ID != first.Task.ID {
			t.Fatalf("retry: %s task %s, want duplicate of %s", again.Outcome, again.Task.ID, first.Task.ID)
		}
		// Slack's retry at 3 s fires while the first request may still run: concurrent copies
		// of one event make one Task.
		var wg sync.WaitGroup
		ev2 := callback("Ev0BURST", mention("ops", "Ev0BURST", "and the web"))
		for i := range 4 {
			wg.Go(func() {
				hd := http.Header{}
				if i > 0 {
					hd.Set("X-Slack-Retry-Num", "1")
				}
				if got := h.tr.deliver(t, "events", ev2, hd); got != sourcetest.Acked {
					t.Errorf("copy %d answered %s", i, got)
				}
			})
		}
		wg.Wait()
		if n := len(h.tasks()); n != 2 {
			t.Fatalf("tasks = %d, want 2 (one per event)", n)
		}
		if n := len(h.evidence(sources.EvidenceDuplicate)); n != 4 {
			t.Fatalf("duplicate evidence = %d, want 4", n)
		}
		// The task keeps what the mention said, without the mention itself.
		if got := text(h.task(first.Task.ID).History[0]); got != "deploy the api" {
			t.Fatalf("task text %q", got)
		}
	})
}

func TestSlackOwnMessageIsNeverATask(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		allowed := channelOf("ops")
		h := newHarness(t, mode, func(o map[string]any) { o["channels"] = []any{allowed, channelOf("dm")} })
		edit := threadReply("ops", "ev-edit", "typo")
		edit["subtype"], edit["message"] = "message_changed", obj{"text": "fixed", "ts": tsOf("x")}
		botMsg := ownMessage("ops", "ev-botmsg", "beep")
		botMsg["subtype"] = "bot_message"
		mentionByUs := mention("ops", "ev-self-mention", "loop?")
		mentionByUs["user"], mentionByUs["bot_id"] = botUser, botID
		other := ownMessage("ops", "ev-other", "I am another app")
		other["user"], other["bot_id"], other["subtype"] = "U0OTHERBOT", otherBot, "bot_message"
		otherAsUser := threadReply("ops", "ev-other-user", "I post as a user but am a bot")
		otherAsUser["bot_id"] = otherBot
		deleted := threadReply("ops", "ev-del", "")
		deleted["subtype"] = "message_deleted"
		join := threadReply("ops", "ev-join", "<@U0HUMAN> has joined the channel")
		join["subtype"] = "channel_join"
		topLevel := threadReply("ops", "ev-top", "lunch?")
		delete(topLevel, "thread_ts")
		withMention := threadReply("ops", "ev-msg-mention", "<@"+botUser+"> deploy")
		withLabelledMention := threadReply("ops", "ev-msg-labelled", "<@"+botUser+"|channels> deploy")
		for _, tc := range []struct {
			name   string
			inner  obj
			reason string
		}{
			{"our own message in the thread", ownMessage("ops", "ev-own", "on it"), "own-bot"},
			{"our own bot_message", botMsg, "own-bot"},
			{"a mention posted by us", mentionByUs, "own-bot"},
			{"another bot", other, "other-bot"},
			{"another bot posting as a user", otherAsUser, "other-bot"},
			{"an edit", edit, "edit"},
			{"a deletion", deleted, "delete"},
			{"a join message", join, "join"},
			{"member_joined_channel", obj{"type": "member_joined_channel", "user": human, "channel": allowed, "event_ts": "1.1"}, "join"},
			{"a mention outside the allow-list", mention("elsewhere", "ev-outside", "deploy"), "channel-not-allowed"},
			{"a top-level channel message", topLevel, "top-level-channel-message"},
			{"the message event of a mention", withMention, "mention-in-message"},
			{"the message event of a labelled mention", withLabelledMention, "mention-in-message"},
			{"a reaction", obj{"type": "reaction_added", "user": human, "reaction": "eyes", "item": obj{"type": "message", "channel": allowed, "ts": "1.1"}}, "event:reaction_added"},
			{"an event type nobody knows", obj{"type": "x_future_event", "channel": allowed}, "event:x_future_event"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				id := "Ev-" + strings.ReplaceAll(tc.name, " ", "-")
				before := h.counted(sources.EvidenceNonWork)[tc.reason]
				h.deliver("events", callback(id, tc.inner), sourcetest.Acked, nil)
				if got := h.counted(sources.EvidenceNonWork)[tc.reason]; got != before+1 {
					t.Fatalf("non-work %q = %d, want %d", tc.reason, got, before+1)
				}
			})
		}
		if n := len(h.tasks()); n != 0 {
			t.Fatalf("tasks = %d, want 0", n)
		}
		// The message Slack echoes after our reply, exactly as we posted it, is not a Task either.
		acc := h.work("events", callback("Ev-work", mention("ops", "Ev-work", "status?")))
		if _, err := h.src.(sources.Sender).Send(context.Background(), sources.Delivery{ID: "d-1", Principal: principal, TaskID: acc.Task.ID,
			Operation: slacksrc.OpReply, State: taskplane.StateCompleted, Locator: acc.Task.Origin.Locator,
			Message: taskplane.Message{ID: "a1", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("all green")}}}); err != nil {
			t.Fatal(err)
		}
		posted := h.w.posted(allowed)
		if len(posted) != 1 {
			t.Fatalf("posted %d messages, want 1", len(posted))
		}
		echo := obj{"type": "message", "channel": allowed, "channel_type": "channel", "ts": posted[0].TS, "thread_ts": posted[0].ThreadTS,
			"user": posted[0].User, "bot_id": posted[0].BotID, "text": posted[0].Text, "event_ts": posted[0].TS}
		h.deliver("events", callback("Ev-echo", echo), sourcetest.Acked, nil)
		if n := len(h.tasks()); n != 1 {
			t.Fatalf("tasks = %d after our reply was echoed, want 1", n)
		}
		// A direct message to the bot is work, also from a DM channel outside the allow-list.
		dm := obj{"type": "message", "channel": "D0DIRECT", "channel_type": "im", "user": human, "text": "hello", "ts": tsOf("dm1"), "event_ts": tsOf("dm1")}
		if acc := h.work("events", callback("Ev-dm", dm)); acc.Outcome != taskplane.Created {
			t.Fatalf("direct message: %s", acc.Outcome)
		}
	})
}

func TestSlackDirectMessagesCanBeTurnedOff(t *testing.T) {
	h := newHarness(t, slacksrc.ModeEvents, func(o map[string]any) { o["direct_messages"] = false; o["channel_messages"] = "none" })
	dm := obj{"type": "message", "channel": "D0DIRECT", "channel_type": "im", "user": human, "text": "hello", "ts": tsOf("dm1")}
	h.deliver("events", callback("Ev-dm", dm), sourcetest.Acked, nil)
	h.deliver("events", callback("Ev-reply", threadReply("ops", "r1", "plain reply")), sourcetest.Acked, nil)
	c := h.counted(sources.EvidenceNonWork)
	if c["direct-messages-off"] != 1 || c["channel-message"] != 1 || len(h.tasks()) != 0 {
		t.Fatalf("non-work %v, tasks %d", c, len(h.tasks()))
	}
	// A mention is still work.
	h.work("events", callback("Ev-m", mention("ops", "m1", "hi")))
}

func TestSlackButtonAnswerContinuesTheInputRequiredTask(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		h := newHarness(t, mode, nil)
		first := h.work("events", callback("Ev-deploy", mention("ops", "Ev-deploy", "deploy")))
		q := taskplane.Message{ID: "q1", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("Which **colour**?")},
			Metadata: map[string]any{"https://channels.dev/a2a/ext/elicitation/v1": map[string]any{"requestedSchema": map[string]any{
				"type": "object", "properties": map[string]any{"colour": map[string]any{"type": "string", "enum": []any{"red", "blue"}}}}}}}
		rc, posted := h.ask(first.Task.ID, q)
		if posted.ThreadTS != rootOf("ops") {
			t.Fatalf("question posted in thread %q, want %q", posted.ThreadTS, rootOf("ops"))
		}
		buttons := buttonsOf(t, posted)
		if len(buttons) != 3 || buttons[0].Text.Text != "red" || buttons[1].Text.Text != "blue" || buttons[2].ActionID != "channels_answer" {
			t.Fatalf("buttons %+v, want red, blue, Answer", buttons)
		}
		// A click on "blue", as Slack sends it: the button's own action id and value, and the
		// message it sits on.
		click := blockAction(channelOf("ops"), posted.TS, posted.ThreadTS, "trig-blue", buttons[1].ActionID, buttons[1].Value)
		acc := h.work("interactive", click)
		if acc.Outcome != taskplane.Continued || acc.Task.ID != first.Task.ID {
			t.Fatalf("button answer: %s task %s, want continued %s (anchor %s)", acc.Outcome, acc.Task.ID, first.Task.ID, rc.ProviderID)
		}
		task := h.task(first.Task.ID)
		last := task.History[len(task.History)-1]
		if task.Status.State != taskplane.StateSubmitted || text(last) != "blue" || len(last.Parts) != 2 || string(last.Parts[1].Data) != `{"colour":"blue"}` {
			t.Fatalf("continued task: %s, last message %+v", task.Status.State, last)
		}
		// A second click on the answered question is new work in the same context.
		again := h.work("interactive", blockAction(channelOf("ops"), posted.TS, posted.ThreadTS, "trig-red", buttons[0].ActionID, buttons[0].Value))
		if again.Outcome != taskplane.Created || again.ContextID != first.ContextID {
			t.Fatalf("second click: %s in %s", again.Outcome, again.ContextID)
		}

		// The Answer button opens a dialog; its submission names the question and continues.
		q2 := taskplane.Message{ID: "q2", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("Anything else?")}}
		_, posted2 := h.ask(first.Task.ID, q2)
		b2 := buttonsOf(t, posted2)
		if len(b2) != 1 || b2[0].ActionID != "channels_answer" {
			t.Fatalf("buttons of a question without a schema: %+v", b2)
		}
		accepted := h.acceptances()
		h.deliver("interactive", blockAction(channelOf("ops"), posted2.TS, posted2.ThreadTS, "trig-open", "channels_answer", "answer"), sourcetest.Acked, nil)
		if h.acceptances() != accepted {
			t.Fatal("opening the answer dialog was accepted as work")
		}
		views := h.w.openedViews()
		if len(views) != 1 || views[0].TriggerID != "trig-open" {
			t.Fatalf("views.open calls %+v", views)
		}
		var v struct {
			CallbackID      string `json:"callback_id"`
			PrivateMetadata string `json:"private_metadata"`
		}
		mustUnmarshal(t, views[0].View, &v)
		acc2 := h.work("interactive", viewSubmission("trig-submit", v.PrivateMetadata, "  ship it  "))
		if acc2.Outcome != taskplane.Continued || acc2.Task.ID != first.Task.ID || text(acc2.Task.History[len(acc2.Task.History)-1]) != "ship it" {
			t.Fatalf("dialog answer: %s task %s", acc2.Outcome, acc2.Task.ID)
		}
		if c := h.counted(sources.EvidenceNonWork); c["answer-dialog-opened"] != 1 {
			t.Fatalf("non-work %v, want one answer-dialog-opened", c)
		}
	})
}

type button struct {
	ActionID string `json:"action_id"`
	Value    string `json:"value"`
	Text     struct {
		Text string `json:"text"`
	} `json:"text"`
}

// buttonsOf returns the buttons of a posted message's actions block.
func buttonsOf(t testing.TB, m message) []button {
	t.Helper()
	var blocks []struct {
		Type     string   `json:"type"`
		Elements []button `json:"elements"`
	}
	mustUnmarshal(t, m.Blocks, &blocks)
	for _, b := range blocks {
		if b.Type == "actions" {
			return b.Elements
		}
	}
	return nil
}

func TestSlackPlainThreadReplyIsANewTaskInTheSameContext(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		h := newHarness(t, mode, nil)
		first := h.work("events", callback("Ev-1", mention("ops", "Ev-1", "deploy")))
		h.ask(first.Task.ID, taskplane.Message{ID: "q1", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("which env?")}})
		reply := h.work("events", callback("Ev-2", threadReply("ops", "Ev-2", "prod")))
		if reply.Outcome != taskplane.Created || reply.Task.ID == first.Task.ID || reply.ContextID != first.ContextID {
			t.Fatalf("thread reply: %s task %s context %s, want a new task in %s", reply.Outcome, reply.Task.ID, reply.ContextID, first.ContextID)
		}
		if st := h.task(first.Task.ID).Status.State; st != taskplane.StateInputRequired {
			t.Fatalf("the waiting task is %s, want still input-required", st)
		}
		// Another thread of the same channel is another context.
		other := h.work("events", callback("Ev-3", mention("ops-2", "Ev-3", "and this")))
		if other.ContextID == first.ContextID {
			t.Fatal("another thread shares the context")
		}
	})
}

func TestSlackSocketModeReconnectsOnDisconnect(t *testing.T) {
	h := newHarness(t, slacksrc.ModeSocket, nil)
	h.work("events", callback("Ev-1", mention("ops", "Ev-1", "one")))
	h.w.ws.disconnect()
	// The client opens a new connection (apps.connections.open again) and carries on.
	h.work("events", callback("Ev-2", mention("ops", "Ev-2", "two")))
	if n := h.w.ws.opens.Load(); n != 2 {
		t.Fatalf("connections = %d, want 2", n)
	}
	h.waitHealthy()
	if n := len(h.tasks()); n != 2 {
		t.Fatalf("tasks = %d, want 2", n)
	}
}

// The socket client queues acks for its live connection only (20 of them). When it stops for
// good (Slack refuses the app token on reconnect) while more acceptances than that finish, their
// acks must not wait forever, nor must the loop that hands envelopes to handlers once all of them
// (32) are stuck: Run returns the client's error, and the envelopes are redelivered.
func TestSlackSocketModeRunEndsWhenTheClientStopsWithAcksPending(t *testing.T) {
	w := newWorkspace(t)
	d := newSocketDriver(t, w)
	plane := taskplane.New(storetest.OpenSQLite(t))
	sink, err := sources.NewSink(plane, slacksrc.Name)
	if err != nil {
		t.Fatal(err)
	}
	src := d.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sources.Run(ctx, src, sink) }()
	h := &harness{t: t, src: src}
	h.waitHealthy()
	// Hold the store's one writer, so every acceptance waits.
	release, held := make(chan struct{}), make(chan struct{})
	go func() {
		_ = plane.Store().Update(context.Background(), func(context.Context, store.Tx) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	for i := range 150 {
		id := fmt.Sprintf("Ev-ack-%d", i)
		w.ws.send("events_api", callback(id, mention("ops", id, "x")), 0)
	}
	time.Sleep(300 * time.Millisecond) // the envelopes reach their handlers, which wait to accept
	w.refuseApp.Store(true)
	_ = w.ws.conn().c.Close() // the connection dies and the reconnect is refused
	time.Sleep(300 * time.Millisecond)
	close(release)
	select {
	case err := <-done:
		if err == nil {
			t.Error("Run returned no error after Slack refused the app token")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20 s of the socket client stopping for good")
	}
}

func TestSlackSocketModeRecordsAndAcksMalformedEnvelopes(t *testing.T) {
	h := newHarness(t, slacksrc.ModeSocket, nil)
	// A payload that is not an object, and interactive payloads without what they answer.
	h.deliver("events", obj{"raw": json.RawMessage(`"garbage"`)}, sourcetest.Acked, nil)
	h.deliver("interactive", obj{"raw": json.RawMessage(`[1,2]`)}, sourcetest.Acked, nil)
	noContainer := blockAction("", "", "", "trig-x", "channels_choice:0", `{"v":"x"}`)
	delete(noContainer, "container")
	delete(noContainer, "message")
	h.deliver("interactive", noContainer, sourcetest.Acked, nil)
	h.deliver("interactive", viewSubmission("trig-y", "not json", "an answer"), sourcetest.Acked, nil)
	c := h.counted(sources.EvidenceMalformed)
	want := map[string]int64{"invalid JSON": 1, "invalid interactive payload": 1,
		"block_actions without the message it answers": 1, "answer dialog without the message it answers": 1}
	for k, n := range want {
		if c[k] != n {
			t.Errorf("malformed %q = %d, want %d (all: %v)", k, c[k], n, c)
		}
	}
	// Slash commands and other interactions are counted, not tasked.
	h.deliver("interactive", obj{"type": "shortcut", "team": obj{"id": team}, "trigger_id": "t"}, sourcetest.Acked, nil)
	if c := h.counted(sources.EvidenceNonWork); c["interactive:shortcut"] != 1 {
		t.Fatalf("non-work %v", c)
	}
	if n := len(h.tasks()); n != 0 {
		t.Fatalf("tasks = %d, want 0", n)
	}
}

// One Slack app installed in several workspaces has one Events request URL and spreads Socket
// Mode envelopes over all its connections: an instance sees the other workspaces' events too.
// They are not its principal's work; an event of a shared channel, delivered for our
// installation, is.
func TestSlackEventsOfAnotherWorkspaceAreNotWork(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		h := newHarness(t, mode, nil)
		foreign := callback("Ev-foreign", mention("ops", "Ev-foreign", "leak me"))
		foreign["team_id"] = "T0SOMEONEELSE"
		foreign["authorizations"] = []obj{{"team_id": "T0SOMEONEELSE", "user_id": "U0OTHERBOT", "is_bot": true}}
		// A click on a question the app's installation in another workspace posted (its own bot user).
		click := blockAction(channelOf("ops"), tsOf("q"), rootOf("ops"), "trig-foreign", "channels_choice:0", `{"v":"prod"}`)
		click["team"], click["user"] = obj{"id": "T0SOMEONEELSE"}, obj{"id": "U0STRANGER", "team_id": "T0SOMEONEELSE"}
		click["message"].(obj)["user"], click["message"].(obj)["bot_id"] = "U0OTHERBOT", "B0OTHERBOT"
		before := h.counted(sources.EvidenceNonWork)["foreign-workspace"]
		h.deliver("events", foreign, sourcetest.Acked, nil)
		h.deliver("interactive", click, sourcetest.Acked, nil)
		if got := h.counted(sources.EvidenceNonWork)["foreign-workspace"]; got != before+2 {
			t.Errorf("non-work foreign-workspace = %d, want %d", got, before+2)
		}
		if n := len(h.tasks()); n != 0 {
			t.Fatalf("another workspace's event and click made %d tasks of principal %q", n, principal)
		}
		// A shared channel: the event names the workspace it happened in, and our installation
		// among those it was delivered for.
		shared := callback("Ev-shared", mention("ops", "Ev-shared", "deploy"))
		shared["team_id"] = "T0SOMEONEELSE"
		if acc := h.work("events", shared); acc.Outcome != taskplane.Created {
			t.Fatalf("an event of a shared channel delivered for our installation: %s", acc.Outcome)
		}
	})
}

// A question whose only part is its requestedSchema (an agent using the elicitation schema as
// a data part) is still asked: a short prompt carries its choice buttons.
func TestSlackQuestionWithOnlyASchemaIsAskedWithItsButtons(t *testing.T) {
	h := newHarness(t, slacksrc.ModeEvents, nil)
	first := h.work("events", callback("Ev-schema", mention("ops", "Ev-schema", "deploy")))
	schema, _ := json.Marshal(map[string]any{"requestedSchema": map[string]any{"type": "string", "enum": []any{"staging", "prod"}}})
	q := taskplane.Message{ID: "q-schema", Role: taskplane.RoleAgent, Parts: []taskplane.Part{{Data: schema, MediaType: "application/json"}}}
	_, posted := h.ask(first.Task.ID, q)
	if posted.Text == "" || strings.Contains(posted.Text, "requestedSchema") {
		t.Errorf("question text %q", posted.Text)
	}
	if b := buttonsOf(t, posted); len(b) != 3 || b[0].Text.Text != "staging" || b[1].Text.Text != "prod" || b[2].ActionID != "channels_answer" {
		t.Errorf("buttons %+v, want staging, prod, Answer", b)
	}
}

// Slack refuses a button whose text is empty or longer than 75 characters (the workspace fake
// answers invalid_blocks, as Slack does): an empty enum value gets a visible label, a long one a
// shortened label, and each button still carries its exact value.
func TestChoiceButtonsKeepSlacksLimitsAndTheirExactValues(t *testing.T) {
	h := newHarness(t, slacksrc.ModeEvents, nil)
	acc := h.work("events", callback("Ev-e", mention("ops", "Ev-e", "deploy")))
	long := strings.Repeat("z", 100)
	enum := []any{"", "v1", long, " "}
	q := taskplane.Message{ID: "q-e", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("Which tag?")},
		Metadata: map[string]any{"x": map[string]any{"requestedSchema": map[string]any{"type": "string", "enum": enum}}}}
	_, posted := h.ask(acc.Task.ID, q) // fails the test if Slack refused the blocks
	b := buttonsOf(t, posted)
	if len(b) != len(enum)+1 {
		t.Fatalf("%d buttons, want one per value and Answer", len(b))
	}
	if b[0].Text.Text != `""` || b[1].Text.Text != "v1" || b[3].Text.Text != `" "` {
		t.Errorf("labels %q, %q, %q, want \"\", v1, \" \"", b[0].Text.Text, b[1].Text.Text, b[3].Text.Text)
	}
	if n := utf8.RuneCountInString(b[2].Text.Text); n != 75 || !strings.HasSuffix(b[2].Text.Text, "…") {
		t.Errorf("a 100-character value is labelled %q (%d characters), want 75 ending in …", b[2].Text.Text, n)
	}
	for i, v := range enum {
		var got struct {
			V any `json:"v"`
		}
		mustUnmarshal(t, json.RawMessage(b[i].Value), &got)
		if got.V != v {
			t.Errorf("button %d carries %q, want %q", i, got.V, v)
		}
	}
}

// A button's value holds at most 2000 characters: a question with an enum value longer than a
// button carries is posted with the Answer button alone, not refused by Slack (it would wait
// forever), so the answer is typed into the dialog.
func TestAValueTooLongForAButtonLeavesTheAnswerDialogAlone(t *testing.T) {
	h := newHarness(t, slacksrc.ModeEvents, nil)
	acc := h.work("events", callback("Ev-e", mention("ops", "Ev-e", "deploy")))
	q := taskplane.Message{ID: "q-e", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("Which tag?")},
		Metadata: map[string]any{"x": map[string]any{"requestedSchema": map[string]any{"type": "string",
			"enum": []any{"v1", strings.Repeat("z", 2100)}}}}}
	_, posted := h.ask(acc.Task.ID, q) // fails the test if Slack refused the blocks
	if b := buttonsOf(t, posted); len(b) != 1 || b[0].ActionID != "channels_answer" {
		t.Errorf("buttons %+v, want the Answer button alone", b)
	}
}

// app runs instances of one Slack app (one signing secret, one app token) installed in several
// workspaces, each for its own principal through a Sink fixed to it, over one task plane. In
// Events API mode every instance's endpoints are mounted on one server; in Socket Mode each
// instance connects to its workspace's fake.
type app struct {
	t       *testing.T
	mode    string
	plane   *taskplane.Plane
	mux     *http.ServeMux
	srv     *httptest.Server
	ctx     context.Context
	runs    *sync.WaitGroup
	srcs    map[string]sources.Source // by principal
	settled sync.Map                  // principal/envelope id → chan bool (Socket Mode)
}

func newApp(t *testing.T, mode string) *app {
	a := &app{t: t, mode: mode, plane: taskplane.New(storetest.OpenSQLite(t)), mux: http.NewServeMux(),
		runs: &sync.WaitGroup{}, srcs: map[string]sources.Source{}}
	a.srv = httptest.NewServer(a.mux)
	ctx, cancel := context.WithCancel(context.Background())
	a.ctx = ctx
	t.Cleanup(func() { cancel(); a.runs.Wait(); a.srv.Close() })
	return a
}

func (a *app) settledCh(principal, id string) chan bool {
	ch, _ := a.settled.LoadOrStore(principal+"/"+id, make(chan bool, 1))
	return ch.(chan bool)
}

// start runs an instance against w for principal; it does not wait for it to be healthy.
func (a *app) start(w *workspace, instance, principal string) sources.Source {
	a.t.Helper()
	src, err := sources.New(slacksrc.Name, sources.Config{Instance: instance, Principal: principal, Options: options(a.t, w, a.mode)})
	if err != nil {
		a.t.Fatal(err)
	}
	sink, err := sources.NewSink(a.plane, slacksrc.Name, sources.ForPrincipal(principal))
	if err != nil {
		a.t.Fatal(err)
	}
	if ep, ok := src.(sources.Endpoint); ok {
		a.mux.Handle(ep.Pattern(), ep)
	} else {
		slacksrc.OnSettle(src, func(id string, acked bool) { a.settledCh(principal, id) <- acked })
	}
	a.runs.Go(func() { _ = sources.Run(a.ctx, src, sink) })
	a.srcs[principal] = src
	return src
}

// healthy waits until principal's instance is healthy.
func (a *app) healthy(principal string) { (&harness{t: a.t, src: a.srcs[principal]}).waitHealthy() }

// deliver hands the event ev to the instance of principal the way Slack does in the app's mode:
// a signed POST to its events URL, or an envelope over its workspace w's connection.
func (a *app) deliver(w *workspace, principal string, ev obj) sourcetest.Ack {
	a.t.Helper()
	return a.deliverAs("events", "events_api", w, principal, ev)
}

// deliverInteractive hands an interactive payload (a click, a dialog) to the instance of
// principal the same way, at its interactive URL.
func (a *app) deliverInteractive(w *workspace, principal string, ev obj) sourcetest.Ack {
	a.t.Helper()
	return a.deliverAs("interactive", "interactive", w, principal, ev)
}

// deliverAs delivers ev as a kind ("events", "interactive") request, or as an envelope of
// envelopeType in Socket Mode.
func (a *app) deliverAs(kind, envelopeType string, w *workspace, principal string, ev obj) sourcetest.Ack {
	a.t.Helper()
	if a.mode == slacksrc.ModeEvents {
		path := "/sources/slack/" + kind
		if principal != "alice" {
			path = "/sources/slack/second/" + kind
		}
		b, now := body(kind, ev), time.Now()
		req, _ := http.NewRequest(http.MethodPost, a.srv.URL+path, bytes.NewReader(b))
		req.Header.Set("X-Slack-Request-Timestamp", itoa(now))
		req.Header.Set("X-Slack-Signature", sign(signing, now, b))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			a.t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode / 100 {
		case 2:
			return sourcetest.Acked
		case 4:
			return sourcetest.Refused
		}
		return sourcetest.Unacked
	}
	id, acked := w.ws.send(envelopeType, ev, 0)
	select {
	case <-acked:
		return sourcetest.Acked
	case ok := <-a.settledCh(principal, id):
		if ok {
			select {
			case <-acked:
				return sourcetest.Acked
			case <-time.After(10 * time.Second):
				a.t.Fatalf("envelope %s was settled but never acknowledged", id)
			}
		}
	case <-time.After(10 * time.Second):
		a.t.Fatalf("envelope %s was not handled within 10s", id)
	}
	select {
	case <-acked:
		a.t.Errorf("envelope %s was acked although the source did not settle it", id)
	case <-time.After(100 * time.Millisecond):
	}
	return sourcetest.Unacked
}

func (a *app) tasks(principal string) int {
	a.t.Helper()
	tasks, _, err := a.plane.Store().ListTasks(context.Background(), principal, store.TaskFilter{})
	if err != nil {
		a.t.Fatal(err)
	}
	return len(tasks)
}

// twoInstallations runs w1's installation for alice and w2's for bob as two instances of one
// app, both identified.
func twoInstallations(t *testing.T, mode string, w1, w2 *workspace) *app {
	a := newApp(t, mode)
	a.start(w1, "default", "alice")
	a.start(w2, "second", "bob")
	a.healthy("alice")
	a.healthy("bob")
	return a
}

// forSecond makes ev an event of workspace teamID delivered for the second installation.
func forSecond(ev obj, teamID string) obj {
	ev["team_id"] = teamID
	ev["authorizations"] = []obj{{"team_id": "T0SECOND", "user_id": "U0BOT2", "is_bot": true}}
	return ev
}

// second is another workspace, with its own installation (bot) of the app.
func second(t *testing.T) *workspace {
	w := newWorkspace(t)
	w.teamID, w.userID, w.botIDv = "T0SECOND", "U0BOT2", "B0BOT2"
	return w
}

// Two instances of one Slack app (one signing secret, one app token), installed in two
// workspaces for two principals: the envelope of the second workspace that reaches the first
// instance — Slack's one request URL, or the Socket Mode connection it picked — is the second
// instance's work, under its principal, and is acknowledged; the first principal gets nothing.
func TestAnotherInstanceOfTheAppGetsItsWorkspacesEnvelopes(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		w1, w2 := newWorkspace(t), second(t)
		a := twoInstallations(t, mode, w1, w2)
		ev := forSecond(callback("Ev-second", mention("ops", "Ev-second", "deploy")), "T0SECOND")
		if got := a.deliver(w1, "alice", ev); got != sourcetest.Acked {
			t.Fatalf("the second workspace's event at the first instance: %s", got)
		}
		if b, al := a.tasks("bob"), a.tasks("alice"); b != 1 || al != 0 {
			t.Errorf("bob has %d tasks, alice %d; want 1 and 0", b, al)
		}
	})
}

// In a shared channel Slack's team_id is the workspace that created the channel; the
// installation an event was delivered for is its authorization. An event delivered for another
// installation of the app, in a channel our workspace created, is not our principal's work.
func TestAnEventDeliveredForAnotherInstallationIsNotOursWhateverItsTeamID(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		h := newHarness(t, mode, nil)
		// The channel was created in our workspace.
		ev := forSecond(callback("Ev-theirs", mention("ops", "Ev-theirs", "leak me")), team)
		before := h.counted(sources.EvidenceNonWork)["foreign-workspace"]
		h.deliver("events", ev, sourcetest.Acked, nil)
		if n := len(h.tasks()); n != 0 {
			t.Fatalf("an event delivered for another installation made %d task(s) of principal %q", n, principal)
		}
		if got := h.counted(sources.EvidenceNonWork)["foreign-workspace"]; got != before+1 {
			t.Errorf("non-work foreign-workspace = %d, want %d", got, before+1)
		}
	})
}

// One event of a channel both installations of the app are in (team_id of the first workspace,
// delivered for the second installation) may reach the app over either Socket Mode connection,
// and again over the other: it is the second installation's task, once, whichever instance
// receives it first.
func TestASharedChannelEventIsAcceptedOnceWhicheverConnectionCarriesIt(t *testing.T) {
	w1, w2 := newWorkspace(t), second(t)
	a := twoInstallations(t, slacksrc.ModeSocket, w1, w2)
	// The first installation's workspace created the channel.
	ev := forSecond(callback("Ev-shared2", mention("ops", "Ev-shared2", "deploy")), team)
	if got := a.deliver(w1, "alice", ev); got != sourcetest.Acked {
		t.Fatalf("over the first instance's connection: %s", got)
	}
	if got := a.deliver(w2, "bob", ev); got != sourcetest.Acked {
		t.Fatalf("again over the second instance's connection: %s", got)
	}
	if al, b := a.tasks("alice"), a.tasks("bob"); al != 0 || b != 1 {
		t.Fatalf("one event delivered over both connections: alice has %d tasks, bob %d; want 0 and 1", al, b)
	}
}

// While the second installation's instance is still learning who it is (auth.test failing for a
// while), its workspace's envelope reaching the first instance is not acknowledged as no one's:
// it may be the starting instance's, and Slack would not deliver an acknowledged one again. Left
// unacknowledged (a 5xx, no Socket Mode ack), its redelivery once that instance is identified is
// the second principal's task.
func TestAnEnvelopeOfAnInstanceStillStartingIsNotAcknowledged(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		w1, w2 := newWorkspace(t), second(t)
		w2.authFail.Store(true)
		a := newApp(t, mode)
		a.start(w1, "default", "alice")
		a.healthy("alice")
		bob := a.start(w2, "second", "bob")
		// It is listed among the app's instances before it first asks auth.test.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			err := bob.(sources.HealthChecker).Health(context.Background())
			if err != nil && strings.Contains(err.Error(), "auth.test failed") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the second instance never tried auth.test: %v", err)
			}
		}
		ev := forSecond(callback("Ev-early", mention("ops", "Ev-early", "deploy")), "T0SECOND")
		if got := a.deliver(w1, "alice", ev); got != sourcetest.Unacked {
			t.Fatalf("the second workspace's event while its instance was starting: %s, want %s", got, sourcetest.Unacked)
		}
		w2.authFail.Store(false)
		a.healthy("bob")
		if got := a.deliver(w1, "alice", ev); got != sourcetest.Acked {
			t.Fatalf("its redelivery once the second instance is identified: %s", got)
		}
		if b, al := a.tasks("bob"), a.tasks("alice"); b != 1 || al != 0 {
			t.Errorf("bob has %d tasks, alice %d; want 1 and 0", b, al)
		}
	})
}

// A body that cannot be read to its end is 400 and counted as rejected "unreadable", on both
// endpoints, not 413 and "oversize": only a body past the limit is oversize.
func TestSlackUnreadableBodyIsNotRecordedAsOversize(t *testing.T) {
	h := newHarness(t, slacksrc.ModeEvents, nil)
	mux := h.tr.(*eventsDriver).mux.Load()
	for i, endpoint := range []string{"events", "interactive"} {
		req := httptest.NewRequest(http.MethodPost, "/sources/slack/"+endpoint, nil)
		req.Body, req.ContentLength = &sourcetest.CutOffBody{Prefix: `{"type": "event_callback"`}, 100
		// Headers that pass: the body is read, for its signature.
		now := time.Now()
		req.Header.Set("X-Slack-Request-Timestamp", itoa(now))
		req.Header.Set("X-Slack-Signature", sign(signing, now, []byte("x")))
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		counts := h.counted(sources.EvidenceRejected)
		if rec.Code != http.StatusBadRequest || counts[sources.RejectedUnreadable] != int64(i+1) || counts[sources.RejectedOversize] != 0 {
			t.Fatalf("%s: a body cut off by its sender: HTTP %d %q, rejected evidence %v; want 400 and %q counted", endpoint, rec.Code,
				strings.TrimSpace(rec.Body.String()), counts, sources.RejectedUnreadable)
		}
	}
}

// A request whose headers show it is not Slack's is refused before its body is read, on both
// endpoints: whoever lacks the signing secret cannot make the source read up to MaxBody.
func TestSlackRefusesBadSignatureHeadersWithoutReadingTheBody(t *testing.T) {
	h := newHarness(t, slacksrc.ModeEvents, nil)
	mux := h.tr.(*eventsDriver).mux.Load()
	now := time.Now()
	for _, endpoint := range []string{"events", "interactive"} {
		for _, tc := range []struct {
			name, ts, sig, reason string
		}{
			{"no headers", "", "", "unsigned"},
			{"no signature", itoa(now), "", "unsigned"},
			{"timestamp not a number", "yesterday", sign(signing, now, nil), "bad-timestamp"},
			{"stale timestamp", itoa(now.Add(-time.Hour)), sign(signing, now.Add(-time.Hour), nil), "stale-timestamp"},
		} {
			before := h.counted(sources.EvidenceRejected)[tc.reason]
			b := &sourcetest.UntouchedBody{}
			req := httptest.NewRequest(http.MethodPost, "/sources/slack/"+endpoint, nil)
			req.Body, req.ContentLength = b, 1<<30
			if tc.ts != "" {
				req.Header.Set("X-Slack-Request-Timestamp", tc.ts)
			}
			if tc.sig != "" {
				req.Header.Set("X-Slack-Signature", tc.sig)
			}
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			if rec.Code != http.StatusUnauthorized || b.Touched {
				t.Fatalf("%s %s: HTTP %d %q, body read: %v; want 401 without reading the body", endpoint, tc.name,
					rec.Code, strings.TrimSpace(rec.Body.String()), b.Touched)
			}
			if n := h.counted(sources.EvidenceRejected)[tc.reason]; n != before+1 {
				t.Fatalf("%s %s: rejected evidence %q went from %d to %d, want one more", endpoint, tc.name, tc.reason, before, n)
			}
		}
	}
}
