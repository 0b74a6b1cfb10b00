package slack_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	slacksrc "github.com/channels-dev/channels/sources/slack"
	"github.com/channels-dev/channels/sources/sourcetest"
	"github.com/channels-dev/channels/taskplane"
)

// bound fails the whole test binary loudly if a test runs past d (a hang is a failure, not a wait).
func bound(t *testing.T, d time.Duration) {
	timer := time.AfterFunc(d, func() { panic(t.Name() + ": did not finish within " + d.String()) })
	t.Cleanup(func() { timer.Stop() })
}

// "The button carries the exact value" (docs/sources/slack.md). An integer enum value past 2^53
// (a build number, a snowflake id) comes back from the click exactly, and a button shows the
// value as written (1000000, not 1e+06).
func TestChoiceButtonsKeepExactNumbers(t *testing.T) {
	schemaJSON := `{"type":"object","properties":{"build":{"type":"integer","enum":[12345678901234567,1000000]}}}`
	for _, via := range []string{"metadata", "data-part"} {
		t.Run(via, func(t *testing.T) {
			bound(t, 30*time.Second)
			h := newHarness(t, slacksrc.ModeEvents, nil)
			first := h.work("events", callback("Ev-n", mention("ops", "Ev-n", "deploy")))
			q := taskplane.Message{ID: "q-n", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("Which build?")}}
			if via == "metadata" {
				// As the store reads a question back (internal/exactjson): numbers are json.Number.
				dec := json.NewDecoder(strings.NewReader(schemaJSON))
				dec.UseNumber()
				var schema map[string]any
				if err := dec.Decode(&schema); err != nil {
					t.Fatal(err)
				}
				q.Metadata = map[string]any{"https://channels.dev/a2a/ext/elicitation/v1": map[string]any{"requestedSchema": schema}}
			} else {
				// The elicitation extension's form: a {"requestedSchema": …} data part.
				q.Parts = append(q.Parts, taskplane.Part{Data: json.RawMessage(`{"requestedSchema":` + schemaJSON + `}`), MediaType: "application/json"})
			}
			_, posted := h.ask(first.Task.ID, q)
			b := buttonsOf(t, posted)
			if len(b) != 3 {
				t.Fatalf("buttons %+v, want two values and Answer", b)
			}
			if b[0].Text.Text != "12345678901234567" || b[1].Text.Text != "1000000" {
				t.Errorf("labels %q, %q, want 12345678901234567, 1000000", b[0].Text.Text, b[1].Text.Text)
			}
			acc := h.work("interactive", blockAction(channelOf("ops"), posted.TS, posted.ThreadTS, "trig-n", b[0].ActionID, b[0].Value))
			if acc.Outcome != taskplane.Continued {
				t.Fatalf("click: %s", acc.Outcome)
			}
			task := h.task(first.Task.ID)
			last := task.History[len(task.History)-1]
			if text(last) != "12345678901234567" || len(last.Parts) != 2 || string(last.Parts[1].Data) != `{"build":12345678901234567}` {
				t.Errorf("the answer is %q / %s (button value %s), want 12345678901234567 / {\"build\":12345678901234567}",
					text(last), last.Parts[len(last.Parts)-1].Data, b[0].Value)
			}
		})
	}
}

// Slack closes an interactive request it had no answer to within 3 s with an error for the
// user, and a trigger_id is good for 3 s only. The Answer click is acknowledged once views.open
// returns, so that call is bounded (2 s) rather than given the Web API's 30 s.
func TestAnswerClickIsAnsweredWithinSlacksThreeSeconds(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		bound(t, 60*time.Second)
		h := newHarness(t, mode, nil)
		first := h.work("events", callback("Ev-d", mention("ops", "Ev-d", "deploy")))
		_, posted := h.ask(first.Task.ID, taskplane.Message{ID: "q-d", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("Anything else?")}})
		h.w.mu.Lock()
		h.w.beforeViewsOpen = func(rw http.ResponseWriter, r *http.Request) bool {
			select { // Slack slow to answer views.open
			case <-r.Context().Done():
			case <-time.After(6 * time.Second):
			}
			reply(rw, map[string]any{"ok": false, "error": "expired_trigger_id"})
			return true
		}
		h.w.mu.Unlock()
		start := time.Now()
		h.deliver("interactive", blockAction(channelOf("ops"), posted.TS, posted.ThreadTS, "trig-open", "channels_answer", "answer"), sourcetest.Acked, nil)
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("the Answer click was answered after %s; Slack wants it within 3 s", took.Round(100*time.Millisecond))
		}
	})
}

