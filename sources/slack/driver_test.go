package slack_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/sources"
	slacksrc "github.com/channels-dev/channels/sources/slack"
	"github.com/channels-dev/channels/sources/sourcetest"
)

// Payloads as Slack sends them. Ids are derived from the kit's inputs deterministically, so a
// redelivered input is byte-for-byte the same event.

func hash(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

func channelOf(conv string) string { return fmt.Sprintf("C%08X", hash("channel:"+conv)) }
func rootOf(conv string) string    { return fmt.Sprintf("1700000000.%06d", hash("root:"+conv)%1e6) }
func tsOf(id string) string        { return fmt.Sprintf("1750000000.%06d", hash("ts:"+id)%1e6) }

type obj = map[string]any

// callback wraps an inner event in an Events API event_callback.
func callback(eventID string, inner obj) obj {
	return obj{"token": "legacy-verification-token", "team_id": team, "api_app_id": "A0APP", "type": "event_callback",
		"event_id": eventID, "event_time": 1750000000, "event": inner,
		"authorizations": []obj{{"team_id": team, "user_id": botUser, "is_bot": true}}}
}

// mention is an app_mention of the bot in conv's thread.
func mention(conv, id, text string) obj {
	return obj{"type": "app_mention", "user": human, "text": "<@" + botUser + "> " + text, "ts": tsOf(id),
		"thread_ts": rootOf(conv), "channel": channelOf(conv), "event_ts": tsOf(id)}
}

// threadReply is a plain message (no mention) in conv's thread.
func threadReply(conv, id, text string) obj {
	return obj{"type": "message", "user": human, "text": text, "ts": tsOf(id), "thread_ts": rootOf(conv),
		"channel": channelOf(conv), "channel_type": "channel", "event_ts": tsOf(id)}
}

// ownMessage is the bot's own message in conv's thread, as Slack echoes it back.
func ownMessage(conv, id, text string) obj {
	return obj{"type": "message", "user": botUser, "bot_id": botID, "text": text, "ts": tsOf(id),
		"thread_ts": rootOf(conv), "channel": channelOf(conv), "channel_type": "channel", "event_ts": tsOf(id),
		"bot_profile": obj{"id": botID, "app_id": "A0APP"}}
}

// blockAction is a click on a button of the message (channel, ts), in thread root.
func blockAction(channel, ts, root, triggerID, actionID, value string) obj {
	return obj{"type": "block_actions", "team": obj{"id": team, "domain": "acme"}, "user": obj{"id": human, "name": "ada"},
		"api_app_id": "A0APP", "token": "legacy", "trigger_id": triggerID,
		"container": obj{"type": "message", "message_ts": ts, "channel_id": channel, "is_ephemeral": false, "thread_ts": root},
		"channel":   obj{"id": channel, "name": "ops"},
		"message":   obj{"type": "message", "ts": ts, "thread_ts": root, "user": botUser, "bot_id": botID, "text": "which one?"},
		"actions": []obj{{"action_id": actionID, "block_id": "channels_question", "type": "button", "value": value,
			"action_ts": "1750000001.000001", "text": obj{"type": "plain_text", "text": "Pick"}}},
		"state": obj{"values": obj{}}}
}

// viewSubmission is a submitted answer dialog.
func viewSubmission(triggerID, privateMetadata, answer string) obj {
	return obj{"type": "view_submission", "team": obj{"id": team}, "user": obj{"id": human}, "api_app_id": "A0APP",
		"trigger_id": triggerID, "view": obj{"id": "V0001", "hash": "h-" + triggerID, "type": "modal", "callback_id": "channels_answer",
			"private_metadata": privateMetadata,
			"state":            obj{"values": obj{"channels_answer_text": obj{"channels_answer_text": obj{"type": "plain_text_input", "value": answer}}}}}}
}

// envelope turns a kit input into what Slack sends: "events" (an Events API body) or
// "interactive" (an interactive payload).
func envelope(in sourcetest.Input) (kind string, payload obj) {
	switch in.Kind {
	case sourcetest.NonWork:
		return "events", callback(in.ID, ownMessage(in.Conversation, in.ID, "on it"))
	case sourcetest.Malformed:
		return "events", callback(in.ID, obj{"type": "app_mention", "user": human, "text": "<@" + botUser + "> hi"}) // no channel, no ts
	}
	if in.ReplyTo != "" {
		channel, ts, ok := strings.Cut(in.ReplyTo, ":")
		if !ok {
			channel, ts = channelOf(in.Conversation), in.ReplyTo
		}
		v, _ := json.Marshal(obj{"v": in.Text})
		p := blockAction(channel, ts, rootOf(in.Conversation), in.ID, "channels_choice:0", string(v))
		if in.BodyTaskID != "" {
			p["taskId"] = in.BodyTaskID
		}
		return "interactive", p
	}
	inner := mention(in.Conversation, in.ID, in.Text)
	cb := callback(in.ID, inner)
	if in.BodyTaskID != "" {
		inner["taskId"], cb["taskId"] = in.BodyTaskID, in.BodyTaskID
	}
	return "events", cb
}

// transport delivers payloads to a running instance the way its mode does.
type transport interface {
	sourcetest.Driver
	deliver(t testing.TB, kind string, payload obj, header http.Header) sourcetest.Ack
	options() map[string]any
}

// options are an instance's options against w; edit, if set, changes them.
func options(t testing.TB, w *workspace, mode string) map[string]any {
	o := map[string]any{"mode": mode, "bot_token_file": secretFile(t, "bot", botToken), "api_url": w.apiURL(), "part_interval": "0s"}
	if mode == slacksrc.ModeSocket {
		o["app_token_file"] = secretFile(t, "app", appToken)
	} else {
		o["signing_secret_file"] = secretFile(t, "signing", signing)
	}
	return o
}

func newInstance(t testing.TB, opts map[string]any) sources.Source {
	t.Helper()
	src, err := sources.New(slacksrc.Name, sources.Config{Instance: "default", Principal: principal, Options: opts})
	if err != nil {
		t.Fatalf("new slack source: %v", err)
	}
	return src
}

// eventsDriver drives Events API mode: signed POSTs to the instance's endpoints.
type eventsDriver struct {
	w    *workspace
	opts map[string]any
	srv  *httptest.Server
	mux  atomic.Pointer[http.ServeMux]
}

func newEventsDriver(t testing.TB, w *workspace) *eventsDriver {
	d := &eventsDriver{w: w, opts: options(t, w, slacksrc.ModeEvents)}
	d.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mux := d.mux.Load()
		if mux == nil {
			http.Error(rw, "no instance", http.StatusServiceUnavailable)
			return
		}
		mux.ServeHTTP(rw, r)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *eventsDriver) Principal() string          { return principal }
func (d *eventsDriver) options() map[string]any    { return d.opts }
func (d *eventsDriver) url(endpoint string) string { return d.srv.URL + "/sources/slack/" + endpoint }

func (d *eventsDriver) New(t *testing.T) sources.Source {
	src := newInstance(t, d.opts)
	ep, ok := src.(sources.Endpoint)
	if !ok {
		t.Fatalf("an events mode instance is not a sources.Endpoint")
	}
	mux := http.NewServeMux()
	mux.Handle(ep.Pattern(), ep)
	d.mux.Store(mux)
	return src
}

func (d *eventsDriver) Inject(t *testing.T, in sourcetest.Input) sourcetest.Ack {
	kind, payload := envelope(in)
	return d.deliver(t, kind, payload, nil)
}

// body is what Slack POSTs for a payload of kind.
func body(kind string, payload obj) []byte {
	b, _ := json.Marshal(payload)
	if kind == "interactive" {
		return []byte("payload=" + url.QueryEscape(string(b)))
	}
	return b
}

// sign returns Slack's v0 signature of body sent at ts.
func sign(secret string, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "v0:%d:", ts.Unix())
	m.Write(body)
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}

