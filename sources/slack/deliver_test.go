package slack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/sources"
	slacksrc "github.com/channels-dev/channels/sources/slack"
	"github.com/channels-dev/channels/sources/sourcetest"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/executor/echo"
	"github.com/channels-dev/channels/taskplane/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testClock is the delivery engine's clock: the wall clock moved forward by Advance, so retries,
// snoozes and leases can be skipped over while lanes still see time pass.
type testClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func newTestClock() *testClock { return &testClock{} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// route is the instance's delivery route, with a lane interval short enough for tests.
func (h *harness) route() delivery.Route {
	r := h.src.(interface{ Route() delivery.Route }).Route()
	r.LaneInterval = time.Millisecond
	return r
}

// engine returns a delivery engine over the harness's store with route, recording anchors the
// way serve does.
func (h *harness) engine(route delivery.Route, c *testClock, opts ...delivery.Option) *delivery.Engine {
	base := []delivery.Option{delivery.WithLogger(quiet), delivery.WithPoll(20 * time.Millisecond),
		delivery.WithAnchorRecorder(sources.RecordAnchorTx), delivery.WithClock(c.Now)}
	e := delivery.New(h.plane.Store(), delivery.Routes{slacksrc.Name: route}, append(base, opts...)...)
	h.t.Cleanup(func() { e.Close() })
	return e
}

func agent(id, text string) taskplane.Message {
	return taskplane.Message{ID: id, Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart(text)}}
}

type postedMetadata struct {
	EventType    string `json:"event_type"`
	EventPayload struct {
		DeliveryID string `json:"delivery_id"`
		Part       int    `json:"part"`
		Parts      int    `json:"parts"`
	} `json:"event_payload"`
}

func metadataOf(t testing.TB, m message) postedMetadata {
	t.Helper()
	var md postedMetadata
	mustUnmarshal(t, m.Metadata, &md)
	return md
}

func wantState(t testing.TB, rec delivery.Record, want delivery.State) {
	t.Helper()
	if rec.State != want {
		t.Fatalf("delivery %s is %s (last error %q), want %s", rec.ID, rec.State, rec.LastError, want)
	}
}

func TestSlackReplyIsPostedInTheThreadWithTheDeliveryID(t *testing.T) {
	h := newHarness(t, slacksrc.ModeEvents, nil)
	acc := h.work("events", callback("Ev-1", mention("ops", "Ev-1", "status?")))
	eng := h.engine(h.route(), newTestClock())
	rec, err := eng.Deliver(context.Background(), delivery.RequestFor(acc.Task, delivery.OpReply,
		agent("a1", "## Status\nAll **green**, see [the board](https://ci.example.com/b?x=1).\n- api: ok\n- web: ok")))
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, rec, delivery.StateDelivered)
	posts := h.w.posted(channelOf("ops"))
	if len(posts) != 1 {
		t.Fatalf("posts = %d, want 1", len(posts))
	}
	p := posts[0]
	if p.ThreadTS != rootOf("ops") {
		t.Fatalf("posted in thread %q, want %q", p.ThreadTS, rootOf("ops"))
	}
	want := "*Status*\nAll *green*, see <https://ci.example.com/b?x=1|the board>.\n• api: ok\n• web: ok"
	if p.Text != want {
		t.Fatalf("text %q, want %q", p.Text, want)
	}
	md := metadataOf(t, p)
	if md.EventType != slacksrc.MetadataEventType || md.EventPayload.DeliveryID != rec.ID || md.EventPayload.Parts != 1 {
		t.Fatalf("metadata %+v, want the delivery id %s", md, rec.ID)
	}
	if rec.ProviderID != slacksrc.AnchorID(channelOf("ops"), p.TS) {
		t.Fatalf("provider id %q", rec.ProviderID)
	}
	if rec.Lane != "slack:"+team+":"+channelOf("ops") {
		t.Fatalf("lane %q, want one per channel", rec.Lane)
	}
	// The instance itself is the engine's Sender, Reconciler and Laner.
	if _, ok := h.src.(sources.Laner); !ok {
		t.Fatal("the source is not a sources.Laner")
	}
	if _, ok := h.src.(sources.Reconciler); !ok {
		t.Fatal("the source is not a sources.Reconciler")
	}
	// The same request again is the same delivery: nothing is posted twice.
	again, err := eng.Deliver(context.Background(), delivery.RequestFor(acc.Task, delivery.OpReply,
		agent("a1", "## Status\nAll **green**, see [the board](https://ci.example.com/b?x=1).\n- api: ok\n- web: ok")))
	if err != nil || again.ID != rec.ID || h.w.postCount() != 1 {
		t.Fatalf("repeat: %v, %s, posts %d", err, again.ID, h.w.postCount())
	}
	// A failed task's answer says so.
	failed := h.work("events", callback("Ev-2", mention("ops", "Ev-2", "deploy")))
	task, err := h.plane.Apply(context.Background(), principal, failed.Task.ID, taskplane.AnyVersion,
		taskplane.SetStatus{State: taskplane.StateFailed, Message: &taskplane.Message{ID: "f", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("disk full")}}})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := eng.Deliver(context.Background(), delivery.RequestFor(task, delivery.OpReply, *task.Status.Message)); err != nil || rec.State != delivery.StateDelivered {
		t.Fatalf("failure reply: %+v %v", rec, err)
	}
	if posts := h.w.posted(channelOf("ops")); !strings.HasPrefix(posts[1].Text, ":x: *The work failed.*\n\ndisk full") {
		t.Fatalf("failure reply %q", posts[1].Text)
	}
}

