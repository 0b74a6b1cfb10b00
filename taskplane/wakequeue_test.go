package taskplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Microsecond) // every reading is later: FIFO by creation time holds
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// eachDriverWith runs fn per driver with a Plane built with opts.
func eachDriverWith(t *testing.T, fn func(t *testing.T, p *taskplane.Plane), opts ...taskplane.Option) {
	t.Helper()
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		fn(t, taskplane.New(open(t), opts...))
	})
}

func a2aEvent(id, text string) taskplane.Event {
	return taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: id, Message: textMsg(id, text)}
}

func claimAs(t *testing.T, p *taskplane.Plane, owner string) *taskplane.Grant {
	t.Helper()
	g, err := p.ClaimTurn(context.Background(), taskplane.ClaimRequest{Owner: owner, Lease: time.Minute})
	if err != nil {
		t.Fatalf("ClaimTurn(%s): %v", owner, err)
	}
	return g
}

func wantNoClaim(t *testing.T, p *taskplane.Plane, owner string) {
	t.Helper()
	if g := claimAs(t, p, owner); g != nil {
		t.Fatalf("ClaimTurn(%s) granted task %s (offer %d); want nothing due", owner, g.TaskID, g.Offer)
	}
}

func endTurn(t *testing.T, p *taskplane.Plane, g *taskplane.Grant) {
	t.Helper()
	if err := p.EndTurn(context.Background(), g, taskplane.TurnEnd{}); err != nil {
		t.Fatalf("EndTurn: %v", err)
	}
}

func evidenceDetails(t *testing.T, p *taskplane.Plane, kind, taskID string) []map[string]any {
	t.Helper()
	rows, err := p.Store().ListEvidence(context.Background(), store.EvidenceFilter{Kind: kind, TaskID: taskID})
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for i := len(rows) - 1; i >= 0; i-- { // oldest first
		var d map[string]any
		if err := json.Unmarshal(rows[i].Detail, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func taskState(t *testing.T, p *taskplane.Plane, id string) *taskplane.Task {
	t.Helper()
	task, err := p.GetTask(context.Background(), "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func reasonOf(task *taskplane.Task) string {
	if task.Status.Message == nil {
		return ""
	}
	r, _ := task.Status.Message.Metadata[taskplane.MetaReason].(string)
	return r
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runDispatcher runs a Dispatcher over p until the test ends.
func runDispatcher(t *testing.T, p *taskplane.Plane, exec taskplane.Executor, conc int) *taskplane.Dispatcher {
	t.Helper()
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: conc, Poll: 10 * time.Millisecond,
		RetryBackoff: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Run(ctx); err != nil {
			t.Errorf("dispatcher: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return d
}

func TestWakeFIFOAfterAcceptance(t *testing.T) {
	c := newFakeClock()
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		var ids []string
		for _, m := range []string{"m-a", "m-b", "m-c"} {
			ids = append(ids, mustAccept(t, p, a2aEvent(m, "hello")).Task.ID)
		}
		// An acceptance that fails leaves no wake behind.
		bad := a2aEvent("m-bad", "hello")
		bad.TaskID = "no-such-task"
		if _, err := p.Accept(context.Background(), bad); !errors.Is(err, taskplane.ErrTaskNotFound) {
			t.Fatalf("accept with a foreign taskId: %v", err)
		}
		var got []string
		for i := range 3 {
			g := claimAs(t, p, fmt.Sprintf("consumer-%d", i))
			if g == nil {
				t.Fatalf("claim %d: nothing due", i)
			}
			got = append(got, g.TaskID)
		}
		if fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Fatalf("claim order %v, want acceptance order %v", got, ids)
		}
		wantNoClaim(t, p, "consumer-x")
	}, taskplane.WithClock(c.Now))
}

func TestWakeSkipsCanceledWork(t *testing.T) {
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		canceled := mustAccept(t, p, a2aEvent("m-1", "never mind")).Task
		live := mustAccept(t, p, a2aEvent("m-2", "do it")).Task
		if _, _, err := p.Cancel(context.Background(), "alice", canceled.ID, nil); err != nil {
			t.Fatal(err)
		}
		g := claimAs(t, p, "consumer")
		if g == nil || g.TaskID != live.ID {
			t.Fatalf("claimed %+v, want the live task %s", g, live.ID)
		}
		wakes, err := p.Store().ListTaskWakes(context.Background(), "alice", canceled.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(wakes) != 1 || wakes[0].State != store.WakeDone || wakes[0].Attempts != 0 {
			t.Fatalf("canceled task's wake %+v, want done without an offer", wakes)
		}
		if n := len(evidenceDetails(t, p, taskplane.EvidenceWoken, canceled.ID)); n != 0 {
			t.Fatalf("canceled task was woken %d times", n)
		}
	})
}

func TestWakeAuthorityAtDelivery(t *testing.T) {
	c := newFakeClock()
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		task := mustAccept(t, p, a2aEvent("m-1", "hello")).Task
		if task.Status.State != taskplane.StateSubmitted || len(evidenceDetails(t, p, taskplane.EvidenceWoken, task.ID)) != 0 {
			t.Fatalf("before delivery: state %s, want SUBMITTED and no woken evidence", task.Status.State)
		}
		g := claimAs(t, p, "consumer-1")
		if g.Task.Status.State != taskplane.StateWorking || taskState(t, p, task.ID).Status.State != taskplane.StateWorking {
			t.Fatalf("at delivery: state %s, want WORKING", g.Task.Status.State)
		}
		woken := evidenceDetails(t, p, taskplane.EvidenceWoken, task.ID)
		if len(woken) != 1 || woken[0]["owner"] != "consumer-1" || woken[0]["offer"] != float64(1) {
			t.Fatalf("woken evidence %v, want one offer to consumer-1", woken)
		}
		turn := p.NewTurn(g)
		artifact := taskplane.AddArtifact{Artifact: taskplane.Artifact{ID: "a1", Parts: []taskplane.Part{taskplane.TextPart("x")}}}
		if err := turn.Update(ctx, artifact); err != nil {
			t.Fatalf("update during the turn: %v", err)
		}

		// The lease runs out: the turn's authority is gone at once, before anyone else claims the
		// task (no re-claim is needed to take it away).
		c.Advance(2 * time.Minute)
		if err := turn.Update(ctx, artifact); !errors.Is(err, taskplane.ErrNoTurn) {
			t.Fatalf("update after the lease ran out, before a re-claim: %v, want ErrNoTurn", err)
		}
		if _, err := p.RenewTurn(ctx, g, time.Minute); !errors.Is(err, taskplane.ErrNoTurn) {
			t.Fatalf("renewal after the lease ran out, before a re-claim: %v, want ErrNoTurn", err)
		}
		// Another consumer takes the task; the first turn stays without authority.
		g2 := claimAs(t, p, "consumer-2")
		if g2 == nil || g2.TaskID != task.ID || g2.Offer != 2 {
			t.Fatalf("re-claim after the lease ran out: %+v", g2)
		}
		if err := turn.Update(ctx, artifact); !errors.Is(err, taskplane.ErrNoTurn) {
			t.Fatalf("update with a stale lease: %v, want ErrNoTurn", err)
		}
		if err := p.EndTurn(ctx, g, taskplane.TurnEnd{}); !errors.Is(err, taskplane.ErrNoTurn) {
			t.Fatalf("EndTurn with a stale lease: %v, want ErrNoTurn", err)
		}

		// Held through the turn, cleared before the next: after EndTurn the grant is worthless.
		turn2 := p.NewTurn(g2)
		if err := turn2.Update(ctx, taskplane.SetStatus{State: taskplane.StateInputRequired,
			Message: &taskplane.Message{ID: "q", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("?")}}}); err != nil {
			t.Fatal(err)
		}
		endTurn(t, p, g2)
		if err := turn2.Update(ctx, artifact); !errors.Is(err, taskplane.ErrNoTurn) {
			t.Fatalf("update after the turn ended: %v, want ErrNoTurn", err)
		}
	}, taskplane.WithClock(c.Now))
}

