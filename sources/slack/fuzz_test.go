package slack

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

const (
	fuzzTeam    = "T0TEAM"
	fuzzBotUser = "U0BOT"
	fuzzBotID   = "B0BOT"
	fuzzSecret  = "8f742231b10e8888abcd99yyyzzz85a5"
)

// fuzzSlack is an identified Events API instance of workspace fuzzTeam.
func fuzzSlack() *EventsSource {
	s := &Source{instance: "default", principal: "alice", log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now,
		opt: Options{ChannelMessages: ChannelThreads, allowed: map[string]bool{}, dms: true, signingSecret: fuzzSecret}}
	s.bot.Store(&botIdentity{Team: fuzzTeam, UserID: fuzzBotUser, BotID: fuzzBotID})
	return &EventsSource{Source: s}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

type obj = map[string]any

func fuzzCallback(eventID string, inner obj) []byte {
	return mustJSON(obj{"token": "legacy-verification-token", "team_id": fuzzTeam, "api_app_id": "A0APP", "type": "event_callback",
		"event_id": eventID, "event_time": 1750000000, "event": inner,
		"authorizations": []obj{{"team_id": fuzzTeam, "user_id": fuzzBotUser, "is_bot": true}}})
}

// callbackSeeds are Events API bodies as Slack sends them (from the intake tests).
func callbackSeeds() [][]byte {
	return [][]byte{
		fuzzCallback("Ev1", obj{"type": "app_mention", "user": "U0HUMAN", "text": "<@" + fuzzBotUser + "> deploy", "ts": "1750000000.000001",
			"thread_ts": "1700000000.000001", "channel": "C0OPS", "event_ts": "1750000000.000001"}),
		fuzzCallback("Ev2", obj{"type": "message", "user": "U0HUMAN", "text": "more", "ts": "1750000000.000002", "thread_ts": "1700000000.000001",
			"channel": "C0OPS", "channel_type": "channel", "files": []obj{{"name": "a.png", "mimetype": "image/png", "url_private": "https://files.slack.com/a.png"}}}),
		fuzzCallback("Ev3", obj{"type": "message", "user": fuzzBotUser, "bot_id": fuzzBotID, "text": "on it", "ts": "1750000000.000003",
			"channel": "C0OPS", "channel_type": "channel", "bot_profile": obj{"id": fuzzBotID}}),
		fuzzCallback("Ev4", obj{"type": "message", "channel": "D0DIRECT", "channel_type": "im", "user": "U0HUMAN", "text": "hello", "ts": "1.1"}),
		fuzzCallback("Ev5", obj{"type": "message", "subtype": "message_changed", "channel": "C0OPS", "message": obj{"text": "x"}}),
		fuzzCallback("Ev6", obj{"type": "reaction_added", "user": "U0HUMAN", "reaction": "eyes", "item": obj{"type": "message", "channel": "C0OPS", "ts": "1.1"}}),
		fuzzCallback("Ev7", obj{"type": "app_mention", "user": "U0HUMAN", "text": "<@" + fuzzBotUser + "> hi"}),
		[]byte(`{"token":"legacy","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`),
		[]byte(`{"type":"app_rate_limited","token":"x","team_id":"T0TEAM","minute_rate_limited":1518467820,"api_app_id":"A0APP"}`),
		[]byte(`{"type": "event_callback", `),
		[]byte(`{"type":"event_callback","team_id":"T0TEAM","event_id":"Ev8","event":"not an object"}`),
	}
}

// interactionSeeds are interactive payloads as Slack sends them (from the intake tests).
func interactionSeeds() [][]byte {
	block := func(actionID, value string) []byte {
		return mustJSON(obj{"type": "block_actions", "team": obj{"id": fuzzTeam, "domain": "acme"}, "user": obj{"id": "U0HUMAN", "name": "ada"},
			"api_app_id": "A0APP", "token": "legacy", "trigger_id": "trig1",
			"container": obj{"type": "message", "message_ts": "1750000000.000009", "channel_id": "C0OPS", "is_ephemeral": false, "thread_ts": "1700000000.000001"},
			"channel":   obj{"id": "C0OPS", "name": "ops"},
			"message":   obj{"type": "message", "ts": "1750000000.000009", "thread_ts": "1700000000.000001", "user": fuzzBotUser, "bot_id": fuzzBotID, "text": "which one?"},
			"actions": []obj{{"action_id": actionID, "block_id": "channels_question", "type": "button", "value": value,
				"action_ts": "1750000001.000001", "text": obj{"type": "plain_text", "text": "Pick"}}},
			"state": obj{"values": obj{}}})
	}
	return [][]byte{
		block(actionAnswer, ""),
		block(actionChoice+":0", `{"v":"staging"}`),
		block(actionChoice+":1", `{"v":2,"p":"colour"}`),
		block(actionChoice+":1", `{"v":null}`),
		mustJSON(obj{"type": "view_submission", "team": obj{"id": fuzzTeam}, "user": obj{"id": "U0HUMAN"}, "api_app_id": "A0APP",
			"trigger_id": "trig2", "view": obj{"id": "V0001", "hash": "h-trig2", "type": "modal", "callback_id": callbackAnswer, "bot_id": fuzzBotID,
				"private_metadata": `{"c":"C0OPS","ts":"1750000000.000009","th":"1700000000.000001"}`,
				"state":            obj{"values": obj{blockAnswerInput: obj{blockAnswerInput: obj{"type": "plain_text_input", "value": "prod"}}}}}}),
		mustJSON(obj{"type": "shortcut", "team": obj{"id": fuzzTeam}, "trigger_id": "t"}),
		[]byte(`{"type":"block_actions","actions":[null]}`),
		[]byte(`{}`),
	}
}

// checkVerdict asserts what holds of every verdict: exactly one outcome, and a work event that
// is whole: its identity, conversation key and locator agree, it has parts, and it encodes.
func checkVerdict(t *testing.T, s *Source, v verdict) {
	t.Helper()
	n := 0
	for _, set := range []bool{v.malformed != "", v.nonWork != "", v.dialog != nil, v.event.Identity != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("verdict with %d outcomes: %+v", n, v)
	}
	if v.event.Identity == "" {
		return
	}
	ev := v.event
	var loc Locator
	if err := json.Unmarshal(ev.Locator, &loc); err != nil {
		t.Fatalf("locator %s: %v", ev.Locator, err)
	}
	if loc.Channel == "" || loc.TS == "" || loc.ThreadTS == "" || loc.Instance != s.instance {
		t.Fatalf("locator %+v lacks where to answer", loc)
	}
	if ev.ConversationKey != conversationKey(loc.Team, loc.Channel, loc.ThreadTS) || ev.Message.ID != "slack:"+ev.Identity {
		t.Fatalf("event %q: conversation key %q, message %q, locator %+v", ev.Identity, ev.ConversationKey, ev.Message.ID, loc)
	}
	if len(ev.Message.Parts) == 0 || ev.Principal != s.principal {
		t.Fatalf("event %q without parts or principal", ev.Identity)
	}
	if _, err := json.Marshal(ev.Message.Metadata); err != nil {
		t.Fatalf("event metadata does not encode: %v", err)
	}
}

// FuzzSlackClassifyCallback feeds arbitrary Events API bodies (the HTTP POST body, or a Socket
// Mode events_api payload) to classification. It never panics; a verdict is one outcome; work
// is identified by its workspace and event id; the bot's own messages and another
// workspace's events are never work.
func FuzzSlackClassifyCallback(f *testing.F) {
	for _, b := range callbackSeeds() {
		f.Add(b)
	}
	s := fuzzSlack().Source
	f.Fuzz(func(t *testing.T, body []byte) {
		v := s.classifyCallback(body)
		checkVerdict(t, s, v)
		if v.dialog != nil {
			t.Fatalf("an event asked for a dialog: %+v", v)
		}
		if v2 := s.classifyCallback(body); v2.String() != v.String() {
			t.Fatalf("classified twice: %s, then %s", v, v2)
		}
		if v.event.Identity == "" {
			return
		}
		var cb slackevents.EventsAPICallbackEvent
		var in innerEvent
		if json.Unmarshal(body, &cb) != nil || cb.InnerEvent == nil || json.Unmarshal(*cb.InnerEvent, &in) != nil {
			t.Fatalf("work from a body that does not decode: %q", body)
		}
		if v.event.Identity != cb.TeamID+":"+cb.EventID || cb.TeamID == "" || cb.EventID == "" {
			t.Fatalf("identity %q for team %q, event %q", v.event.Identity, cb.TeamID, cb.EventID)
		}
		if in.User == fuzzBotUser || in.BotID != "" {
			t.Fatalf("a bot's message is work: %q", body)
		}
		if !s.bot.Load().ours(cb.TeamID, cb.Authorizations) {
			t.Fatalf("another installation's event is work: %q", body)
		}
	})
}

// FuzzSlackClassifyInteraction feeds arbitrary interactive payloads to classification, and
// arbitrary form bodies to the interactive endpoint's reading of its payload field. It never
// panics; a verdict is one outcome; work answers the question message it names.
func FuzzSlackClassifyInteraction(f *testing.F) {
	for _, b := range interactionSeeds() {
		f.Add(b)
	}
	s := fuzzSlack().Source
	f.Fuzz(func(t *testing.T, payload []byte) {
		v := s.classifyInteraction(payload)
		checkVerdict(t, s, v)
		if d := v.dialog; d != nil && (d.channel == "" || d.ts == "" || d.thr == "") {
			t.Fatalf("dialog request without its message: %+v", d)
		}
		if v.event.Identity != "" {
			var loc Locator
			_ = json.Unmarshal(v.event.Locator, &loc)
			if v.event.ReplyTo != AnchorID(loc.Channel, loc.TS) || !strings.HasPrefix(v.event.Identity, fuzzTeam+":") {
				t.Fatalf("answer %q replies to %q, locator %+v", v.event.Identity, v.event.ReplyTo, loc)
			}
		}
		// The same payload as the HTTP endpoint receives it: a form field.
		form, err := url.ParseQuery("payload=" + url.QueryEscape(string(payload)))
		if err != nil || form.Get("payload") != string(payload) {
			t.Fatalf("form round trip of the payload: %v", err)
		}
		// The fuzzed bytes as the HTTP endpoint's whole body.
		if form, err := url.ParseQuery(string(payload)); err == nil && form.Get("payload") != "" {
			checkVerdict(t, s, s.classifyInteraction([]byte(form.Get("payload"))))
		}
	})
}

// FuzzSlackSocketEnvelope feeds arbitrary websocket messages through what Socket Mode does with
// them: the client library's parsing (slackevents.ParseEvent for events_api, the interaction
// callback for interactive), the instance's reading of a message the library could not parse,
// and classification of the envelope. Nothing panics; an envelope handled has an id; its
// verdict is one outcome.
func FuzzSlackSocketEnvelope(f *testing.F) {
	env := func(typ string, payload []byte) []byte {
		return mustJSON(obj{"envelope_id": "env-1", "type": typ, "payload": json.RawMessage(payload), "accepts_response_payload": false, "retry_attempt": 0})
	}
	for _, b := range callbackSeeds() {
		if json.Valid(b) {
			f.Add(env("events_api", b))
		}
	}
	for _, b := range interactionSeeds() {
		f.Add(env("interactive", b))
	}
	f.Add(env("slash_commands", []byte(`{"command":"/x","text":"hi"}`)))
	f.Add([]byte(`{"type":"hello","num_connections":1}`))
	f.Add([]byte(`{"type":"disconnect","reason":"refresh_requested"}`))
	f.Add([]byte(`{"type":"events_api","envelope_id":"e","payload":{"type":"event_callback","event":{"type":"x_future_event"}}}`))
	src := &SocketSource{Source: fuzzSlack().Source}
	f.Fuzz(func(t *testing.T, msg []byte) {
		evt, err := parseSocketMessage(msg)
		if err != nil {
			evt = socketmode.Event{Type: socketmode.EventTypeErrorBadMessage, Data: &socketmode.ErrorBadMessage{Cause: err, Message: msg}}
		}
		req := src.observe(evt)
		if req == nil {
			return
		}
		if req.EnvelopeID == "" && evt.Type == socketmode.EventTypeErrorBadMessage {
			t.Fatalf("a message without an envelope id is handled: %q", msg)
		}
		v, classify := src.classifyEnvelope(req)
		checkVerdict(t, src.Source, v)
		if classify != nil && classify(src.Source, req.Payload).String() != v.String() {
			t.Fatalf("classify does not read the envelope as classifyEnvelope did")
		}
	})
}

// parseSocketMessage is the socket mode client's parsing of one websocket message
// (socketmode.Client.parseEvent), from the library's exported parts.
func parseSocketMessage(msg []byte) (socketmode.Event, error) {
	var req socketmode.Request
	if err := json.Unmarshal(msg, &req); err != nil {
		return socketmode.Event{}, err
	}
	switch req.Type {
	case socketmode.RequestTypeHello:
		return socketmode.Event{Type: socketmode.EventTypeHello, Request: &req}, nil
	case socketmode.RequestTypeEventsAPI:
		ev, err := slackevents.ParseEvent(req.Payload, slackevents.OptionNoVerifyToken())
		if err != nil {
			return socketmode.Event{}, err
		}
		return socketmode.Event{Type: socketmode.EventTypeEventsAPI, Data: ev, Request: &req}, nil
	case socketmode.RequestTypeDisconnect:
		return socketmode.Event{Type: socketmode.EventTypeDisconnect, Request: &req}, nil
	case socketmode.RequestTypeSlashCommands:
		var cmd slack.SlashCommand
		if err := json.Unmarshal(req.Payload, &cmd); err != nil {
			return socketmode.Event{}, err
		}
		return socketmode.Event{Type: socketmode.EventTypeSlashCommand, Data: cmd, Request: &req}, nil
	case socketmode.RequestTypeInteractive:
		var cb slack.InteractionCallback
		if err := json.Unmarshal(req.Payload, &cb); err != nil {
			return socketmode.Event{}, err
		}
		return socketmode.Event{Type: socketmode.EventTypeInteractive, Data: cb, Request: &req}, nil
	}
	return socketmode.Event{}, fmt.Errorf("unsupported type %q", req.Type)
}

// slackSign is Slack's v0 request signature of body sent at ts.
func slackSign(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "v0:%s:", ts)
	m.Write(body)
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}

