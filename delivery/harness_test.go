package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// clock is an injectable clock: lanes, retries and leases are measured on it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock {
	return &clock{t: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// post is one message the fake provider holds.
type post struct {
	DeliveryID string
	ProviderID string
	Lane       string
	At         time.Time
}

// provider is a fake provider behind a Sender and a Reconciler, like Slack: no idempotency key,
// but message metadata carries the delivery ID, so a lookup finds an earlier post. It is the
// provider, not a fake of our code; the store under test is always real.
type provider struct {
	clock *clock // nil: wall clock
	delay time.Duration
	// entered, if set, is closed when the first Send begins; again, if set, when a second one
	// begins; gate, if set, holds every Send until it is closed or its context is done.
	entered chan struct{}
	again   chan struct{}
	gate    chan struct{}
	sends   atomic.Int32 // Sends begun, counted only while entered is set

	mu    sync.Mutex
	calls map[string]int // Send calls per delivery ID
	posts []post
	// behave decides a Send: whether the message is posted, and the error returned. nil = post
	// and succeed.
	behave func(call int, d delivery.Delivery) (posted bool, err error)
	// afterPost runs after a post is recorded, before Send returns (a crash goes here).
	afterPost func()
	lookups   int
	lookupErr error
}

func newProvider(c *clock) *provider { return &provider{clock: c, calls: map[string]int{}} }

func (p *provider) now() time.Time {
	if p.clock != nil {
		return p.clock.Now()
	}
	return time.Now()
}

func laneOf(d delivery.Delivery) string {
	var loc struct {
		Channel string `json:"channel"`
	}
	_ = json.Unmarshal(d.Locator, &loc)
	return loc.Channel
}

func (p *provider) Send(ctx context.Context, d delivery.Delivery) (delivery.Receipt, error) {
	if p.entered != nil {
		switch p.sends.Add(1) {
		case 1:
			close(p.entered)
		case 2:
			if p.again != nil {
				close(p.again)
			}
		}
	}
	if p.gate != nil {
		select {
		case <-p.gate:
		case <-ctx.Done():
			return delivery.Receipt{}, ctx.Err()
		}
	}
	if p.delay > 0 {
		time.Sleep(p.delay)
	}
	p.mu.Lock()
	p.calls[d.ID]++
	call := p.calls[d.ID]
	posted, err := true, error(nil)
	if p.behave != nil {
		posted, err = p.behave(call, d)
	}
	var id string
	if posted {
		id = fmt.Sprintf("msg-%d", len(p.posts)+1)
		p.posts = append(p.posts, post{DeliveryID: d.ID, ProviderID: id, Lane: laneOf(d), At: p.now()})
	}
	after := p.afterPost
	p.mu.Unlock()
	if posted && after != nil {
		after()
	}
	if err != nil {
		return delivery.Receipt{}, err
	}
	return delivery.Receipt{ProviderID: id}, nil
}

func (p *provider) Lookup(ctx context.Context, d delivery.Delivery) (delivery.Receipt, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lookups++
	if p.lookupErr != nil {
		return delivery.Receipt{}, false, p.lookupErr
	}
	for _, m := range p.posts {
		if m.DeliveryID == d.ID {
			return delivery.Receipt{ProviderID: m.ProviderID}, true, nil
		}
	}
	return delivery.Receipt{}, false, nil
}

// postsOf returns the posts of one delivery.
func (p *provider) postsOf(id string) []post {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []post
	for _, m := range p.posts {
		if m.DeliveryID == id {
			out = append(out, m)
		}
	}
	return out
}

func (p *provider) totalCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		n += c
	}
	return n
}

func (p *provider) allPosts() []post {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]post(nil), p.posts...)
}

// sendOnly hides the provider's Lookup: a source without a reconciler.
type sendOnly struct{ p *provider }