func TestSlackLongOutputIsSplitAndResumedWithoutRepeats(t *testing.T) {
	h := newHarness(t, slacksrc.ModeEvents, func(o map[string]any) { o["max_message_chars"] = 1000 })
	acc := h.work("events", callback("Ev-1", mention("ops", "Ev-1", "the log please")))
	var b strings.Builder
	for i := range 60 {
		fmt.Fprintf(&b, "Line %02d of the build log, with enough words to make the output long.\n", i)
		if i%10 == 9 {
			b.WriteString("\n")
		}
	}
	// Slack rate-limits the third part once.
	var calls int
	h.w.beforePost = func(w http.ResponseWriter, f url.Values) bool {
		calls++
		if calls == 3 {
			w.Header().Set("Retry-After", "4")
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}
		return false
	}
	c := newTestClock()
	eng := h.engine(h.route(), c)
	rec, err := eng.Deliver(context.Background(), delivery.RequestFor(acc.Task, delivery.OpReply, agent("a1", b.String())))
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, rec, delivery.StatePrepared)
	if rec.Attempts != 0 {
		t.Fatalf("attempts = %d after a Retry-After, want 0 (given back)", rec.Attempts)
	}
	if n := len(h.w.posted(channelOf("ops"))); n != 2 {
		t.Fatalf("parts posted before the 429 = %d, want 2", n)
	}
	c.Advance(5 * time.Second)
	rec, err = eng.Process(context.Background(), rec.Principal, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, rec, delivery.StateDelivered)
	posts := h.w.posted(channelOf("ops"))
	if len(posts) < 6 {
		t.Fatalf("parts = %d, want the log split into 6 or more", len(posts))
	}
	seen := map[int]bool{}
	var joined strings.Builder
	for i, p := range posts {
		md := metadataOf(t, p)
		if md.EventPayload.DeliveryID != rec.ID || md.EventPayload.Part != i+1 || md.EventPayload.Parts != len(posts) || seen[md.EventPayload.Part] {
			t.Fatalf("part %d metadata %+v", i+1, md)
		}
		seen[md.EventPayload.Part] = true
		if len(p.Text) > 1000 || p.ThreadTS != rootOf("ops") {
			t.Fatalf("part %d: %d bytes in thread %q", i+1, len(p.Text), p.ThreadTS)
		}
		joined.WriteString(p.Text + "\n")
	}
	for i := range 60 {
		if !strings.Contains(joined.String(), fmt.Sprintf("Line %02d of", i)) {
			t.Fatalf("line %d is missing from the parts", i)
		}
	}
	if rec.ProviderID != slacksrc.AnchorID(channelOf("ops"), posts[len(posts)-1].TS) {
		t.Fatalf("provider id %q, want the last part", rec.ProviderID)
	}
	attempts, err := eng.Attempts(context.Background(), rec.Principal, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if attempts[0].Outcome != "retry-after" || attempts[0].RetryAfter != 4*time.Second || attempts[0].ProviderStatus != "429" {
		t.Fatalf("first attempt %+v, want retry-after 4s with status 429", attempts[0])
	}
}