// A turn whose lease ran out has no authority once the same owner (a Dispatcher's claimers share
// one) is offered the wake again: its renewal, updates and end are refused, and the new turn's
// are not.
func TestAnExpiredTurnHasNoAuthorityWhenItsOwnerGetsTheNextOffer(t *testing.T) {
	c := newFakeClock()
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		task := mustAccept(t, p, a2aEvent("m-1", "hello")).Task
		g1 := claimAs(t, p, "dispatcher-1")
		turn1 := p.NewTurn(g1)
		c.Advance(2 * time.Minute)
		g2 := claimAs(t, p, "dispatcher-1")
		if g2 == nil || g2.TaskID != task.ID || g2.WakeID != g1.WakeID || g2.Offer != 2 {
			t.Fatalf("re-claim by the same owner: %+v", g2)
		}
		if _, err := p.RenewTurn(ctx, g1, time.Minute); !errors.Is(err, taskplane.ErrNoTurn) {
			t.Fatalf("renewal of the expired turn: %v, want ErrNoTurn", err)
		}
		artifact := taskplane.AddArtifact{Artifact: taskplane.Artifact{ID: "a1", Parts: []taskplane.Part{taskplane.TextPart("x")}}}
		if err := turn1.Update(ctx, artifact); !errors.Is(err, taskplane.ErrNoTurn) {
			t.Fatalf("update of the expired turn: %v, want ErrNoTurn", err)
		}
		if err := p.EndTurn(ctx, g1, taskplane.TurnEnd{}); !errors.Is(err, taskplane.ErrNoTurn) {
			t.Fatalf("end of the expired turn: %v, want ErrNoTurn", err)
		}
		if _, err := p.RenewTurn(ctx, g2, time.Minute); err != nil {
			t.Fatalf("renewal of the current turn: %v", err)
		}
		turn2 := p.NewTurn(g2)
		if err := turn2.Update(ctx, artifact); err != nil {
			t.Fatalf("update of the current turn: %v", err)
		}
		endTurn(t, p, g2)
	}, taskplane.WithClock(c.Now))
}

// gatedResults is a flakyResults whose next hand-off, once gate is called, waits until released.
type gatedResults struct {
	flakyResults
	block   chan struct{}
	entered chan struct{}
}

// gate makes the next hand-off wait: entered is closed when it starts, and it goes on once
// release is closed.
func (g *gatedResults) gate() (entered chan struct{}, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.block, g.entered = make(chan struct{}), make(chan struct{})
	return g.entered, g.block
}

func (g *gatedResults) Settled(ctx context.Context, t *taskplane.Task) error {
	g.mu.Lock()
	b, e := g.block, g.entered
	g.block = nil
	g.mu.Unlock()
	if b != nil {
		close(e)
		<-b
	}
	return g.flakyResults.Settled(ctx, t)
}

// slowQuestionHandOff leaves a provider task waiting for an answer whose question hand-off failed,
// and starts a claim, as owner, that hands the question off again and stalls in that hand-off
// (res.gate). It returns the task, the release of the stalled hand-off and the claim's end.
func slowQuestionHandOff(t *testing.T, p *taskplane.Plane, c *fakeClock, res *gatedResults, owner string) (task *taskplane.Task, release, done chan struct{}) {
	t.Helper()
	ctx := context.Background()
	task = mustAccept(t, p, nativeEvent("alice", "e1", "conv", "book")).Task
	g := claimAs(t, p, owner)
	if err := p.NewTurn(g).RequireInput(ctx, taskplane.Question{Text: "for how many?"}); err != nil {
		t.Fatal(err)
	}
	res.mu.Lock()
	res.fail[taskplane.StateInputRequired] = 1
	res.mu.Unlock()
	endTurn(t, p, g) // the question's hand-off fails: the wake waits to hand it off again
	c.Advance(time.Second)
	entered, release := res.gate()
	done = make(chan struct{})
	go func() {
		defer close(done)
		if _, err := p.ClaimTurn(ctx, taskplane.ClaimRequest{Owner: owner, Lease: time.Minute}); err != nil {
			t.Errorf("claim: %v", err)
		}
	}()
	<-entered
	return task, release, done
}

// continueTask answers the task's question: a reply to the message its question went out as.
func continueTask(t *testing.T, p *taskplane.Plane, taskID, identity string) {
	t.Helper()
	if err := p.RecordAnchor(context.Background(), "alice", "webhook", "prov-"+taskID, taskID); err != nil {
		t.Fatal(err)
	}
	ev := nativeEvent("alice", identity, "conv", "four")
	ev.ReplyTo = "prov-" + taskID
	if a := mustAccept(t, p, ev); a.Outcome != taskplane.Continued {
		t.Fatalf("reply: %s (%s)", a.Outcome, a.AnchorMiss)
	}
}

