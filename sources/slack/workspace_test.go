package slack_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/slack-go/slack/slacktest"
)

// The Slack side of the tests: slacktest's server with the routes its defaults do not emulate
// overridden by a small in-memory workspace (threads with message metadata, reactions, views,
// auth.test, apps.connections.open), and the Socket Mode fake in socket_test.go.

const (
	team      = "T0CHANNELS"
	botUser   = "U0BOT"
	botID     = "B0BOT"
	human     = "U0HUMAN"
	botToken  = "xoxb-test-bot-token"
	appToken  = "xapp-test-app-token"
	signing   = "8f742231b10e8888abcd99yyyzzz85a5"
	otherBot  = "B0OTHER"
	principal = "alice"
)

// message is one message of the emulated workspace.
type message struct {
	TS       string          `json:"ts"`
	ThreadTS string          `json:"thread_ts,omitempty"`
	User     string          `json:"user,omitempty"`
	BotID    string          `json:"bot_id,omitempty"`
	Text     string          `json:"text"`
	Blocks   json.RawMessage `json:"blocks,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	channel  string
}

type view struct {
	TriggerID string          `json:"trigger_id"`
	View      json.RawMessage `json:"view"`
}

type workspace struct {
	t   testing.TB
	srv *slacktest.Server
	ws  *socketFake

	mu        sync.Mutex
	msgs      []message                      // every message, in post order
	reactions map[string]map[string][]string // channel:ts → name → users
	views     []view
	posts     int
	seq       int
	// pageSize, if set, caps conversations.replies pages whatever limit the caller asks.
	pageSize int
	// beforePost, if set, may answer a chat.postMessage itself (a 429, an error) and return true.
	beforePost func(w http.ResponseWriter, form url.Values) bool
	// afterPost, if set, runs after a message was stored and may answer instead (a lost
	// response): it returns true when it answered.
	afterPost func(w http.ResponseWriter, m message) bool
	// repliesCalls counts conversations.replies calls.
	repliesCalls int
	// beforeReplies, if set, may answer a conversations.replies call itself (a rate limit).
	beforeReplies func(w http.ResponseWriter, form url.Values) bool
	// refuseApp makes apps.connections.open refuse the app token from now on.
	refuseApp atomic.Bool
	// authFail makes auth.test fail (a transient error) while set.
	authFail atomic.Bool
	// authHang is how many auth.test calls, from now, are never answered (the connection held
	// until the caller gives up).
	authHang atomic.Int32
	// beforeViewsOpen, if set, may answer a views.open call itself (a slow Slack).
	beforeViewsOpen func(w http.ResponseWriter, r *http.Request) bool
	// teamID, userID and botIDv are who auth.test says the bot is (default team, botUser, botID).
	teamID, userID, botIDv string
}

func newWorkspace(t testing.TB) *workspace {
	w := &workspace{t: t, reactions: map[string]map[string][]string{}}
	w.ws = newSocketFake(t)
	w.srv = slacktest.NewTestServer(func(c slacktest.Customize) {
		c.Handle("/auth.test", w.authTest)
		c.Handle("/chat.postMessage", w.postMessage)
		c.Handle("/conversations.replies", w.replies)
		c.Handle("/reactions.add", w.reactionsAdd)
		c.Handle("/reactions.get", w.reactionsGet)
		c.Handle("/views.open", w.viewsOpen)
		c.Handle("/apps.connections.open", w.connectionsOpen)
	})
	w.srv.Start()
	t.Cleanup(w.srv.Stop)
	return w
}

func (w *workspace) apiURL() string { return w.srv.GetAPIURL() }

func reply(rw http.ResponseWriter, v any) {
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(v)
}

func form(r *http.Request) url.Values {
	_ = r.ParseForm()
	return r.PostForm
}

func (w *workspace) authTest(rw http.ResponseWriter, r *http.Request) {
	if w.authHang.Add(-1) >= 0 {
		_ = form(r) // the body read whole, the server notices the caller hanging up
		<-r.Context().Done()
		return
	}
	if w.authFail.Load() {
		reply(rw, map[string]any{"ok": false, "error": "internal_error"})
		return
	}
	if form(r).Get("token") != botToken && r.Header.Get("Authorization") != "Bearer "+botToken {
		reply(rw, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	reply(rw, map[string]any{"ok": true, "team_id": firstOf(w.teamID, team), "team": "Acme", "user_id": firstOf(w.userID, botUser),
		"user": "channels", "bot_id": firstOf(w.botIDv, botID)})
}

func (w *workspace) connectionsOpen(rw http.ResponseWriter, r *http.Request) {
	if w.refuseApp.Load() || r.Header.Get("Authorization") != "Bearer "+appToken {
		reply(rw, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	reply(rw, map[string]any{"ok": true, "url": w.ws.url()})
}

func (w *workspace) postMessage(rw http.ResponseWriter, r *http.Request) {
	f := form(r)
	w.mu.Lock()
	hook := w.beforePost
	w.mu.Unlock()
	if hook != nil && hook(rw, f) {
		return
	}
	if f.Get("channel") == "" || (f.Get("text") == "" && f.Get("blocks") == "") {
		reply(rw, map[string]any{"ok": false, "error": "no_text"})
		return
	}
	if !validButtons(f.Get("blocks")) {
		reply(rw, map[string]any{"ok": false, "error": "invalid_blocks"})
		return
	}
	w.mu.Lock()
	w.seq++
	m := message{TS: fmt.Sprintf("1800000000.%06d", w.seq), ThreadTS: f.Get("thread_ts"), User: botUser, BotID: botID,
		Text: f.Get("text"), channel: f.Get("channel")}
	if b := f.Get("blocks"); b != "" {
		m.Blocks = json.RawMessage(b)
	}
	if md := f.Get("metadata"); md != "" {
		m.Metadata = json.RawMessage(md)
	}
	w.msgs = append(w.msgs, m)
	w.posts++
	after := w.afterPost
	w.mu.Unlock()
	if after != nil && after(rw, m) {
		return
	}
	reply(rw, map[string]any{"ok": true, "channel": m.channel, "ts": m.TS, "message": m})
}

// replies serves conversations.replies: the thread's root (if it was posted here) and its
// replies in ts order, paged by an opaque cursor; metadata only with include_all_metadata.
func (w *workspace) replies(rw http.ResponseWriter, r *http.Request) {
	f := form(r)
	ch, root := f.Get("channel"), f.Get("ts")
	w.mu.Lock()
	defer w.mu.Unlock()
	w.repliesCalls++
	if w.beforeReplies != nil && w.beforeReplies(rw, f) {
		return
	}
	var thread []message
	for _, m := range w.msgs {
		if m.channel == ch && (m.TS == root || m.ThreadTS == root) {
			if f.Get("include_all_metadata") != "1" {
				m.Metadata = nil
			}
			thread = append(thread, m)
		}
	}
	sort.SliceStable(thread, func(i, j int) bool { return thread[i].TS < thread[j].TS })
	limit, _ := strconv.Atoi(f.Get("limit"))
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	if w.pageSize > 0 {
		limit = min(limit, w.pageSize)
	}
	off := 0
	if c := f.Get("cursor"); c != "" {
		n, err := strconv.Atoi(c[len("off:"):])
		if err != nil {
			reply(rw, map[string]any{"ok": false, "error": "invalid_cursor"})
			return
		}
		off = n
	}
	end := min(off+limit, len(thread))
	page := thread[min(off, len(thread)):end]
	out := map[string]any{"ok": true, "messages": page, "has_more": end < len(thread)}
	if end < len(thread) {
		out["response_metadata"] = map[string]any{"next_cursor": fmt.Sprintf("off:%d", end)}
	}
	reply(rw, out)
}

func (w *workspace) reactionsAdd(rw http.ResponseWriter, r *http.Request) {
	f := form(r)
	key := f.Get("channel") + ":" + f.Get("timestamp")
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reactions[key] == nil {
		w.reactions[key] = map[string][]string{}
	}
	if slices.Contains(w.reactions[key][f.Get("name")], botUser) {
		reply(rw, map[string]any{"ok": false, "error": "already_reacted"})
		return
	}
	w.reactions[key][f.Get("name")] = append(w.reactions[key][f.Get("name")], botUser)
	reply(rw, map[string]any{"ok": true})
}

func (w *workspace) reactionsGet(rw http.ResponseWriter, r *http.Request) {
	f := form(r)
	w.mu.Lock()
	defer w.mu.Unlock()
	var rs []map[string]any
	for name, users := range w.reactions[f.Get("channel")+":"+f.Get("timestamp")] {
		rs = append(rs, map[string]any{"name": name, "count": len(users), "users": users})
	}
	reply(rw, map[string]any{"ok": true, "type": "message", "channel": f.Get("channel"),
		"message": map[string]any{"type": "message", "ts": f.Get("timestamp"), "reactions": rs}})
}

func (w *workspace) viewsOpen(rw http.ResponseWriter, r *http.Request) {
	w.mu.Lock()
	hook := w.beforeViewsOpen
	w.mu.Unlock()
	if hook != nil && hook(rw, r) {
		return
	}
	b, _ := io.ReadAll(r.Body)
	var v view
	if err := json.Unmarshal(b, &v); err != nil || v.TriggerID == "" {
		reply(rw, map[string]any{"ok": false, "error": "invalid_arguments"})
		return
	}
	w.mu.Lock()
	w.views = append(w.views, v)
	w.mu.Unlock()
	reply(rw, map[string]any{"ok": true, "view": map[string]any{"id": "V0001"}})
}

// posted returns the messages the bot posted to channel, in order.
func (w *workspace) posted(channel string) []message {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []message
	for _, m := range w.msgs {
		if m.channel == channel {
			out = append(out, m)
		}
	}
	return out
}

func (w *workspace) postCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.posts
}

func (w *workspace) openedViews() []view {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.views)
}

// addHumanMessage puts a message of someone else in the thread (for a long thread in the
// reconciler's pages).
func (w *workspace) addHumanMessage(channel, threadTS, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	w.msgs = append(w.msgs, message{TS: fmt.Sprintf("1800000000.%06d", w.seq), ThreadTS: threadTS, User: human, Text: text, channel: channel})
}

// secretFile writes a secret to a file of the test's temporary directory and returns its path.
func secretFile(t testing.TB, name, value string) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// validButtons reports whether every button of an actions block keeps Slack's limits: a text of
// 1 to 75 characters (not only spaces) and a value of at most 2000 characters. Slack refuses a
// message with any other (invalid_blocks).
func validButtons(blocks string) bool {
	if blocks == "" {
		return true
	}
	var bs []struct {
		Elements []struct {
			Type  string `json:"type"`
			Value string `json:"value"`
			Text  struct {
				Text string `json:"text"`
			} `json:"text"`
		} `json:"elements"`
	}
	if json.Unmarshal([]byte(blocks), &bs) != nil {
		return false
	}
	for _, b := range bs {
		for _, e := range b.Elements {
			n := utf8.RuneCountInString(e.Text.Text)
			if e.Type == "button" && (strings.TrimSpace(e.Text.Text) == "" || n > 75 || utf8.RuneCountInString(e.Value) > 2000) {
				return false
			}
		}
	}
	return true
}