func TestSlackRateLimitIsRetryAfterAndPermanentErrorsFail(t *testing.T) {
	h := newHarness(t, slacksrc.ModeEvents, nil)
	acc := h.work("events", callback("Ev-1", mention("ops", "Ev-1", "hi")))
	var mu sync.Mutex
	answer := "429"
	h.w.beforePost = func(w http.ResponseWriter, f url.Values) bool {
		mu.Lock()
		defer mu.Unlock()
		switch answer {
		case "429":
			answer = ""
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		case "channel_not_found", "internal_error":
			reply(w, map[string]any{"ok": false, "error": answer})
			return true
		}
		return false
	}
	c := newTestClock()
	eng := h.engine(h.route(), c)
	rec, err := eng.Deliver(context.Background(), delivery.RequestFor(acc.Task, delivery.OpReply, agent("a1", "hello")))
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, rec, delivery.StatePrepared)
	if d := rec.NextAttemptAt.Sub(c.Now()); d < 29*time.Second || rec.Attempts != 0 {
		t.Fatalf("snoozed for %s with %d attempts, want 30s and the attempt given back", d, rec.Attempts)
	}
	c.Advance(31 * time.Second)
	if rec, err = eng.Process(context.Background(), rec.Principal, rec.ID); err != nil {
		t.Fatal(err)
	}
	wantState(t, rec, delivery.StateDelivered)

	mu.Lock()
	answer = "channel_not_found"
	mu.Unlock()
	c.Advance(time.Second) // past the lane's pacing interval since the last send
	gone, err := eng.Deliver(context.Background(), delivery.RequestFor(acc.Task, delivery.OpReply, agent("a2", "again")))
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, gone, delivery.StateFailed)
	if gone.Attempts != 1 || !strings.Contains(gone.LastError, "channel_not_found") {
		t.Fatalf("failed after %d attempts with %q", gone.Attempts, gone.LastError)
	}
	// internal_error may have posted: the engine asks the thread instead of posting again.
	mu.Lock()
	answer = "internal_error"
	mu.Unlock()
	c.Advance(time.Second)
	unsure, err := eng.Deliver(context.Background(), delivery.RequestFor(acc.Task, delivery.OpReply, agent("a3", "third")))
	if err != nil {
		t.Fatal(err)
	}
	if unsure.State == delivery.StateFailed || unsure.State == delivery.StateDelivered {
		t.Fatalf("internal_error settled the delivery as %s", unsure.State)
	}
	if h.w.postCount() != 1 {
		t.Fatalf("posts = %d, want 1", h.w.postCount())
	}
}

// crashAfterSend makes the provider call, then dies like a process killed before it could write
// "delivered".
type crashAfterSend struct{ delivery.Sender }

func (c crashAfterSend) Send(ctx context.Context, d delivery.Delivery) (delivery.Receipt, error) {
	if _, err := c.Sender.Send(ctx, d); err != nil {
		panic(fmt.Sprintf("the post before the crash failed: %v", err))
	}
	runtime.Goexit()
	return delivery.Receipt{}, nil
}