// A claim that hands a settled task's result off again holds the task's wake while it does. When
// that hand-off outlasts the lease and, meanwhile, the task is continued and the same owner (a
// Dispatcher's claimers share one) claims the wake for the new turn, the late release leaves that
// turn's wake alone, whether the hand-off succeeded (it would retire the live turn's wake) or
// failed (it would put it back in the queue while the turn runs): the turn keeps its authority
// and the task finishes.
func TestAHeldResultWakeReleasedLateLeavesTheSameOwnersLiveTurnAlone(t *testing.T) {
	for _, fails := range []bool{false, true} {
		t.Run(fmt.Sprintf("handOffFails=%v", fails), func(t *testing.T) {
			c := newFakeClock()
			res := &gatedResults{flakyResults: flakyResults{fail: map[taskplane.State]int{}}}
			eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
				ctx := context.Background()
				task, release, done := slowQuestionHandOff(t, p, c, res, "d")
				if fails {
					res.mu.Lock()
					res.fail[taskplane.StateInputRequired] = 1
					res.mu.Unlock()
				}
				c.Advance(2 * time.Minute) // the stalled claim's lease runs out
				continueTask(t, p, task.ID, "e2")
				g2 := claimAs(t, p, "d")
				if g2 == nil || g2.TaskID != task.ID {
					t.Fatalf("the continued task was not offered: %+v", g2)
				}
				close(release)
				<-done
				if err := p.NewTurn(g2).Complete(ctx, nil); err != nil {
					t.Fatalf("the live turn lost its authority (task %s): %v", taskState(t, p, task.ID).Status.State, err)
				}
				endTurn(t, p, g2)
				if st := taskState(t, p, task.ID).Status.State; st != taskplane.StateCompleted {
					t.Fatalf("task %s, want COMPLETED", st)
				}
				ws, err := p.Store().ListTaskWakes(ctx, "alice", task.ID)
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range ws {
					if w.State != store.WakeDone {
						t.Errorf("wake %s left %s (%s)", w.ID, w.State, w.Detail)
					}
				}
			}, taskplane.WithClock(c.Now), taskplane.WithReofferDelay(time.Millisecond), taskplane.WithResults(res))
		})
	}
}

// A continuation accepted while a claim holds its task's wake to hand a result off waits for that
// wake; releasing it tells the claimers (as a turn's end does), so the continuation is not left
// for the next poll when the releasing claim goes on to older work.
func TestReleasingAHeldResultWakeAnnouncesTheContinuationItHeldBack(t *testing.T) {
	c := newFakeClock()
	res := &gatedResults{flakyResults: flakyResults{fail: map[taskplane.State]int{}}}
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		task, release, done := slowQuestionHandOff(t, p, c, res, "d")
		other := mustAccept(t, p, nativeEvent("alice", "e-other", "conv-other", "hello")).Task
		continueTask(t, p, task.ID, "e2")
		changed := p.WakesChanged()
		close(release)
		<-done
		select {
		case <-changed:
		default:
			t.Fatal("the continuation's wake became due when the held wake was released, and no claimer was told")
		}
		// The stalled claim went on to the older wake; the continuation is the next.
		if g := claimAs(t, p, "d"); g == nil || g.TaskID != task.ID {
			t.Fatalf("next claim: %+v, want the continued task %s (the other, %s, is taken)", g, task.ID, other.ID)
		}
	}, taskplane.WithClock(c.Now), taskplane.WithReofferDelay(time.Millisecond), taskplane.WithResults(res))
}

// The same, through a Dispatcher: when its turn's lease runs out (a stall) and one of its own
// claimers takes the next offer, the expired turn is stopped at its next heartbeat, and that
// stops it alone: the current turn runs on.
//
// The lease runs out on the fake clock, but a turn's watchdog (two thirds of a lease after its
// last renewal) runs on the real one: the lease is 3 s, so that a loaded machine (CI, -race)
// does not take the watchdog's margin over the heartbeat (with 600 ms it did, 5 runs in 25
// under load, stopping the current turn).
func TestADispatcherStopsItsExpiredTurnAndOnlyThatOne(t *testing.T) {
	c := newFakeClock()
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		type call struct {
			offer   int
			stopped chan struct{}
		}
		calls := make(chan call, 4)
		d := &taskplane.Dispatcher{Plane: p, Concurrency: 2, Poll: 10 * time.Millisecond, Lease: 3 * time.Second,
			RetryBackoff: time.Millisecond, Executor: taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
				cl := call{offer: turn.Grant().Offer, stopped: make(chan struct{})}
				calls <- cl
				<-ctx.Done()
				close(cl.stopped)
				return ctx.Err()
			})}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = d.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })

		mustAccept(t, p, a2aEvent("m-1", "hello"))
		next := func(what string) call {
			t.Helper()
			select {
			case cl := <-calls:
				return cl
			case <-time.After(10 * time.Second):
				t.Fatalf("no executor call: %s", what)
				return call{}
			}
		}
		first := next("the first offer")
		var second call
		for second.stopped == nil {
			c.Advance(time.Minute) // the lease runs out, as in a stall; a poll offers the wake again
			select {
			case second = <-calls:
			case <-time.After(100 * time.Millisecond): // a heartbeat renewed first: stall again
			}
		}
		// A claim still on its way when the clock last moved was outlived by it and offered once
		// more (a loaded machine): the latest offer is the current turn.
		for more := true; more; {
			select {
			case cl := <-calls:
				second = cl
			case <-time.After(time.Second):
				more = false
			}
		}
		if second.offer <= first.offer {
			t.Fatalf("offers %d then %d", first.offer, second.offer)
		}
		select {
		case <-first.stopped:
		case <-time.After(10 * time.Second):
			t.Fatal("the expired turn is still running")
		}
		select {
		case <-second.stopped:
			t.Fatal("stopping the expired turn stopped the current one")
		case <-time.After(3500 * time.Millisecond): // several heartbeats of the current turn
		}
	}, taskplane.WithClock(c.Now))
}

// holdStore is a store whose next transactional call of one method (GetWake or UpdateTask), once
// armed, reports that it has run and waits for release before returning: a transaction caught
// half-way, between a statement and the next.
type holdStore struct {
	store.Store
	method  string
	armed   atomic.Bool
	read    chan struct{}
	release chan struct{}
}

func newHoldStore(s store.Store, method string) *holdStore {
	return &holdStore{Store: s, method: method, read: make(chan struct{}), release: make(chan struct{})}
}

func (h *holdStore) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	return h.Store.Update(ctx, func(ctx context.Context, tx store.Tx) error { return fn(ctx, holdTx{tx, h}) })
}

// hold waits for release if h is armed for method.
func (h *holdStore) hold(method string) {
	if h.method == method && h.armed.CompareAndSwap(true, false) {
		close(h.read)
		<-h.release
	}
}

type holdTx struct {
	store.Tx
	h *holdStore
}

func (t holdTx) GetWake(ctx context.Context, principal, id string) (store.Wake, error) {
	w, err := t.Tx.GetWake(ctx, principal, id)
	t.h.hold("GetWake")
	return w, err
}

func (t holdTx) UpdateTask(ctx context.Context, task store.Task, expectVersion int64) error {
	err := t.Tx.UpdateTask(ctx, task, expectVersion)
	t.h.hold("UpdateTask")
	return err
}