// The answer dialog shows the question cut to 2900 characters; the cut never falls inside a
// Slack link/mention token or an entity, which Slack would then show as raw markup.
func TestAnswerDialogQuestionIsNotCutInsideAToken(t *testing.T) {
	bound(t, 30*time.Second)
	h := newHarness(t, slacksrc.ModeEvents, nil)
	q := strings.Repeat("a", 2880) + " see <https://example.com/runbooks/deploy|the runbook> &amp; more"
	click := blockAction(channelOf("ops"), tsOf("q"), rootOf("ops"), "trig-long", "channels_answer", "answer")
	click["message"].(obj)["text"] = q
	h.deliver("interactive", click, sourcetest.Acked, nil)
	views := h.w.openedViews()
	if len(views) != 1 {
		t.Fatalf("views.open calls: %d", len(views))
	}
	var v struct {
		Blocks []struct {
			Type string `json:"type"`
			Text struct {
				Text string `json:"text"`
			} `json:"text"`
		} `json:"blocks"`
	}
	mustUnmarshal(t, views[0].View, &v)
	shown := v.Blocks[0].Text.Text
	if n := utf8.RuneCountInString(shown); n > 3000 {
		t.Errorf("section text of %d characters", n)
	}
	if strings.Count(shown, "<") != strings.Count(shown, ">") {
		t.Errorf("the dialog shows a cut token: …%q", shown[len(shown)-40:])
	}
}

// A click on an older question of a task that is waiting on a newer one must not answer the
// newer one ("an answer to a message that is not a current question is new work").
func TestStaleQuestionClickDoesNotAnswerTheNewerQuestion(t *testing.T) {
	bound(t, 30*time.Second)
	h := newHarness(t, slacksrc.ModeEvents, nil)
	first := h.work("events", callback("Ev-s", mention("ops", "Ev-s", "deploy")))
	enum := func(vs ...any) map[string]any {
		return map[string]any{"x": map[string]any{"requestedSchema": map[string]any{"type": "string", "enum": vs}}}
	}
	_, q1 := h.ask(first.Task.ID, taskplane.Message{ID: "q-1", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("env?")}, Metadata: enum("staging", "prod")})
	b1 := buttonsOf(t, q1)
	// The dialog on q1 was opened before q1 was answered; q1 is answered by a click.
	ref, _ := json.Marshal(map[string]string{"c": channelOf("ops"), "ts": q1.TS, "th": q1.ThreadTS})
	if acc := h.work("interactive", blockAction(channelOf("ops"), q1.TS, q1.ThreadTS, "trig-1", b1[0].ActionID, b1[0].Value)); acc.Outcome != taskplane.Continued {
		t.Fatalf("first answer: %s", acc.Outcome)
	}
	_, _ = h.ask(first.Task.ID, taskplane.Message{ID: "q-2", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("really delete?")}, Metadata: enum("yes", "no")})
	if acc := h.work("interactive", blockAction(channelOf("ops"), q1.TS, q1.ThreadTS, "trig-2", b1[1].ActionID, b1[1].Value)); acc.Outcome == taskplane.Continued {
		t.Errorf("a click on the answered question q1 answered q2 of task %s", acc.Task.ID)
	}
	if acc := h.work("interactive", viewSubmission("trig-3", string(ref), "yes")); acc.Outcome == taskplane.Continued {
		t.Errorf("a dialog opened on q1 answered q2 of task %s", acc.Task.ID)
	}
}