func TestSlackCrashAfterPostingIsReconciledFromThreadMetadata(t *testing.T) {
	h := newHarness(t, slacksrc.ModeEvents, nil)
	acc := h.work("events", callback("Ev-1", mention("ops", "Ev-1", "deploy")))
	// A busy thread: the reconciler has to page well past the first page to find our message.
	h.w.pageSize = 3
	for i := range 40 {
		h.w.addHumanMessage(channelOf("ops"), rootOf("ops"), fmt.Sprintf("chatter %d", i))
	}
	c := newTestClock()
	route := h.route()
	crashing := route
	crashing.Sender = crashAfterSend{route.Sender}
	crashed := h.engine(crashing, c, delivery.WithOwner("crashed"))
	q := agent("q1", "Which environment?")
	waiting, err := h.plane.Apply(context.Background(), principal, acc.Task.ID, taskplane.AnyVersion,
		taskplane.SetStatus{State: taskplane.StateInputRequired, Message: &q})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := crashed.Prepare(context.Background(), delivery.RequestFor(waiting, delivery.OpQuestion, q))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = crashed.Process(context.Background(), rec.Principal, rec.ID)
	}()
	<-done
	left, err := crashed.Get(context.Background(), rec.Principal, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, left, delivery.StateSending)
	var ours []message
	for _, m := range h.w.posted(channelOf("ops")) {
		if m.BotID == botID {
			ours = append(ours, m)
		}
	}
	if len(ours) != 1 {
		t.Fatalf("posts before the restart = %d, want 1", len(ours))
	}
	// A new process starts after the dead one's lease ran out and its call could no longer land
	// (LookupGrace), and recovers at start-up.
	c.Advance(delivery.DefaultSendTimeout + delivery.DefaultPolicy.LookupGrace + time.Second)
	h.w.mu.Lock()
	h.w.repliesCalls = 0
	h.w.mu.Unlock()
	next := h.engine(route, c, delivery.WithOwner("restarted"))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- next.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	got, err := next.Wait(wctx, rec.Principal, rec.ID)
	cancel()
	if rerr := <-ran; rerr != nil {
		t.Errorf("Run: %v", rerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, got, delivery.StateDelivered)
	if got.ProviderID != slacksrc.AnchorID(channelOf("ops"), ours[0].TS) {
		t.Fatalf("provider id %q, want the message posted before the crash (%s)", got.ProviderID, ours[0].TS)
	}
	if n := h.w.postCount(); n != 1 {
		t.Fatalf("posts = %d after recovery, want 1: a crash must not post twice", n)
	}
	h.w.mu.Lock()
	pages := h.w.repliesCalls
	h.w.mu.Unlock()
	if pages < 14 {
		t.Fatalf("conversations.replies calls = %d, want the whole thread paged (>= 14 pages of 3)", pages)
	}
	ev, err := h.plane.Store().ListEvidence(context.Background(), store.EvidenceFilter{Principal: principal, Kind: delivery.EvidenceReconciled})
	if err != nil || len(ev) != 1 {
		t.Fatalf("reconciled evidence = %d, %v", len(ev), err)
	}
	// The reconciled question was anchored in the transaction that marked it delivered: the
	// answer given through its dialog continues the waiting task.
	ref, _ := json.Marshal(map[string]string{"c": channelOf("ops"), "ts": ours[0].TS, "th": rootOf("ops")})
	answer := h.work("interactive", viewSubmission("trig-1", string(ref), "staging"))
	if answer.Outcome != taskplane.Continued || answer.Task.ID != acc.Task.ID {
		t.Fatalf("answer to the reconciled question: %s task %s, want continued %s", answer.Outcome, answer.Task.ID, acc.Task.ID)
	}
}

func TestSlackLostResponseIsReconciledNotPostedTwice(t *testing.T) {
	h := newHarness(t, slacksrc.ModeSocket, nil)
	acc := h.work("events", callback("Ev-1", mention("ops", "Ev-1", "deploy")))
	// Slack posts the message, but its answer never arrives: the connection drops.
	var once sync.Once
	h.w.afterPost = func(w http.ResponseWriter, m message) bool {
		dropped := false
		once.Do(func() {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
				dropped = true
			}
		})
		return dropped
	}
	c := newTestClock()
	eng := h.engine(h.route(), c)
	rec, err := eng.Deliver(context.Background(), delivery.RequestFor(acc.Task, delivery.OpReply, agent("a1", "done")))
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, rec, delivery.StateSending)
	// The unknown outcome is left for a lookup once Slack has had time to finish what it may
	// still be working on (the engine's LookupGrace): it asks the thread.
	c.Advance(delivery.DefaultPolicy.LookupGrace + 2*time.Second)
	if rec, err = eng.Process(context.Background(), rec.Principal, rec.ID); err != nil {
		t.Fatal(err)
	}
	wantState(t, rec, delivery.StateDelivered)
	if n := h.w.postCount(); n != 1 {
		t.Fatalf("posts = %d, want 1", n)
	}
	attempts, err := eng.Attempts(context.Background(), rec.Principal, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, a := range attempts {
		kinds = append(kinds, a.Kind+":"+a.Outcome)
	}
	if !strings.Contains(strings.Join(kinds, " "), "lookup:") {
		t.Fatalf("attempts %v, want a lookup after the lost answer", kinds)
	}
}