// A renewal that read the wake before the turn's end retired it does not bring it back (as when
// the worker API's renewal races the worker's end of turn): the end waits for the renewal (or,
// on SQLite, the one writer runs them one after the other), and the wake ends retired.
func TestARenewalRacingTheEndOfTheTurnLeavesTheWakeRetired(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := context.Background()
		h := newHoldStore(open(t), "GetWake")
		p := taskplane.New(h)
		task := mustAccept(t, p, a2aEvent("m-1", "hello")).Task
		g := claimAs(t, p, "worker-1")
		if err := p.NewTurn(g).Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted,
			Message: &taskplane.Message{ID: "done", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("ok")}}}); err != nil {
			t.Fatal(err)
		}
		h.armed.Store(true)
		renewed := make(chan error, 1)
		go func() {
			_, err := p.RenewTurn(ctx, g, time.Minute)
			renewed <- err
		}()
		<-h.read // the renewal has read the wake, active
		ended := make(chan error, 2)
		go func() { ended <- p.EndTurn(ctx, g, taskplane.TurnEnd{}) }()
		select {
		case err := <-ended:
			t.Logf("the end of the turn committed while the renewal held the wake: %v", err)
			ended <- err
		case <-time.After(200 * time.Millisecond): // it waits for the renewal
		}
		close(h.release)
		for what, ch := range map[string]chan error{"renewal": renewed, "end of the turn": ended} {
			select {
			case err := <-ch:
				if err != nil && !errors.Is(err, taskplane.ErrNoTurn) {
					t.Fatalf("%s: %v", what, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s did not return", what)
			}
		}
		wakes, err := h.ListTaskWakes(ctx, "alice", task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(wakes) != 1 || wakes[0].State != store.WakeDone {
			t.Fatalf("wakes after the race: %+v, want the one wake done", wakes)
		}
	})
}

// A turn's update and a cancel of its task, written at once on Postgres, take their locks in one
// order (the event first, then the task row), so one waits for the other instead of the two
// deadlocking. The server's deadlock_timeout is raised for the test, so a deadlock would hang
// rather than be broken after a second and retried.
func TestATurnUpdateAndACancelOfItsTaskDoNotDeadlock(t *testing.T) {
	raw := storetest.PostgresURL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("deadlock_timeout", "60s") // a runtime parameter, sent when each connection starts
	app := q.Get("search_path")      // the schema is the test's own
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	ctx := context.Background()
	s, err := store.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	admin, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	h := newHoldStore(s, "UpdateTask")
	p := taskplane.New(h)
	task := mustAccept(t, p, a2aEvent("m-1", "hello")).Task
	turn := p.NewTurn(claimAs(t, p, "dispatcher-1"))

	h.armed.Store(true)
	updated := make(chan error, 1)
	go func() {
		updated <- turn.Update(ctx, taskplane.AddArtifact{Artifact: taskplane.Artifact{ID: "a1",
			Parts: []taskplane.Part{taskplane.TextPart("x")}}})
	}()
	<-h.read // the turn's transaction has written the task row
	canceled := make(chan error, 1)
	go func() {
		_, _, err := p.Cancel(ctx, "alice", task.ID, nil)
		canceled <- err
	}()
	// The cancel must write the task row the turn's transaction holds: it reaches the turn's
	// locks when one of the store's connections waits on a lock.
	waitFor(t, "the cancel to wait on the turn's locks", func() bool {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	close(h.release)
	for what, ch := range map[string]chan error{"turn update": updated, "cancel": canceled} {
		select {
		case err := <-ch:
			if err != nil && !errors.Is(err, taskplane.ErrNoTurn) && !errors.Is(err, taskplane.ErrTaskTerminal) {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s is stuck: the two transactions deadlocked", what)
		}
	}
	final := taskState(t, p, task.ID)
	if final.Status.State != taskplane.StateCanceled {
		t.Fatalf("task %s, want CANCELED", final.Status.State)
	}
	evs, err := s.TaskEvents(ctx, "alice", task.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the log has a gap", i, ev.Seq)
		}
	}
	if n := int64(len(evs)); n != final.LastSeq {
		t.Fatalf("%d events, the task is at seq %d", n, final.LastSeq)
	}
}

func TestWakeOneReofferAfterWoken(t *testing.T) {
	c := newFakeClock()
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		task := mustAccept(t, p, a2aEvent("m-1", "hello")).Task
		// A process is woken for the task and dies mid-turn: no EndTurn, its lease runs out.
		if g := claimAs(t, p, "dead-process"); g == nil {
			t.Fatal("nothing to claim")
		}
		c.Advance(2 * time.Minute)
		var calls atomic.Int32
		runDispatcher(t, p, taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
			calls.Add(1)
			return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted})
		}), 4)
		waitFor(t, "the task to complete", func() bool { return taskState(t, p, task.ID).Status.State == taskplane.StateCompleted })
		time.Sleep(50 * time.Millisecond) // a second re-offer would show up here
		if n := calls.Load(); n != 1 {
			t.Fatalf("executor called %d times after the restart, want exactly one re-offer", n)
		}
		woken := evidenceDetails(t, p, taskplane.EvidenceWoken, task.ID)
		if len(woken) != 2 || woken[0]["offer"] != float64(1) || woken[1]["offer"] != float64(2) {
			t.Fatalf("woken evidence %v, want offers 1 (the dead process) and 2", woken)
		}
	}, taskplane.WithClock(c.Now))
}

func TestWakeUnansweredInputRequiredNotReoffered(t *testing.T) {
	c := newFakeClock()
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		task := mustAccept(t, p, a2aEvent("m-1", "book a table")).Task
		// The turn asks a question, then its process dies before ending the turn.
		g := claimAs(t, p, "dead-process")
		q := &taskplane.Message{ID: "q-1", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("for how many?")}}
		if err := p.NewTurn(g).Update(ctx, taskplane.SetStatus{State: taskplane.StateInputRequired, Message: q}); err != nil {
			t.Fatal(err)
		}
		c.Advance(2 * time.Minute)
		// After the restart the unanswered question is not re-offered.
		wantNoClaim(t, p, "restarted")
		if st := taskState(t, p, task.ID).Status.State; st != taskplane.StateInputRequired {
			t.Fatalf("state %s, want INPUT_REQUIRED", st)
		}
		// A continuation newer than the question is.
		answer := a2aEvent("m-2", "four")
		answer.TaskID = task.ID
		mustAccept(t, p, answer)
		g2 := claimAs(t, p, "restarted")
		if g2 == nil || g2.TaskID != task.ID || g2.Offer != 1 {
			t.Fatalf("claim after the answer: %+v, want the first offer of the continuation's wake", g2)
		}
		if last := g2.Task.History[len(g2.Task.History)-1]; last.ID != "m-2" {
			t.Fatalf("the turn's task ends with %s, want the answer m-2", last.ID)
		}
		if n := len(evidenceDetails(t, p, taskplane.EvidenceWoken, task.ID)); n != 2 {
			t.Fatalf("woken %d times, want 2 (the question's turn and the answer's)", n)
		}
	}, taskplane.WithClock(c.Now))
}