// post sends body to endpoint signed with secret at ts (no signature when secret is "").
// post sends b to the endpoint and returns the answer's status and body. It may run on any
// goroutine (concurrent redeliveries): a request that fails is an error of the test and status 0.
func (d *eventsDriver) post(t testing.TB, endpoint string, b []byte, secret string, ts time.Time, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.url(endpoint), bytes.NewReader(b))
	if err != nil {
		t.Errorf("POST %s: %v", endpoint, err)
		return 0, ""
	}
	ct := "application/json"
	if endpoint == "interactive" {
		ct = "application/x-www-form-urlencoded"
	}
	req.Header.Set("Content-Type", ct)
	if secret != "" {
		req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts.Unix(), 10))
		req.Header.Set("X-Slack-Signature", sign(secret, ts, b))
	}
	for k, v := range header {
		req.Header[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Errorf("POST %s: %v", endpoint, err)
		return 0, ""
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(resp.Body)
	return resp.StatusCode, out.String()
}

func (d *eventsDriver) deliver(t testing.TB, kind string, payload obj, header http.Header) sourcetest.Ack {
	endpoint := "events"
	if kind == "interactive" {
		endpoint = "interactive"
	}
	code, _ := d.post(t, endpoint, body(kind, payload), signing, time.Now(), header)
	switch {
	case code/100 == 2:
		return sourcetest.Acked
	case code/100 == 4:
		return sourcetest.Refused
	}
	return sourcetest.Unacked
}

// socketDriver drives Socket Mode: envelopes over the fake websocket, answered by acks.
type socketDriver struct {
	w       *workspace
	opts    map[string]any
	settled sync.Map // envelope id → chan bool
}

func newSocketDriver(t testing.TB, w *workspace) *socketDriver {
	return &socketDriver{w: w, opts: options(t, w, slacksrc.ModeSocket)}
}

func (d *socketDriver) Principal() string       { return principal }
func (d *socketDriver) options() map[string]any { return d.opts }

func (d *socketDriver) settledCh(id string) chan bool {
	ch, _ := d.settled.LoadOrStore(id, make(chan bool, 1))
	return ch.(chan bool)
}

func (d *socketDriver) New(t *testing.T) sources.Source {
	src := newInstance(t, d.opts)
	slacksrc.OnSettle(src, func(id string, acked bool) { d.settledCh(id) <- acked })
	return src
}

func (d *socketDriver) Inject(t *testing.T, in sourcetest.Input) sourcetest.Ack {
	kind, payload := envelope(in)
	return d.deliver(t, kind, payload, nil)
}

// deliver sends one envelope; a "X-Slack-Retry-Num" header makes it a redelivery (retry_attempt).
// It may run on any goroutine (concurrent redeliveries): an envelope left unanswered is an error
// of the test and Unacked.
func (d *socketDriver) deliver(t testing.TB, kind string, payload obj, header http.Header) sourcetest.Ack {
	typ := "events_api"
	if kind == "interactive" {
		typ = "interactive"
	}
	retry, _ := strconv.Atoi(header.Get("X-Slack-Retry-Num"))
	var raw any = payload
	if r, ok := payload["raw"].(json.RawMessage); ok && len(payload) == 1 {
		raw = r // a payload that is not an object, for malformed envelopes
	}
	id, acked := d.w.ws.send(typ, raw, retry)
	// The answer is whatever Slack sees first: an ack on the wire (as soon as it arrives, like an
	// HTTP status line), or the source finishing the envelope without one.
	var ok bool
	select {
	case <-acked:
		return sourcetest.Acked
	case ok = <-d.settledCh(id):
	case <-time.After(20 * time.Second):
		t.Errorf("envelope %s was not handled within 20s", id)
		return sourcetest.Unacked
	}
	if !ok {
		select {
		case <-acked:
			t.Errorf("envelope %s was acked although the source did not settle it", id)
		case <-time.After(100 * time.Millisecond):
		}
		return sourcetest.Unacked
	}
	select {
	case <-acked:
		return sourcetest.Acked
	case <-time.After(20 * time.Second):
		t.Errorf("envelope %s was settled but its ack never reached Slack", id)
	}
	return sourcetest.Unacked
}

func TestSlackEventsAPIPassesTheKit(t *testing.T) {
	sourcetest.Run(t, newEventsDriver(t, newWorkspace(t)))
}

func TestSlackSocketModePassesTheKit(t *testing.T) {
	sourcetest.Run(t, newSocketDriver(t, newWorkspace(t)))
}