func TestSlackHandledReactionIsAnIdempotentDelivery(t *testing.T) {
	h := newHarness(t, slacksrc.ModeEvents, nil)
	acc := h.work("events", callback("Ev-1", mention("ops", "Ev-1", "deploy")))
	eng := h.engine(h.route(), newTestClock())
	first, err := eng.Deliver(context.Background(), delivery.RequestFor(acc.Task, delivery.OpHandled, agent("h1", "handled")))
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, first, delivery.StateDelivered)
	h.w.mu.Lock()
	users := h.w.reactions[channelOf("ops")+":"+tsOf("Ev-1")]["white_check_mark"]
	h.w.mu.Unlock()
	if len(users) != 1 || users[0] != botUser {
		t.Fatalf("reactions on the mention: %v", users)
	}
	// Another handled delivery for the same message finds the reaction there: already_reacted
	// is success, not a failure.
	second, err := eng.Deliver(context.Background(), delivery.RequestFor(acc.Task, delivery.OpHandled, agent("h2", "handled again")))
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, second, delivery.StateDelivered)
	if second.ID == first.ID || second.ProviderID != first.ProviderID {
		t.Fatalf("second %s %s, first %s %s", second.ID, second.ProviderID, first.ID, first.ProviderID)
	}
	// And the reconciler sees it.
	r, found, err := h.src.(sources.Reconciler).Lookup(context.Background(), sources.Delivery{ID: first.ID, Operation: delivery.OpHandled, Locator: acc.Task.Origin.Locator})
	if err != nil || !found || r.ProviderID != first.ProviderID {
		t.Fatalf("Lookup(handled) = %+v %v %v", r, found, err)
	}
	// Lookup of a reply never posted: certainly not there.
	if _, found, err := h.src.(sources.Reconciler).Lookup(context.Background(), sources.Delivery{ID: "dlv_never", Operation: delivery.OpReply, Locator: acc.Task.Origin.Locator}); err != nil || found {
		t.Fatalf("Lookup(never posted) = %v %v", found, err)
	}
}

func TestSlackMentionIsAnsweredInTheThreadEndToEnd(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode string) {
		h := newHarness(t, mode, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		d := &taskplane.Dispatcher{Plane: h.plane, Executor: echo.New(), Poll: 20 * time.Millisecond}
		dispatched := make(chan error, 1)
		go func() { dispatched <- d.Run(ctx) }()
		defer func() { cancel(); <-dispatched }()
		eng := h.engine(h.route(), newTestClock())
		ran := make(chan error, 1)
		go func() { ran <- eng.Run(ctx) }()
		defer func() { cancel(); <-ran }()

		acc := h.work("events", callback("Ev-1", mention("ops", "Ev-1", "ping from *Slack*")))
		var task *taskplane.Task
		deadline := time.Now().Add(10 * time.Second)
		for {
			task = h.task(acc.Task.ID)
			if task.Status.State == taskplane.StateCompleted {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the echo agent did not complete the task: %s", task.Status.State)
			}
			time.Sleep(10 * time.Millisecond)
		}
		for _, op := range []string{delivery.OpReply, delivery.OpHandled} {
			rec, err := eng.Prepare(ctx, delivery.RequestFor(task, op, *task.Status.Message))
			if err != nil {
				t.Fatal(err)
			}
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			rec, err = eng.Wait(wctx, rec.Principal, rec.ID)
			wcancel()
			if err != nil {
				t.Fatal(err)
			}
			wantState(t, rec, delivery.StateDelivered)
		}
		posts := h.w.posted(channelOf("ops"))
		if len(posts) != 1 || posts[0].ThreadTS != rootOf("ops") || posts[0].Text != "ping from _Slack_" {
			t.Fatalf("posts %+v, want the echo in the thread", posts)
		}
		h.w.mu.Lock()
		reacted := len(h.w.reactions[channelOf("ops")+":"+tsOf("Ev-1")]["white_check_mark"])
		h.w.mu.Unlock()
		if reacted != 1 {
			t.Fatal("the mention has no handled reaction")
		}
		// Slack echoes our reply back as a message event: counted, never a Task.
		echoed := obj{"type": "message", "channel": channelOf("ops"), "channel_type": "channel", "ts": posts[0].TS,
			"thread_ts": posts[0].ThreadTS, "user": botUser, "bot_id": botID, "text": posts[0].Text}
		h.deliver("events", callback("Ev-echo", echoed), sourcetest.Acked, nil)
		if n := len(h.tasks()); n != 1 {
			t.Fatalf("tasks = %d, want 1", n)
		}
		var m postedMetadata
		_ = json.Unmarshal(posts[0].Metadata, &m)
		if !strings.HasPrefix(m.EventPayload.DeliveryID, "dlv_") {
			t.Fatalf("the reply carries no delivery id: %s", posts[0].Metadata)
		}
	})
}