func TestWakeBoundedRetries(t *testing.T) {
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		var calls atomic.Int32
		runDispatcher(t, p, taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
			calls.Add(1)
			return taskplane.Transport(errors.New("dial tcp: connection refused"))
		}), 2)
		task := mustAccept(t, p, a2aEvent("m-1", "hello")).Task
		waitFor(t, "the task to fail", func() bool { return taskState(t, p, task.ID).Status.State == taskplane.StateFailed })
		// The documented bound (DESIGN.md §4, invariant 7: retry 3), not the constant, so a change
		// of the constant is a change of this test.
		if n := calls.Load(); n != 4 {
			t.Fatalf("executor called %d times, want 4 (the first call and 3 retries)", n)
		}
		if r := reasonOf(taskState(t, p, task.ID)); r != taskplane.ReasonTransport {
			t.Fatalf("failure reason %q, want %q", r, taskplane.ReasonTransport)
		}
		failed := evidenceDetails(t, p, taskplane.EvidenceWakeFailed, task.ID)
		if len(failed) != 1 || failed[0]["reason"] != taskplane.ReasonTransport || failed[0]["attempts"] != float64(4) {
			t.Fatalf("wake-failed evidence %v, want reason transport after 4 attempts", failed)
		}
		// A transport failure is retried within the turn, not re-offered.
		if n := len(evidenceDetails(t, p, taskplane.EvidenceWoken, task.ID)); n != 1 {
			t.Fatalf("woken %d times, want 1", n)
		}
	})
}

func TestWakeReofferCap(t *testing.T) {
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		var calls atomic.Int32
		runDispatcher(t, p, taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
			calls.Add(1)
			return nil // leaves the task WORKING: unsettled
		}), 2)
		task := mustAccept(t, p, a2aEvent("m-1", "hello")).Task
		waitFor(t, "the task to fail", func() bool { return taskState(t, p, task.ID).Status.State == taskplane.StateFailed })
		// The documented cap (DESIGN.md §4, invariant 7: re-offer cap 5), not the constant.
		if n := calls.Load(); n != 6 {
			t.Fatalf("offered %d times, want 6 (the first offer and 5 re-offers)", n)
		}
		if r := reasonOf(taskState(t, p, task.ID)); r != taskplane.ReasonReofferCap {
			t.Fatalf("failure reason %q", r)
		}
		failed := evidenceDetails(t, p, taskplane.EvidenceWakeFailed, task.ID)
		if len(failed) != 1 || failed[0]["reason"] != taskplane.ReasonReofferCap {
			t.Fatalf("wake-failed evidence %v", failed)
		}
		if n := len(evidenceDetails(t, p, taskplane.EvidenceUnhealthy, task.ID)); n != 1 {
			t.Fatalf("%d unhealthy evidence rows, want 1", n)
		}
		wakes, err := p.Store().ListTaskWakes(context.Background(), "alice", task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(wakes) != 1 || wakes[0].State != store.WakeFailed || wakes[0].Attempts != 6 {
			t.Fatalf("wake %+v, want failed after 6 offers", wakes)
		}
	}, taskplane.WithReofferDelay(time.Millisecond))
}

func TestWakeOverflowEvidence(t *testing.T) {
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		a := mustAccept(t, p, a2aEvent("m-a", "one")).Task
		mustAccept(t, p, a2aEvent("m-b", "two"))
		// Two wait: a third is refused, durably and visibly.
		over := mustAccept(t, p, a2aEvent("m-c", "three"))
		if over.Task.Status.State != taskplane.StateFailed || reasonOf(over.Task) != taskplane.ReasonOverflow {
			t.Fatalf("third task %s (reason %q), want FAILED with reason overflow", over.Task.Status.State, reasonOf(over.Task))
		}
		failed := evidenceDetails(t, p, taskplane.EvidenceWakeFailed, over.Task.ID)
		if len(failed) != 1 || failed[0]["reason"] != taskplane.ReasonOverflow || failed[0]["waiting"] != float64(2) {
			t.Fatalf("wake-failed evidence %v", failed)
		}
		// The queue is shared by all principals: how full it is goes to the operator's evidence
		// only, never into the refused task its owner reads.
		if m := over.Task.Status.Message; m == nil || len(m.Parts) != 1 || strings.ContainsAny(m.Parts[0].Text, "0123456789") {
			t.Fatalf("refusal message %+v: want a text without the queue's length", m)
		}
		// The bound counts waiting wakes, not active ones: once a turn starts there is room.
		if g := claimAs(t, p, "consumer"); g == nil || g.TaskID != a.ID {
			t.Fatalf("claim %+v", g)
		}
		if d := mustAccept(t, p, a2aEvent("m-d", "four")).Task; d.Status.State != taskplane.StateSubmitted {
			t.Fatalf("fourth task %s, want SUBMITTED", d.Status.State)
		}
	}, taskplane.WithMaxWaiting(2))
}

func TestWakeNoSecondWakeMidTurn(t *testing.T) {
	c := newFakeClock()
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		task := mustAccept(t, p, a2aEvent("m-1", "first")).Task
		g := claimAs(t, p, "consumer-1")
		// A follow-up arrives mid-turn: it is queued, but not offered while the turn is live.
		more := a2aEvent("m-2", "second")
		more.TaskID = task.ID
		mustAccept(t, p, more)
		wantNoClaim(t, p, "consumer-2")
		c.Advance(30 * time.Second)
		wantNoClaim(t, p, "consumer-2")
		// The turn ends unsettled: one re-offer serves both wakes, with both messages.
		endTurn(t, p, g)
		c.Advance(time.Minute)
		g2 := claimAs(t, p, "consumer-2")
		if g2 == nil || g2.TaskID != task.ID {
			t.Fatalf("claim after the turn: %+v", g2)
		}
		if n := len(g2.Task.History); n != 2 {
			t.Fatalf("the turn sees %d messages, want both", n)
		}
		wantNoClaim(t, p, "consumer-3")
		wakes, err := p.Store().ListTaskWakes(context.Background(), "alice", task.ID)
		if err != nil {
			t.Fatal(err)
		}
		active := 0
		for _, w := range wakes {
			if w.State == store.WakeActive {
				active++
			}
		}
		if active != 1 {
			t.Fatalf("%d active wakes of one task, want 1: %+v", active, wakes)
		}
	}, taskplane.WithClock(c.Now))
}