func (s sendOnly) Send(ctx context.Context, d delivery.Delivery) (delivery.Receipt, error) {
	return s.p.Send(ctx, d)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newEngine builds an engine over s with one route, "slack", to p, on clock c (nil: wall clock).
func newEngine(t *testing.T, s store.Store, route delivery.Route, c *clock, opts ...delivery.Option) *delivery.Engine {
	t.Helper()
	base := []delivery.Option{delivery.WithLogger(quiet), delivery.WithPoll(20 * time.Millisecond)}
	if c != nil {
		base = append(base, delivery.WithClock(c.Now))
	}
	e := delivery.New(s, delivery.Routes{"slack": route}, append(base, opts...)...)
	t.Cleanup(func() { e.Close() })
	return e
}

func request(task, text string) delivery.Request {
	return delivery.Request{
		Principal: "alice", TaskID: task, ContextID: "ctx-" + task, Source: "slack", Operation: delivery.OpReply,
		State: taskplane.StateCompleted, Locator: json.RawMessage(`{"channel":"C1","thread":"1700000000.000100"}`),
		Message: taskplane.Message{ID: "m-" + task, Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart(text)}},
	}
}

func inChannel(r delivery.Request, channel string) delivery.Request {
	r.Locator = json.RawMessage(`{"channel":"` + channel + `"}`)
	return r
}

func mustDeliver(t *testing.T, e *delivery.Engine, r delivery.Request) delivery.Record {
	t.Helper()
	rec, err := e.Deliver(context.Background(), r)
	if err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	return rec
}

func mustProcess(t *testing.T, e *delivery.Engine, rec delivery.Record) delivery.Record {
	t.Helper()
	got, err := e.Process(context.Background(), rec.Principal, rec.ID)
	if err != nil {
		t.Fatalf("Process: %v", err)
	}
	return got
}

func wantState(t *testing.T, rec delivery.Record, want delivery.State) {
	t.Helper()
	if rec.State != want {
		t.Fatalf("delivery %s is %s (last error %q), want %s", rec.ID, rec.State, rec.LastError, want)
	}
}

// evidenceOf returns the evidence of one kind about one delivery.
func evidenceOf(t *testing.T, s store.Store, kind, deliveryID string) []map[string]any {
	t.Helper()
	rows, err := s.ListEvidence(context.Background(), store.EvidenceFilter{Kind: kind})
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, r := range rows {
		var d map[string]any
		if err := json.Unmarshal(r.Detail, &d); err != nil {
			t.Fatal(err)
		}
		if d["delivery"] == deliveryID {
			out = append(out, d)
		}
	}
	return out
}

func attempts(t *testing.T, e *delivery.Engine, rec delivery.Record) []delivery.Attempt {
	t.Helper()
	a, err := e.Attempts(context.Background(), rec.Principal, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func outcomes(as []delivery.Attempt) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Kind+":"+a.Outcome)
	}
	return out
}

var errTimeout = errors.New("read tcp: i/o timeout")

// prepareCrashing returns an engine of a process that will die, and a delivery it prepared.
func prepareCrashing(t *testing.T, s store.Store, route delivery.Route, c *clock) (*delivery.Engine, delivery.Record) {
	t.Helper()
	crashed := newEngine(t, s, route, c, delivery.WithOwner("crashed"))
	rec, err := crashed.Prepare(context.Background(), request("t-1", "the answer"))
	if err != nil {
		t.Fatal(err)
	}
	return crashed, rec
}

// crash processes rec on e in a goroutine that the provider ends (runtime.Goexit, from behave or
// afterPost): the process dies in its call, before it records an outcome.
func crash(e *delivery.Engine, rec delivery.Record) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Process(context.Background(), rec.Principal, rec.ID)
	}()
	<-done
}

// crashAfterPost processes rec on e in a goroutine that dies right after the provider took the
// call (the post is made, its outcome never recorded), and checks that it left the delivery in
// sending with one post.
func crashAfterPost(t *testing.T, p *provider, e *delivery.Engine, rec delivery.Record) {
	t.Helper()
	p.afterPost = runtime.Goexit
	crash(e, rec)
	p.afterPost = nil
	left, err := e.Get(context.Background(), rec.Principal, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, left, delivery.StateSending)
	if n := len(p.postsOf(rec.ID)); n != 1 {
		t.Fatalf("posts before recovery = %d, want 1", n)
	}
}

// dieInCall makes the provider's call-th Send of a delivery end its goroutine with the request at
// the provider and nothing posted yet; other calls post. A call before it returns what first
// returns (nil: post and succeed).
func (p *provider) dieInCall(call int, first func() (bool, error)) {
	p.behave = func(n int, _ delivery.Delivery) (bool, error) {
		switch {
		case n == call:
			p.mu.Unlock()
			runtime.Goexit()
		case n < call && first != nil:
			return first()
		}
		return true, nil
	}
}