// verify is both of ServeHTTP's checks, in its order: the headers, then the signature over the
// body.
func (s *EventsSource) verify(h http.Header, body []byte) string {
	sv, reason := s.signed(h)
	if reason != "" {
		return reason
	}
	return authentic(sv, body)
}

// FuzzSlackVerify feeds arbitrary timestamps, signatures and bodies to the Events API signature
// check. A request signed with the signing secret over its timestamp and body, within 5
// minutes, is accepted; the same signature over any other body is refused; whatever is accepted
// carries the signature of its own timestamp and body.
func FuzzSlackVerify(f *testing.F) {
	body := callbackSeeds()[0]
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	f.Add(body, ts, slackSign(fuzzSecret, ts, body), int64(0))
	f.Add(body, "1531420618", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503", int64(-400))
	f.Add([]byte(`{"type": "event_callback", `), "", "", int64(100))
	f.Add([]byte{}, "abc", "v0=", int64(299))
	s := fuzzSlack()
	f.Fuzz(func(t *testing.T, body []byte, tsRaw, sig string, offset int64) {
		h := http.Header{}
		h.Set("X-Slack-Request-Timestamp", tsRaw)
		h.Set("X-Slack-Signature", sig)
		switch reason := s.verify(h, body); reason {
		case "":
			got := h.Get("X-Slack-Signature")
			if want := slackSign(fuzzSecret, h.Get("X-Slack-Request-Timestamp"), body); !hmac.Equal([]byte(strings.ToLower(got)), []byte(want)) {
				t.Fatalf("accepted signature %q over timestamp %q, want %q", got, h.Get("X-Slack-Request-Timestamp"), want)
			}
		case "unsigned", "stale-timestamp", "bad-timestamp", "bad-signature":
		default:
			t.Fatalf("unknown refusal reason %q", reason)
		}

		// Signed now+offset: accepted well inside the window, refused well outside it.
		off := time.Duration(offset%1200) * time.Second
		at := strconv.FormatInt(time.Now().Add(off).Unix(), 10)
		h.Set("X-Slack-Request-Timestamp", at)
		h.Set("X-Slack-Signature", slackSign(fuzzSecret, at, body))
		reason := s.verify(h, body)
		switch {
		case off.Abs() < 4*time.Minute && reason != "":
			t.Fatalf("a request signed %s from now was refused: %s", off, reason)
		case off.Abs() > 6*time.Minute && reason != "stale-timestamp":
			t.Fatalf("a request signed %s from now: reason %q, want stale-timestamp", off, reason)
		case reason != "":
			return
		}
		for _, tampered := range [][]byte{append(bytes.Clone(body), ' '), body[:len(body)/2]} {
			if !bytes.Equal(tampered, body) && s.verify(h, tampered) != "bad-signature" {
				t.Fatalf("tampered body %q accepted with the signature of %q", tampered, body)
			}
		}
	})
}