// A 429 whose Retry-After is an HTTP date is waited for as asked; one without a usable
// Retry-After backs off, spending attempts, instead of snoozing for a guessed second and using up
// the bounded snoozes in about a minute (the answer would fail while Slack is merely busy).
func TestSlackRateLimitWithoutUsableRetryAfterBacksOff(t *testing.T) {
	for _, tc := range []struct {
		name, retryAfter string
		wantWait         time.Duration
	}{
		{"an HTTP date", "", 40 * time.Second},
		{"none", "", 0},
		{"garbage", "soon", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, slacksrc.ModeEvents, nil)
			acc := h.work("events", callback("Ev-1", mention("ops", "Ev-1", "hi")))
			var posts atomic.Int32
			h.w.beforePost = func(w http.ResponseWriter, f url.Values) bool {
				posts.Add(1)
				if tc.wantWait > 0 {
					w.Header().Set("Retry-After", time.Now().Add(tc.wantWait).UTC().Format(http.TimeFormat))
				} else if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.WriteHeader(http.StatusTooManyRequests)
				return true
			}
			c := newTestClock()
			start := c.Now()
			eng := h.engine(h.route(), c)
			rec, err := eng.Deliver(context.Background(), delivery.RequestFor(acc.Task, delivery.OpReply, agent("a1", "hello")))
			if err != nil {
				t.Fatal(err)
			}
			wantState(t, rec, delivery.StatePrepared)
			if tc.wantWait > 0 {
				if d := rec.NextAttemptAt.Sub(c.Now()); d < tc.wantWait-2*time.Second || d > tc.wantWait || rec.Attempts != 0 {
					t.Fatalf("snoozed for %s with %d attempts, want %s and the attempt given back", d, rec.Attempts, tc.wantWait)
				}
				return
			}
			if rec.Attempts != 1 {
				t.Fatalf("after a 429 without a usable Retry-After: %d attempts, want 1 spent", rec.Attempts)
			}
			for i := 0; i < 200 && !rec.State.Settled() && c.Now().Sub(start) < 5*time.Minute; i++ {
				c.Advance(1100 * time.Millisecond)
				if rec, err = eng.Process(context.Background(), rec.Principal, rec.ID); err != nil {
					t.Fatal(err)
				}
			}
			if rec.State.Settled() {
				t.Fatalf("delivery %s after %d posts in %s of 429s (%s)", rec.State, posts.Load(), c.Now().Sub(start).Round(time.Second), rec.LastError)
			}
		})
	}
}

// A chat.postMessage that Slack takes but finishes only after the engine's send timeout (Slack
// slow, not down) is not posted again: the lookup waits the engine's LookupGrace, long enough for
// the call to land, and then finds it.
func TestSlackTimedOutPostIsNotPostedTwice(t *testing.T) {
	h := newHarness(t, slacksrc.ModeEvents, nil)
	acc := h.work("events", callback("Ev-1", mention("ops", "Ev-1", "hi")))
	var calls atomic.Int32
	h.w.beforePost = func(w http.ResponseWriter, f url.Values) bool {
		if calls.Add(1) == 1 {
			time.Sleep(1500 * time.Millisecond) // it stores the message after the client gave up
		}
		return false
	}
	c := newTestClock()
	// A send timeout the call surely reaches Slack within, also on a loaded machine.
	eng := h.engine(h.route(), c, delivery.WithSendTimeout(time.Second))
	rec, err := eng.Deliver(context.Background(), delivery.RequestFor(acc.Task, delivery.OpReply, agent("a1", "hello")))
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, rec, delivery.StateSending)
	c.Advance(2 * time.Second) // a moment later Slack is still working on it
	if rec, err = eng.Process(context.Background(), rec.Principal, rec.ID); err != nil {
		t.Fatal(err)
	}
	wantState(t, rec, delivery.StateSending)
	// The first call lands (waited for, not assumed after a fixed sleep: a call that reached
	// the fake Slack late had not landed yet, and the lookup posted the answer again).
	for deadline := time.Now().Add(20 * time.Second); h.w.postCount() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first chat.postMessage never landed")
		}
	}
	c.Advance(delivery.DefaultPolicy.LookupGrace)
	if rec, err = eng.Process(context.Background(), rec.Principal, rec.ID); err != nil {
		t.Fatal(err)
	}
	wantState(t, rec, delivery.StateDelivered)
	if n := h.w.postCount(); n != 1 {
		t.Fatalf("posted %d times, want 1", n)
	}
}