// TestWakeDispatcherRunsOneTurnPerTask drives a Dispatcher with follow-ups arriving during turns and
// checks no task ever has two turns at once.
func TestWakeDispatcherRunsOneTurnPerTask(t *testing.T) {
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		var (
			mu      sync.Mutex
			inTurn  = map[string]bool{}
			overlap atomic.Bool
			turns   atomic.Int32
			// The first turn holds until both follow-ups are accepted, so they always arrive
			// mid-turn, however slow the machine.
			followedUp = make(chan struct{})
		)
		runDispatcher(t, p, taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
			if turns.Load() == 0 {
				select {
				case <-followedUp:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			mu.Lock()
			if inTurn[turn.Task.ID] {
				overlap.Store(true)
			}
			inTurn[turn.Task.ID] = true
			mu.Unlock()
			turns.Add(1)
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			inTurn[turn.Task.ID] = false
			mu.Unlock()
			if len(turn.Task.History) >= 3 {
				return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted})
			}
			return nil // unsettled: offered again, with whatever arrived meanwhile
		}), 8)
		task := mustAccept(t, p, a2aEvent("m-1", "one")).Task
		for _, m := range []string{"m-2", "m-3"} {
			time.Sleep(5 * time.Millisecond)
			ev := a2aEvent(m, m)
			ev.TaskID = task.ID
			mustAccept(t, p, ev)
		}
		close(followedUp)
		waitFor(t, "completion", func() bool { return taskState(t, p, task.ID).Status.State == taskplane.StateCompleted })
		if overlap.Load() {
			t.Fatal("two turns of one task ran at once")
		}
	}, taskplane.WithReofferDelay(time.Millisecond))
}

// TestWakeClaimsAcrossProcessesNeverShareATurn: four Planes on one Postgres schema stand in for
// four Channels processes; every task gets exactly one grant.
func TestWakeClaimsAcrossProcessesNeverShareATurn(t *testing.T) {
	stores := storetest.OpenPostgresShared(t, 4)
	planes := make([]*taskplane.Plane, len(stores))
	for i, s := range stores {
		planes[i] = taskplane.New(s)
	}
	// Several rounds, each a fresh batch of tasks claimed by every claimer released at once: a
	// claim that takes a row another claimer leased after the first read shows in one round or
	// another.
	const rounds, tasks = 8, 20
	for round := range rounds {
		for i := range tasks {
			mustAccept(t, planes[0], a2aEvent(fmt.Sprintf("m-%d-%02d", round, i), "work"))
		}
		var (
			mu     sync.Mutex
			grants = map[string]int{}
			wg     sync.WaitGroup
			start  = make(chan struct{})
		)
		for i, p := range planes {
			for j := range 3 {
				wg.Go(func() {
					owner := fmt.Sprintf("process-%d-%d", i, j)
					<-start
					for {
						g, err := p.ClaimTurn(context.Background(), taskplane.ClaimRequest{Owner: owner, Lease: time.Minute})
						if err != nil {
							t.Errorf("%s: %v", owner, err)
							return
						}
						if g == nil {
							return
						}
						mu.Lock()
						grants[g.TaskID]++
						mu.Unlock()
					}
				})
			}
		}
		close(start)
		wg.Wait()
		if len(grants) != tasks {
			t.Fatalf("round %d: %d of %d tasks granted", round, len(grants), tasks)
		}
		for id, n := range grants {
			if n != 1 {
				t.Errorf("round %d: task %s granted %d times", round, id, n)
			}
		}
		if t.Failed() {
			return
		}
	}
}

func TestIdleClaimerGetsTheNewTasksFirstTurnInTheAcceptance(t *testing.T) {
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		handed := p.ParkClaimer("disp-1", time.Minute)
		acc, err := p.Accept(ctx, a2aEvent("m-1", "hello"))
		if err != nil {
			t.Fatal(err)
		}
		// The acceptance reports the task as the event made it; the grant came with it.
		if acc.Outcome != taskplane.Created || acc.Task.Status.State != taskplane.StateSubmitted {
			t.Fatalf("acceptance: %s, task %s; want created, SUBMITTED", acc.Outcome, acc.Task.Status.State)
		}
		g, taken := handed()
		if !taken || g == nil {
			t.Fatalf("the idle claimer was not handed the turn when Accept returned (taken %v, grant %v)", taken, g)
		}
		if g.TaskID != acc.Task.ID || g.Owner != "disp-1" || g.Offer != 1 || g.Task.Status.State != taskplane.StateWorking {
			t.Fatalf("grant: task %s owner %s offer %d state %s", g.TaskID, g.Owner, g.Offer, g.Task.Status.State)
		}
		// Durable: the stored task is WORKING, its log is the creation then the move to WORKING,
		// and the wake is leased, so no other claimer finds it.
		if st := taskState(t, p, acc.Task.ID).Status.State; st != taskplane.StateWorking {
			t.Fatalf("stored task is %s, want WORKING", st)
		}
		evs, err := p.Events(ctx, "alice", acc.Task.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 || evs[0].Kind != taskplane.EventTask || evs[1].Kind != taskplane.EventStatus ||
			evs[1].Status.Status.State != taskplane.StateWorking {
			t.Fatalf("log: %+v; want the task, then status WORKING", evs)
		}
		wantNoClaim(t, p, "other")
		if woken := evidenceDetails(t, p, taskplane.EvidenceWoken, acc.Task.ID); len(woken) != 1 || woken[0]["owner"] != "disp-1" {
			t.Fatalf("woken evidence: %v", woken)
		}
		// The turn works like a claimed one, and finishing the task ends it.
		if err := p.NewTurn(g).Complete(ctx, nil); err != nil {
			t.Fatal(err)
		}
		endTurn(t, p, g)
		wantNoClaim(t, p, "other")
	})
}

func TestAcceptanceHandsNoTurnWhileAnEarlierWakeWaits(t *testing.T) {
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		p.WakeHints()
		first, err := p.Accept(ctx, a2aEvent("m-1", "first")) // no claimer idle: a hint waits
		if err != nil {
			t.Fatal(err)
		}
		handed := p.ParkClaimer("disp-1", time.Minute)
		if _, err := p.Accept(ctx, a2aEvent("m-2", "second")); err != nil {
			t.Fatal(err)
		}
		if _, taken := handed(); taken {
			t.Fatal("the second task's acceptance took the idle claimer while the first task's wake waited")
		}
		if g := claimAs(t, p, "disp-1"); g == nil || g.TaskID != first.Task.ID {
			t.Fatalf("claim: %+v; want the first task (oldest first)", g)
		}
	})
}

// An earlier wake accepted by another process sharing the store is waiting too: this process's
// acceptance leaves its idle claimer to claim the oldest wake instead of handing it the new task.
func TestAcceptanceHandsNoTurnWhileAnotherProcesssEarlierWakeWaits(t *testing.T) {
	stores := storetest.OpenPostgresShared(t, 2)
	pa, pb := taskplane.New(stores[0]), taskplane.New(stores[1])
	ctx := context.Background()
	pa.WakeHints()
	first, err := pb.Accept(ctx, a2aEvent("m-1", "first")) // accepted by the other process
	if err != nil {
		t.Fatal(err)
	}
	handed := pa.ParkClaimer("disp-a", time.Minute)
	if _, err := pa.Accept(ctx, a2aEvent("m-2", "second")); err != nil {
		t.Fatal(err)
	}
	if g, taken := handed(); taken && g != nil {
		t.Fatalf("the second task's acceptance handed the idle claimer task %s while the first task's wake, accepted by another process, waited", g.TaskID)
	}
	if g := claimAs(t, pa, "disp-a"); g == nil || g.TaskID != first.Task.ID {
		t.Fatalf("claim: %+v; want the first task (oldest first)", g)
	}
}

func TestAcceptanceThatMakesNoTaskReleasesTheClaimer(t *testing.T) {
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		acc, err := p.Accept(ctx, a2aEvent("m-1", "hello"))
		if err != nil {
			t.Fatal(err)
		}
		handed := p.ParkClaimer("disp-1", time.Minute)
		dup, err := p.Accept(ctx, a2aEvent("m-1", "hello"))
		if err != nil || dup.Outcome != taskplane.Duplicate {
			t.Fatalf("duplicate: %v %v", dup.Outcome, err)
		}
		if g, taken := handed(); !taken || g != nil {
			t.Fatalf("after a duplicate the claimer got (%v, taken %v); want released with no grant", g, taken)
		}
		// The first task's wake is still there for a claimer.
		if g := claimAs(t, p, "disp-2"); g == nil || g.TaskID != acc.Task.ID {
			t.Fatalf("claim: %+v", g)
		}
	})
}

// lostCommitStore is a real store whose Update, while lose is set, commits and then reports an
// error anyway, as a connection lost just after COMMIT was sent leaves the caller.
type lostCommitStore struct {
	store.Store
	lose bool
}

var errCommitLost = errors.New("connection lost after COMMIT")

func (s *lostCommitStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	if err := s.Store.Update(ctx, fn); err != nil || !s.lose {
		return err
	}
	return errCommitLost
}

// rolledBackStore is a real store whose Update runs the fn successfully, then rolls its
// transaction back and reports an error: a commit that failed after the work succeeded.
type rolledBackStore struct{ store.Store }

func (s *rolledBackStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	err := s.Store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := fn(ctx, tx); err != nil {
			return err
		}
		return errCommitLost // rolls the fn's writes back
	})
	return err
}

// An acceptance whose commit outcome is lost still hands over the turn it committed: the
// claimer runs it now, instead of the task waiting for the lease to run out. One that did not
// commit hands nothing.
func TestAcceptanceWithALostCommitOutcomeHandsTheTurnItCommitted(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := context.Background()
		s := &lostCommitStore{Store: open(t), lose: true}
		p := taskplane.New(s)
		handed := p.ParkClaimer("disp-1", time.Minute)
		if _, err := p.Accept(ctx, a2aEvent("m-1", "hello")); !errors.Is(err, errCommitLost) {
			t.Fatalf("Accept = %v, want the lost commit's error", err)
		}
		g, taken := handed()
		if !taken || g == nil {
			t.Fatalf("the claimer got (%v, taken %v); want the committed grant", g, taken)
		}
		if g.Owner != "disp-1" || g.Task.Status.State != taskplane.StateWorking {
			t.Fatalf("grant: owner %s, task %s", g.Owner, g.Task.Status.State)
		}
		// The grant is the real one: the turn finishes the task and ends.
		s.lose = false
		if err := p.NewTurn(g).Complete(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if st := taskState(t, p, g.TaskID).Status.State; st != taskplane.StateCompleted {
			t.Fatalf("task is %s after the turn, want COMPLETED", st)
		}
		// The client's retry is a duplicate of the committed acceptance.
		dup, err := p.Accept(ctx, a2aEvent("m-1", "hello"))
		if err != nil || dup.Outcome != taskplane.Duplicate || dup.Task.ID != g.TaskID {
			t.Fatalf("retry: %+v, %v; want the duplicate of task %s", dup, err, g.TaskID)
		}

		// The work succeeded but the commit did not (rolled back, then reported): the grant read
		// back is not there, so the claimer gets nothing.
		rb := &rolledBackStore{Store: open(t)}
		p3 := taskplane.New(rb)
		handed3 := p3.ParkClaimer("disp-3", time.Minute)
		if _, err := p3.Accept(ctx, a2aEvent("m-3", "hello")); !errors.Is(err, errCommitLost) {
			t.Fatalf("Accept = %v, want the rolled-back commit's error", err)
		}
		if g, taken := handed3(); !taken || g != nil {
			t.Fatalf("after a rolled-back commit the claimer got (%v, taken %v); want released with no grant", g, taken)
		}

		// A failure before the commit: the fn failed, nothing committed, no grant.
		fs := &failingStore{Store: open(t), failWake: true}
		p2 := taskplane.New(fs)
		handed2 := p2.ParkClaimer("disp-2", time.Minute)
		if _, err := p2.Accept(ctx, a2aEvent("m-2", "hello")); !errors.Is(err, errInjected) {
			t.Fatalf("Accept = %v, want the injected failure", err)
		}
		if g, taken := handed2(); !taken || g != nil {
			t.Fatalf("after a failed acceptance the claimer got (%v, taken %v); want released with no grant", g, taken)
		}
	})
}

// With no setting, 128 wakes may wait (DESIGN.md §4, invariant 7): the 129th acceptance's task
// is refused as overflow.
func TestAdmissionBoundDefaultsTo128(t *testing.T) {
	if taskplane.DefaultMaxWaiting != 128 {
		t.Fatalf("DefaultMaxWaiting = %d, want 128", taskplane.DefaultMaxWaiting)
	}
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		for i := range 128 {
			acc := mustAccept(t, p, a2aEvent(fmt.Sprintf("m-%d", i), "work"))
			if acc.Task.Status.State != taskplane.StateSubmitted {
				t.Fatalf("acceptance %d: task %s, want SUBMITTED", i+1, acc.Task.Status.State)
			}
		}
		over := mustAccept(t, p, a2aEvent("m-128", "one too many"))
		if over.Task.Status.State != taskplane.StateFailed || reasonOf(over.Task) != taskplane.ReasonOverflow {
			t.Fatalf("the 129th task is %s (reason %q), want FAILED with reason overflow", over.Task.Status.State, reasonOf(over.Task))
		}
	})
}

// wantLogMatchesRow fails unless the task's log holds exactly the sequences 1..N and its stored
// row says N: the task plane allocates each event's sequence from the task it read and writes the
// row with it, so every kind of write must leave the two agreeing.
func wantLogMatchesRow(t *testing.T, p *taskplane.Plane, after, id string) {
	t.Helper()
	ctx := context.Background()
	row, err := p.Store().GetTask(ctx, "alice", id)
	if err != nil {
		t.Fatalf("after %s: %v", after, err)
	}
	evs, err := p.Store().TaskEvents(ctx, "alice", id, 0, 0)
	if err != nil {
		t.Fatalf("after %s: %v", after, err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("after %s: event %d has seq %d (log %v)", after, i, e.Seq, evs)
		}
	}
	if row.LastSeq != int64(len(evs)) {
		t.Fatalf("after %s: the row's LastSeq is %d, the log has %d events", after, row.LastSeq, len(evs))
	}
}

func TestEveryWriteKeepsTheLogGapFreeAndTheRowAtItsLastSeq(t *testing.T) {
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		// A new task whose first turn is handed off in the acceptance (row inserted WORKING).
		handed := p.ParkClaimer("disp-1", time.Minute)
		acc := mustAccept(t, p, a2aEvent("m-1", "hello"))
		id := acc.Task.ID
		wantLogMatchesRow(t, p, "an acceptance with a hand-off", id)
		g, taken := handed()
		if !taken || g == nil {
			t.Fatal("no hand-off")
		}
		art := taskplane.Artifact{ID: "a1", Parts: []taskplane.Part{taskplane.TextPart("part")}}
		for name, c := range map[string]taskplane.Change{
			"an artifact": taskplane.AddArtifact{Artifact: art},
			"a message":   taskplane.AddMessage{Message: taskplane.Message{ID: "note", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("note")}}},
			"metadata":    taskplane.SetMetadata{Key: "k", Value: "v"},
		} {
			if _, err := p.Apply(ctx, "alice", id, taskplane.AnyVersion, c); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			wantLogMatchesRow(t, p, name, id)
		}
		ask(t, p, "alice", id, taskplane.StateInputRequired)
		wantLogMatchesRow(t, p, "a question", id)
		endTurn(t, p, g)
		more := a2aEvent("m-2", "the answer")
		more.TaskID = id
		mustAccept(t, p, more)
		wantLogMatchesRow(t, p, "a continuation", id)
		if _, _, err := p.Cancel(ctx, "alice", id, nil); err != nil {
			t.Fatal(err)
		}
		wantLogMatchesRow(t, p, "a cancel", id)

		// A task without a hand-off, one made by CreateTask, and one refused by the admission
		// bound (inserted, then FAILED in the same transaction).
		plain := mustAccept(t, p, a2aEvent("m-3", "no claimer waits")).Task
		wantLogMatchesRow(t, p, "an acceptance without a hand-off", plain.ID)
		created, err := p.CreateTask(ctx, "alice", "")
		if err != nil {
			t.Fatal(err)
		}
		wantLogMatchesRow(t, p, "CreateTask", created.ID)
		mustAccept(t, p, a2aEvent("m-4", "fills the queue"))
		over := mustAccept(t, p, a2aEvent("m-5", "refused")).Task
		if over.Status.State != taskplane.StateFailed {
			t.Fatalf("fifth task %s, want FAILED by the admission bound", over.Status.State)
		}
		wantLogMatchesRow(t, p, "an admission refusal", over.ID)
	}, taskplane.WithMaxWaiting(2))
}

// handedOffTurn accepts a new task while a claimer is parked and returns the task's id and the turn
// the acceptance handed that claimer.
func handedOffTurn(t *testing.T, p *taskplane.Plane) (string, *taskplane.Turn) {
	t.Helper()
	handed := p.ParkClaimer("disp-1", time.Minute)
	id := mustAccept(t, p, a2aEvent("m-1", "hello")).Task.ID
	g, taken := handed()
	if !taken || g == nil {
		t.Fatal("no hand-off")
	}
	return id, p.NewTurn(g)
}

// A turn works out its changes on the task as it last saw it, off the store's writer; when another
// writer changed the task meanwhile, the changes are applied to the task as stored instead, and
// nothing of either writer is lost.
func TestTurnUpdateAfterAnotherWriterAppliesToTheStoredTask(t *testing.T) {
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		id, turn := handedOffTurn(t, p)
		if _, err := p.Apply(ctx, "alice", id, taskplane.AnyVersion, taskplane.SetMetadata{Key: "by", Value: "operator"}); err != nil {
			t.Fatal(err)
		}
		art := taskplane.Artifact{ID: "a1", Parts: []taskplane.Part{taskplane.TextPart("result")}}
		if err := turn.Update(ctx, taskplane.AddArtifact{Artifact: art}); err != nil {
			t.Fatalf("turn update after another writer: %v", err)
		}
		for name, task := range map[string]*taskplane.Task{"stored": taskState(t, p, id), "turn's": turn.Task} {
			if task.Metadata["by"] != "operator" || len(task.Artifacts) != 1 || task.Version != 4 {
				t.Fatalf("%s task: metadata %v, %d artifacts, version %d; want the other writer's metadata, the artifact, version 4",
					name, task.Metadata, len(task.Artifacts), task.Version)
			}
		}
		wantLogMatchesRow(t, p, "a turn's update after another writer's", id)
		// With nobody else writing, the turn's next update goes the prepared way and still lands.
		if err := turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted}); err != nil {
			t.Fatal(err)
		}
		if st := taskState(t, p, id); st.Status.State != taskplane.StateCompleted || st.Version != 5 || len(st.Artifacts) != 1 {
			t.Fatalf("stored task %s version %d with %d artifacts; want COMPLETED, 5, 1", st.Status.State, st.Version, len(st.Artifacts))
		}
		wantLogMatchesRow(t, p, "a turn's prepared update", id)
	})
}

// A turn's update stores the changes as they were when passed: an executor that reuses its
// buffers, or edits the turn's Task, afterwards changes nothing stored by a later update.
func TestTurnUpdatesStoreWhatWasPassedNotWhatTheExecutorChangedLater(t *testing.T) {
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		id, turn := handedOffTurn(t, p)
		buf := []taskplane.Part{taskplane.TextPart("chunk-1")}
		if err := turn.Update(ctx, taskplane.AddArtifact{Artifact: taskplane.Artifact{ID: "a1", Parts: buf}}); err != nil {
			t.Fatal(err)
		}
		buf[0] = taskplane.TextPart("reused buffer")
		md := map[string]any{"n": 1}
		if err := turn.Update(ctx, taskplane.SetMetadata{Key: "k", Value: md}); err != nil {
			t.Fatal(err)
		}
		md["n"] = 2
		turn.Task.History = nil // an executor trimming its view of the task
		if err := turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted}); err != nil {
			t.Fatal(err)
		}
		st := taskState(t, p, id)
		if got := st.Artifacts[0].Parts[0].Text; got != "chunk-1" {
			t.Fatalf("stored artifact text %q, want chunk-1 (what was passed)", got)
		}
		if got := st.Metadata["k"].(map[string]any)["n"]; got != json.Number("1") {
			t.Fatalf("stored metadata n = %v, want 1 (what was passed)", got)
		}
		if len(st.History) == 0 {
			t.Fatal("the stored history was cut by the executor's edit of turn.Task")
		}
		wantLogMatchesRow(t, p, "updates after the executor reused its buffers", id)
	})
}
