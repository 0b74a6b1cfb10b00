package delivery_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/results"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

func TestIdenticalConcurrentDeliveriesMakeOneProviderCall(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		p := newProvider(nil)
		p.delay = 20 * time.Millisecond // the first call is still in flight when the others arrive
		e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup}, nil)
		const n = 100
		recs := make([]delivery.Record, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { recs[i], errs[i] = e.Deliver(context.Background(), request("t-1", "the answer")) })
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("Deliver %d: %v", i, errs[i])
			}
			if recs[i].ID != recs[0].ID || recs[i].State != delivery.StateDelivered || recs[i].ProviderID != "msg-1" {
				t.Fatalf("Deliver %d = %s %s %q; want every caller to see delivery %s delivered as msg-1",
					i, recs[i].ID, recs[i].State, recs[i].ProviderID, recs[0].ID)
			}
		}
		if c := p.totalCalls(); c != 1 {
			t.Errorf("%d identical concurrent deliveries made %d provider calls, want 1", n, c)
		}
		if got := attempts(t, e, recs[0]); !slices.Equal(outcomes(got), []string{"send:delivered"}) {
			t.Errorf("attempts = %v", outcomes(got))
		}
	})
}

func TestTwoEnginesOnTwoPostgresHandlesMakeOneProviderCall(t *testing.T) {
	stores := storetest.OpenPostgresShared(t, 2)
	p := newProvider(nil)
	p.entered, p.again, p.gate = make(chan struct{}), make(chan struct{}), make(chan struct{})
	route := delivery.Route{Sender: p, Recovery: delivery.Lookup}
	a := newEngine(t, stores[0], route, nil, delivery.WithOwner("process-a"))
	b := newEngine(t, stores[1], route, nil, delivery.WithOwner("process-b"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Process A starts the provider call and is held inside it.
	const perEngine = 50
	aRecs := make([]delivery.Record, perEngine)
	aErrs := make([]error, perEngine)
	var aWG sync.WaitGroup
	aWG.Go(func() { aRecs[0], aErrs[0] = a.Deliver(ctx, request("t-1", "the answer")) })
	<-p.entered
	for i := 1; i < perEngine; i++ {
		aWG.Go(func() { aRecs[i], aErrs[i] = a.Deliver(ctx, request("t-1", "the answer")) })
	}
	// Process B, meanwhile, finds the delivery leased by A: no call, the record says sending.
	bRecs := make([]delivery.Record, perEngine)
	bErrs := make([]error, perEngine)
	var bWG sync.WaitGroup
	for i := range perEngine {
		bWG.Go(func() { bRecs[i], bErrs[i] = b.Deliver(ctx, request("t-1", "the answer")) })
	}
	bDone := make(chan struct{})
	go func() { bWG.Wait(); close(bDone) }()
	// A second provider call while A is held in the first is the broken invariant: fail then,
	// rather than wait for B's callers, which that call holds at the gate. The bound is generous
	// (B's callers make no call and only read); it turns a hang into a failure.
	var broken string
	select {
	case <-bDone:
	case <-p.again:
		broken = "process B called the provider while A held the lease"
	case <-time.After(30 * time.Second):
		broken = "process B's callers did not return within 30s while A held the lease"
	}
	if broken != "" {
		cancel() // frees every Send held at the gate
		aWG.Wait()
		bWG.Wait()
		t.Fatal(broken)
	}
	for i := range perEngine {
		if bErrs[i] != nil {
			t.Fatalf("process B caller %d: %v", i, bErrs[i])
		}
		if bRecs[i].State != delivery.StateSending || bRecs[i].LeaseOwner != "process-a" {
			t.Fatalf("process B caller %d sees %s leased by %q, want sending leased by process-a", i, bRecs[i].State, bRecs[i].LeaseOwner)
		}
	}
	close(p.gate)
	aWG.Wait()
	for i := range perEngine {
		if aErrs[i] != nil {
			t.Fatalf("process A caller %d: %v", i, aErrs[i])
		}
		if aRecs[i].State != delivery.StateDelivered || aRecs[i].ProviderID != "msg-1" {
			t.Fatalf("process A caller %d sees %s %q, want delivered msg-1", i, aRecs[i].State, aRecs[i].ProviderID)
		}
	}
	got, err := b.Wait(ctx, bRecs[0].Principal, bRecs[0].ID)
	if err != nil || got.State != delivery.StateDelivered || got.ProviderID != "msg-1" {
		t.Fatalf("process B waits and sees %s %q (%v), want delivered msg-1", got.State, got.ProviderID, err)
	}
	if c := p.totalCalls(); c != 1 {
		t.Errorf("two processes made %d provider calls for one delivery, want 1", c)
	}
}

func TestCrashAfterProviderCallIsReconciledWithoutSecondPost(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		c := newClock()
		p := newProvider(c)
		route := delivery.Route{Sender: p, Recovery: delivery.Lookup}
		crashed, rec := prepareCrashing(t, s, route, c)
		// The provider takes the message, then the process dies before it writes "delivered".
		crashAfterPost(t, p, crashed, rec)

		// A new process starts after the dead one's lease ran out and its call could no longer
		// land (LookupGrace), and recovers at start-up.
		c.Advance(delivery.DefaultSendTimeout + delivery.DefaultPolicy.LookupGrace + time.Second)
		next := newEngine(t, s, route, c, delivery.WithOwner("restarted"))
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- next.Run(ctx) }()
		wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer wcancel()
		got, err := next.Wait(wctx, rec.Principal, rec.ID)
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
		wantState(t, got, delivery.StateDelivered)
		if got.ProviderID != "msg-1" {
			t.Errorf("provider id = %q, want msg-1 (the post that happened before the crash)", got.ProviderID)
		}
		if n := len(p.postsOf(rec.ID)); n != 1 {
			t.Errorf("posts after recovery = %d, want 1: a crash must not cause a second post", n)
		}
		if p.lookups != 1 {
			t.Errorf("lookups = %d, want 1", p.lookups)
		}
		if ev := evidenceOf(t, s, delivery.EvidenceReconciled, rec.ID); len(ev) != 1 || ev[0]["provider_id"] != "msg-1" {
			t.Errorf("reconciled evidence = %v", ev)
		}
	})
}

func TestLookupWithoutReconcilerFailsClosedWithEvidence(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		c := newClock()
		p := newProvider(c)
		route := delivery.Route{Sender: sendOnly{p}, Recovery: delivery.Lookup}

		t.Run("unknown outcome", func(t *testing.T) {
			p.behave = func(int, delivery.Delivery) (bool, error) { return true, delivery.Indeterminate(errTimeout) }
			defer func() { p.behave = nil }()
			e := newEngine(t, s, route, c)
			rec := mustDeliver(t, e, request("t-1", "x"))
			wantState(t, rec, delivery.StateAmbiguous)
			ev := evidenceOf(t, s, delivery.EvidenceAmbiguous, rec.ID)
			if len(ev) != 1 || ev[0]["recovery"] != "lookup" {
				t.Fatalf("ambiguous evidence = %v", ev)
			}
			// Nothing more happens on its own.
			c.Advance(time.Hour)
			if n, err := e.RunOnce(context.Background()); err != nil || n != 0 {
				t.Errorf("RunOnce after fail-closed claimed %d (%v), want 0", n, err)
			}
			if calls := p.calls[rec.ID]; calls != 1 {
				t.Errorf("provider calls = %d, want 1", calls)
			}
		})

		t.Run("crash in sending", func(t *testing.T) {
			e := newEngine(t, s, route, c, delivery.WithOwner("dies"))
			rec, err := e.Prepare(context.Background(), request("t-2", "y"))
			if err != nil {
				t.Fatal(err)
			}
			p.afterPost = runtime.Goexit
			done := make(chan struct{})
			go func() { defer close(done); e.Process(context.Background(), rec.Principal, rec.ID) }()
			<-done
			p.afterPost = nil
			c.Advance(delivery.DefaultLease + time.Second)
			next := newEngine(t, s, route, c)
			if _, err := next.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			got, _ := next.Get(context.Background(), rec.Principal, rec.ID)
			wantState(t, got, delivery.StateAmbiguous)
			if ev := evidenceOf(t, s, delivery.EvidenceAmbiguous, rec.ID); len(ev) != 1 {
				t.Errorf("ambiguous evidence = %v", ev)
			}
			if n := len(p.postsOf(rec.ID)); n != 1 {
				t.Errorf("posts = %d, want 1", n)
			}
		})
	})
}

// A source without a safe repeat (recovery class ambiguous) whose process died right after the
// provider took the call is not sent again by the engine that recovers it: the delivery fails
// closed as ambiguous, with evidence saying it was interrupted while sending.
func TestCrashInSendingWithoutASafeRepeatIsAmbiguousWithoutSecondPost(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		c := newClock()
		p := newProvider(c)
		route := delivery.Route{Sender: p, Recovery: delivery.Ambiguous}
		crashed, rec := prepareCrashing(t, s, route, c)
		// The provider takes the message, then the process dies before it writes the outcome.
		crashAfterPost(t, p, crashed, rec)

		// A new process on the same store, after the dead one's lease ran out.
		c.Advance(delivery.DefaultLease + time.Second)
		next := newEngine(t, s, route, c, delivery.WithOwner("restarted"))
		if _, err := next.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		got, err := next.Get(context.Background(), rec.Principal, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(p.postsOf(rec.ID)); n != 1 {
			t.Errorf("posts after recovery = %d, want 1: a source without a safe repeat is never sent twice", n)
		}
		wantState(t, got, delivery.StateAmbiguous)
		ev := evidenceOf(t, s, delivery.EvidenceAmbiguous, rec.ID)
		if len(ev) != 1 {
			t.Fatalf("ambiguous evidence = %v, want one record", ev)
		}
		if reason, _ := ev[0]["reason"].(string); !strings.Contains(reason, "interrupted while sending") {
			t.Errorf("ambiguous evidence reason = %q, want it to say the delivery was interrupted while sending", reason)
		}
		if ev[0]["recovery"] != "ambiguous" {
			t.Errorf("ambiguous evidence recovery = %v, want ambiguous", ev[0]["recovery"])
		}
	})
}

func TestDeterminateFailureBecomesFailed(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		c := newClock()
		p := newProvider(c)
		e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup}, c,
			delivery.WithPolicy(delivery.Policy{MaxAttempts: 3}))

		t.Run("permanent", func(t *testing.T) {
			p.behave = func(int, delivery.Delivery) (bool, error) {
				return false, delivery.WithStatus(delivery.Permanent(errors.New("channel_not_found")), "channel_not_found")
			}
			rec := mustDeliver(t, e, request("t-1", "x"))
			wantState(t, rec, delivery.StateFailed)
			if p.calls[rec.ID] != 1 {
				t.Errorf("calls = %d, want 1", p.calls[rec.ID])
			}
			a := attempts(t, e, rec)
			if len(a) != 1 || a[0].Outcome != "failed" || a[0].ProviderStatus != "channel_not_found" {
				t.Errorf("attempts = %+v", a)
			}
			if ev := evidenceOf(t, s, delivery.EvidenceFailed, rec.ID); len(ev) != 1 {
				t.Errorf("failed evidence = %v", ev)
			}
		})

		t.Run("retryable until attempts run out", func(t *testing.T) {
			p.behave = func(int, delivery.Delivery) (bool, error) { return false, delivery.Retryable(errors.New("503")) }
			rec := mustDeliver(t, e, request("t-2", "x"))
			wantState(t, rec, delivery.StatePrepared)
			if !rec.NextAttemptAt.After(c.Now()) {
				t.Errorf("next attempt %v is not after now %v: a retry waits", rec.NextAttemptAt, c.Now())
			}
			for i := 0; i < 10 && !rec.State.Settled(); i++ {
				c.Advance(10 * time.Minute) // past any capped backoff
				rec = mustProcess(t, e, rec)
			}
			wantState(t, rec, delivery.StateFailed)
			if p.calls[rec.ID] != 3 || rec.Attempts != 3 {
				t.Errorf("calls = %d, attempts = %d; want 3 and 3 (MaxAttempts)", p.calls[rec.ID], rec.Attempts)
			}
			if got := outcomes(attempts(t, e, rec)); !slices.Equal(got, []string{"send:retry", "send:retry", "send:failed"}) {
				t.Errorf("attempts = %v", got)
			}
		})
	})
}

// afterLookupGrace is when a lookup after a send the provider never answered is due.
const afterLookupGrace = time.Minute + 2*time.Second

func TestIndeterminateFailureIsReconciled(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		c := newClock()
		p := newProvider(c)
		e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup}, c)

		t.Run("it happened", func(t *testing.T) {
			p.behave = func(int, delivery.Delivery) (bool, error) { return true, delivery.Indeterminate(errTimeout) }
			rec := mustDeliver(t, e, request("t-1", "x"))
			wantState(t, rec, delivery.StateSending)
			p.behave = nil
			c.Advance(afterLookupGrace)
			rec = mustProcess(t, e, rec)
			wantState(t, rec, delivery.StateDelivered)
			if rec.ProviderID != "msg-1" || p.calls[rec.ID] != 1 || len(p.postsOf(rec.ID)) != 1 {
				t.Errorf("provider id %q, calls %d, posts %d; want msg-1, 1, 1", rec.ProviderID, p.calls[rec.ID], len(p.postsOf(rec.ID)))
			}
			if got := outcomes(attempts(t, e, rec)); !slices.Equal(got, []string{"send:unknown", "lookup:found"}) {
				t.Errorf("attempts = %v", got)
			}
		})

		// A provider that never answered may still be working on the request the engine gave up
		// on: its lookup waits LookupGrace, so a "not found" is not read before the call could
		// land (and the answer posted twice). After an answer (a 5xx) it waits InitialInterval.
		t.Run("a lookup after no answer waits for the call to land", func(t *testing.T) {
			p.behave = func(call int, _ delivery.Delivery) (bool, error) {
				if call == 1 {
					return false, delivery.Indeterminate(errTimeout) // still in flight at the provider
				}
				return true, nil
			}
			defer func() { p.behave = nil }()
			rec := mustDeliver(t, e, request("t-grace", "x"))
			wantState(t, rec, delivery.StateSending)
			c.Advance(delivery.DefaultPolicy.LookupGrace - time.Second)
			rec = mustProcess(t, e, rec)
			wantState(t, rec, delivery.StateSending)
			if n := p.calls[rec.ID]; n != 1 {
				t.Fatalf("looked up and sent again %d calls in, before the call could land", n)
			}
			p.mu.Lock()
			p.posts = append(p.posts, post{DeliveryID: rec.ID, ProviderID: "msg-late", At: c.Now()}) // the first call lands
			p.mu.Unlock()
			c.Advance(2 * time.Second)
			rec = mustProcess(t, e, rec)
			wantState(t, rec, delivery.StateDelivered)
			if p.calls[rec.ID] != 1 || rec.ProviderID != "msg-late" {
				t.Errorf("calls %d, provider id %q; want the first call only, found", p.calls[rec.ID], rec.ProviderID)
			}

			p.behave = func(int, delivery.Delivery) (bool, error) {
				return true, delivery.WithStatus(delivery.Indeterminate(errors.New("500")), "500 Internal Server Error")
			}
			rec = mustDeliver(t, e, request("t-grace-5xx", "x"))
			wantState(t, rec, delivery.StateSending)
			p.behave = nil
			c.Advance(2 * time.Second)
			rec = mustProcess(t, e, rec)
			wantState(t, rec, delivery.StateDelivered)
		})

		t.Run("it did not happen", func(t *testing.T) {
			p.behave = func(call int, _ delivery.Delivery) (bool, error) {
				if call == 1 {
					return false, errTimeout // unclassified: read as unknown
				}
				return true, nil
			}
			defer func() { p.behave = nil }()
			rec := mustDeliver(t, e, request("t-2", "x"))
			wantState(t, rec, delivery.StateSending)
			c.Advance(afterLookupGrace)
			rec = mustProcess(t, e, rec)
			wantState(t, rec, delivery.StateDelivered)
			if p.calls[rec.ID] != 2 || len(p.postsOf(rec.ID)) != 1 || rec.Attempts != 2 {
				t.Errorf("calls %d, posts %d, attempts %d; want 2, 1, 2", p.calls[rec.ID], len(p.postsOf(rec.ID)), rec.Attempts)
			}
			if got := outcomes(attempts(t, e, rec)); !slices.Equal(got, []string{"send:unknown", "lookup:not-found", "send:delivered"}) {
				t.Errorf("attempts = %v", got)
			}
		})

		// A provider that rate-limits the lookup (Retry-After) puts it off: waiting spends none of
		// the lookups that would make the delivery ambiguous.
		t.Run("a rate-limited lookup waits and spends nothing", func(t *testing.T) {
			p.behave = func(int, delivery.Delivery) (bool, error) { return true, delivery.Indeterminate(errTimeout) }
			rec := mustDeliver(t, e, request("t-rl", "x"))
			wantState(t, rec, delivery.StateSending)
			p.behave = nil
			p.mu.Lock()
			p.lookupErr = delivery.RetryAfter(30*time.Second, errors.New("429 rate limited"))
			p.mu.Unlock()
			for range 20 { // more than the lookups a delivery may spend (16)
				c.Advance(31 * time.Second)
				rec = mustProcess(t, e, rec)
				wantState(t, rec, delivery.StateSending)
			}
			p.mu.Lock()
			p.lookupErr = nil
			p.mu.Unlock()
			c.Advance(31 * time.Second)
			rec = mustProcess(t, e, rec)
			wantState(t, rec, delivery.StateDelivered)
		})

		t.Run("ambiguous class fails closed", func(t *testing.T) {
			ea := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Ambiguous}, c)
			p.behave = func(int, delivery.Delivery) (bool, error) { return true, delivery.Indeterminate(errTimeout) }
			defer func() { p.behave = nil }()
			before := p.lookups
			rec := mustDeliver(t, ea, request("t-3", "x"))
			wantState(t, rec, delivery.StateAmbiguous)
			if p.lookups != before {
				t.Errorf("lookups = %d; the ambiguous class must not look up", p.lookups)
			}
		})

		t.Run("idempotent class repeats", func(t *testing.T) {
			ei := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Idempotent}, c)
			p.behave = func(call int, _ delivery.Delivery) (bool, error) {
				if call == 1 {
					return false, delivery.Indeterminate(errTimeout)
				}
				return true, nil
			}
			defer func() { p.behave = nil }()
			rec := mustDeliver(t, ei, request("t-4", "x"))
			wantState(t, rec, delivery.StateSending)
			c.Advance(10 * time.Second)
			rec = mustProcess(t, ei, rec)
			wantState(t, rec, delivery.StateDelivered)
			if got := outcomes(attempts(t, ei, rec)); !slices.Equal(got, []string{"send:unknown", "recover:repeat", "send:delivered"}) {
				t.Errorf("attempts = %v", got)
			}
		})

		// An attempt whose outcome was unknown may have landed: when the repeats then run out
		// without getting through, the delivery is ambiguous (for an operator to settle), not
		// failed ("not delivered").
		t.Run("idempotent class whose repeats run out after an unknown outcome is ambiguous", func(t *testing.T) {
			ei := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Idempotent}, c,
				delivery.WithPolicy(delivery.Policy{MaxAttempts: 3}))
			p.behave = func(call int, _ delivery.Delivery) (bool, error) {
				if call == 1 {
					return false, delivery.Indeterminate(errTimeout)
				}
				return false, delivery.Retryable(errors.New("503"))
			}
			defer func() { p.behave = nil }()
			rec := mustDeliver(t, ei, request("t-5", "x"))
			for range 5 {
				if rec.State != delivery.StateSending && rec.State != delivery.StatePrepared {
					break
				}
				c.Advance(time.Minute)
				rec = mustProcess(t, ei, rec)
			}
			wantState(t, rec, delivery.StateAmbiguous)
		})

		// A receiver may refuse the repeat of a delivery ID it already has (409): the refusal says
		// nothing of the first call, which may have landed, so the delivery is ambiguous, not failed.
		t.Run("idempotent class whose repeat is refused after an unknown outcome is ambiguous", func(t *testing.T) {
			ei := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Idempotent}, c)
			p.behave = func(call int, _ delivery.Delivery) (bool, error) {
				if call == 1 {
					return true, delivery.Indeterminate(errTimeout) // it landed; the answer was lost
				}
				return false, delivery.Permanent(errors.New("callback answered 409 Conflict"))
			}
			defer func() { p.behave = nil }()
			rec := mustDeliver(t, ei, request("t-6", "x"))
			wantState(t, rec, delivery.StateSending)
			c.Advance(10 * time.Second)
			rec = mustProcess(t, ei, rec)
			wantState(t, rec, delivery.StateAmbiguous)
			if got := outcomes(attempts(t, ei, rec)); !slices.Equal(got, []string{"send:unknown", "recover:repeat", "send:ambiguous"}) {
				t.Errorf("attempts = %v", got)
			}
			if ev := evidenceOf(t, s, delivery.EvidenceAmbiguous, rec.ID); len(ev) != 1 {
				t.Errorf("ambiguous evidence = %v", ev)
			}
		})

		// A lookup source sends again only after its lookup found the first call had not landed:
		// a refusal then is the whole truth, and the delivery is failed.
		t.Run("lookup class whose resend is refused after the lookup found nothing is failed", func(t *testing.T) {
			p.behave = func(call int, _ delivery.Delivery) (bool, error) {
				if call == 1 {
					return false, delivery.Indeterminate(errTimeout)
				}
				return false, delivery.Permanent(errors.New("channel_not_found"))
			}
			defer func() { p.behave = nil }()
			rec := mustDeliver(t, e, request("t-7", "x"))
			wantState(t, rec, delivery.StateSending)
			c.Advance(afterLookupGrace)
			rec = mustProcess(t, e, rec)
			wantState(t, rec, delivery.StateFailed)
			if got := outcomes(attempts(t, e, rec)); !slices.Equal(got, []string{"send:unknown", "lookup:not-found", "send:failed"}) {
				t.Errorf("attempts = %v", got)
			}
		})
	})
}

func TestRetryAfterIsHonouredWithoutSpendingAnAttempt(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		c := newClock()
		p := newProvider(c)
		// One attempt only: three snoozes would exhaust it if they spent attempts.
		e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup,
			Lane: laneOf, LaneInterval: time.Second}, c, delivery.WithPolicy(delivery.Policy{MaxAttempts: 1}))
		p.behave = func(call int, _ delivery.Delivery) (bool, error) {
			if call <= 3 {
				return false, delivery.WithStatus(delivery.RetryAfter(30*time.Second, errors.New("ratelimited")), "429")
			}
			return true, nil
		}
		rec := mustDeliver(t, e, request("t-1", "x"))
		for snooze := 1; snooze <= 3; snooze++ {
			wantState(t, rec, delivery.StatePrepared)
			if rec.Attempts != 0 {
				t.Fatalf("after snooze %d attempts = %d, want 0", snooze, rec.Attempts)
			}
			if want := c.Now().Add(30 * time.Second); !rec.NextAttemptAt.Equal(want) {
				t.Fatalf("after snooze %d next attempt %v, want %v", snooze, rec.NextAttemptAt, want)
			}
			// Not before the provider said.
			c.Advance(29 * time.Second)
			if rec = mustProcess(t, e, rec); p.calls[rec.ID] != snooze {
				t.Fatalf("a call came %v before the Retry-After ran out", time.Second)
			}
			// The lane waits too: another message to the channel is held back.
			if other := mustDeliver(t, e, request("t-other-"+string(rune('0'+snooze)), "y")); other.State != delivery.StatePrepared {
				t.Fatalf("another delivery in the snoozed lane is %s, want prepared (held)", other.State)
			}
			c.Advance(time.Second)
			rec = mustProcess(t, e, rec)
		}
		wantState(t, rec, delivery.StateDelivered)
		if rec.Attempts != 1 || p.calls[rec.ID] != 4 {
			t.Errorf("attempts %d, calls %d; want 1 and 4", rec.Attempts, p.calls[rec.ID])
		}
		a := attempts(t, e, rec)
		if len(a) != 4 || a[0].Outcome != "retry-after" || a[0].RetryAfter != 30*time.Second || a[0].ProviderStatus != "429" {
			t.Errorf("attempts = %+v", a)
		}
	})
}

// A provider that always asks to wait (a 429 forever) does not hold a delivery, nor the lane and
// the deliveries behind it, forever: the snoozes are bounded in number and in time, and past the
// bound the delivery settles as if its attempts ran out, failed or (after an unknown outcome)
// ambiguous. A lookup put off past the bound is ambiguous. An operator's retry starts afresh.
func TestRetryAfterForeverSettlesOnceItsSnoozesRunOut(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		c := newClock()
		p := newProvider(c)
		limited := func(d time.Duration) error {
			return delivery.WithStatus(delivery.RetryAfter(d, errors.New("ratelimited")), "429")
		}
		// drive processes rec as its waits run out until it settles (or max rounds pass).
		drive := func(t *testing.T, e *delivery.Engine, rec delivery.Record, max int) delivery.Record {
			t.Helper()
			for range max {
				if rec.State.Settled() {
					break
				}
				c.Advance(31 * time.Second)
				rec = mustProcess(t, e, rec)
			}
			return rec
		}

		t.Run("a bounded number of snoozes, then failed", func(t *testing.T) {
			e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup, Lane: laneOf, LaneInterval: time.Second}, c,
				delivery.WithPolicy(delivery.Policy{MaxAttempts: 2, MaxRetryAfters: 3}))
			p.behave = func(int, delivery.Delivery) (bool, error) { return false, limited(30 * time.Second) }
			defer func() { p.behave = nil }()
			rec := drive(t, e, mustDeliver(t, e, inChannel(request("t-429", "x"), "C429")), 10)
			wantState(t, rec, delivery.StateFailed)
			if p.calls[rec.ID] != 4 {
				t.Errorf("calls = %d, want 4 (three snoozes, then the answer that settles it)", p.calls[rec.ID])
			}
			if got := outcomes(attempts(t, e, rec)); !slices.Equal(got, []string{"send:retry-after", "send:retry-after", "send:retry-after", "send:failed"}) {
				t.Errorf("attempts = %v", got)
			}
			if ev := evidenceOf(t, s, delivery.EvidenceFailed, rec.ID); len(ev) != 1 {
				t.Errorf("failed evidence = %v", ev)
			}
			// The lane still waits as the last answer asked, past its interval.
			p.behave = nil
			c.Advance(2 * time.Second)
			if next := mustDeliver(t, e, inChannel(request("t-429-next", "y"), "C429")); next.State != delivery.StatePrepared {
				t.Errorf("the next delivery of the lane is %s at once, want prepared until the last Retry-After runs out", next.State)
			}
			// An operator's retry gives it a fresh budget of snoozes.
			p.behave = func(int, delivery.Delivery) (bool, error) { return false, limited(30 * time.Second) }
			c.Advance(29 * time.Second)
			got, err := e.Resolve(context.Background(), rec.Principal, rec.ID, delivery.Resolution{Retry: true})
			if err != nil {
				t.Fatal(err)
			}
			got = mustProcess(t, e, got)
			wantState(t, got, delivery.StatePrepared)
		})

		t.Run("a bounded time in snoozes, then failed", func(t *testing.T) {
			e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup}, c,
				delivery.WithPolicy(delivery.Policy{MaxAttempts: 2, MaxRetryAfterTotal: time.Minute}))
			p.behave = func(int, delivery.Delivery) (bool, error) { return false, limited(30 * time.Second) }
			defer func() { p.behave = nil }()
			rec := drive(t, e, mustDeliver(t, e, inChannel(request("t-429-time", "x"), "C-time")), 10)
			wantState(t, rec, delivery.StateFailed)
			if p.calls[rec.ID] != 3 {
				t.Errorf("calls = %d, want 3 (two snoozes of 30s use the minute)", p.calls[rec.ID])
			}
		})

		t.Run("after an unknown outcome, ambiguous", func(t *testing.T) {
			e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Idempotent}, c,
				delivery.WithPolicy(delivery.Policy{MaxAttempts: 4, MaxRetryAfters: 2}))
			p.behave = func(call int, _ delivery.Delivery) (bool, error) {
				if call == 1 {
					return true, delivery.Indeterminate(errTimeout)
				}
				return false, limited(30 * time.Second)
			}
			defer func() { p.behave = nil }()
			rec := drive(t, e, mustDeliver(t, e, inChannel(request("t-429-unknown", "x"), "C-unknown")), 10)
			wantState(t, rec, delivery.StateAmbiguous)
			if p.calls[rec.ID] != 4 {
				t.Errorf("calls = %d, want 4", p.calls[rec.ID])
			}
		})

		t.Run("a lookup put off past the bound is ambiguous", func(t *testing.T) {
			e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup}, c,
				delivery.WithPolicy(delivery.Policy{MaxAttempts: 2, MaxRetryAfters: 3}))
			p.behave = func(int, delivery.Delivery) (bool, error) { return true, delivery.Indeterminate(errTimeout) }
			rec := mustDeliver(t, e, inChannel(request("t-429-lookup", "x"), "C-lookup"))
			p.behave = nil
			p.mu.Lock()
			p.lookupErr = limited(30 * time.Second)
			p.mu.Unlock()
			defer func() { p.mu.Lock(); p.lookupErr = nil; p.mu.Unlock() }()
			before := p.lookups
			rec = drive(t, e, rec, 10)
			wantState(t, rec, delivery.StateAmbiguous)
			if n := p.lookups - before; n != 4 {
				t.Errorf("lookups = %d, want 4", n)
			}
		})
	})
}

func TestRevisedTextIsADistinctDelivery(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		p := newProvider(nil)
		e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup}, nil)
		first := mustDeliver(t, e, request("t-1", "draft"))
		again := mustDeliver(t, e, request("t-1", "draft"))
		revised := mustDeliver(t, e, request("t-1", "revised"))
		if again.ID != first.ID {
			t.Errorf("the same request got IDs %s and %s", first.ID, again.ID)
		}
		if revised.ID == first.ID {
			t.Errorf("revised text reused delivery %s", first.ID)
		}
		wantState(t, revised, delivery.StateDelivered)
		if got := len(p.allPosts()); got != 2 {
			t.Errorf("posts = %d, want 2 (the draft once, the revision once)", got)
		}
		id, err := delivery.ID(request("t-1", "revised"))
		if err != nil || id != revised.ID {
			t.Errorf("delivery.ID = %s, %v; want %s", id, err, revised.ID)
		}
	})
}

func TestFixedOperationWithChangedPayloadIsRejected(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		p := newProvider(nil)
		e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup}, nil)
		fixed := func(text string) delivery.Request {
			r := request("t-1", text)
			r.Operation, r.Fixed = delivery.OpHandled, true
			return r
		}
		first := mustDeliver(t, e, fixed(":white_check_mark:"))
		wantState(t, first, delivery.StateDelivered)
		// The same payload is the same delivery.
		if again := mustDeliver(t, e, fixed(":white_check_mark:")); again.ID != first.ID || again.State != delivery.StateDelivered {
			t.Errorf("same fixed request = %s %s", again.ID, again.State)
		}
		rec, err := e.Deliver(context.Background(), fixed(":x:"))
		var conflict *delivery.FixedConflictError
		if !errors.As(err, &conflict) || !errors.Is(err, delivery.ErrFixedConflict) {
			t.Fatalf("changed payload: err = %v, want a FixedConflictError", err)
		}
		if rec.ID != first.ID || rec.State != delivery.StateDelivered {
			t.Errorf("rejected request returned %s %s, want the existing delivery", rec.ID, rec.State)
		}
		if got := len(p.allPosts()); got != 1 {
			t.Errorf("posts = %d, want 1", got)
		}
		if ev := evidenceOf(t, s, delivery.EvidenceConflict, first.ID); len(ev) != 1 {
			t.Errorf("conflict evidence = %v", ev)
		}
	})
}

func TestLanesKeepTheirRateAndDoNotStarveEachOther(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		c := newClock()
		p := newProvider(c)
		e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup, Lane: laneOf, LaneInterval: time.Second}, c)
		start := c.Now()
		// A busy channel with a backlog, then one message to a quiet channel.
		for i := range 5 {
			if _, err := e.Prepare(context.Background(), inChannel(request("t-busy", string(rune('a'+i))), "C-busy")); err != nil {
				t.Fatal(err)
			}
			c.Advance(time.Millisecond)
		}
		if _, err := e.Prepare(context.Background(), inChannel(request("t-quiet", "q"), "C-quiet")); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100 && len(p.allPosts()) < 6; i++ {
			if _, err := e.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			c.Advance(100 * time.Millisecond)
		}
		byLane := map[string][]time.Time{}
		for _, m := range p.allPosts() {
			byLane[m.Lane] = append(byLane[m.Lane], m.At)
		}
		busy, quiet := byLane["C-busy"], byLane["C-quiet"]
		if len(busy) != 5 || len(quiet) != 1 {
			t.Fatalf("posts per lane: busy %d, quiet %d; want 5 and 1", len(busy), len(quiet))
		}
		for i := 1; i < len(busy); i++ {
			if gap := busy[i].Sub(busy[i-1]); gap < time.Second {
				t.Errorf("busy lane posts %d and %d are %v apart, want ≥ 1s", i-1, i, gap)
			}
		}
		// The quiet channel did not wait for the busy one's backlog (4s of it).
		if wait := quiet[0].Sub(start); wait > time.Second {
			t.Errorf("the quiet lane waited %v behind the busy one", wait)
		}
		// And the busy lane kept its rate: 5 posts take about 4s, not much more.
		if span := busy[4].Sub(busy[0]); span > 6*time.Second {
			t.Errorf("busy lane took %v for 5 posts at 1/s", span)
		}
	})
}

func TestLanesHoldAcrossTwoEnginesOnPostgres(t *testing.T) {
	stores := storetest.OpenPostgresShared(t, 2)
	c := newClock()
	p := newProvider(c)
	route := delivery.Route{Sender: p, Recovery: delivery.Lookup, Lane: laneOf, LaneInterval: time.Second}
	a := newEngine(t, stores[0], route, c, delivery.WithOwner("process-a"))
	b := newEngine(t, stores[1], route, c, delivery.WithOwner("process-b"))
	for i := range 6 {
		e := []*delivery.Engine{a, b}[i%2]
		if _, err := e.Prepare(context.Background(), inChannel(request("t-1", string(rune('a'+i))), "C1")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 200 && len(p.allPosts()) < 6; i++ {
		var wg sync.WaitGroup
		for _, e := range []*delivery.Engine{a, b} {
			wg.Go(func() {
				if _, err := e.RunOnce(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		c.Advance(50 * time.Millisecond)
	}
	posts := p.allPosts()
	if len(posts) != 6 {
		t.Fatalf("posts = %d, want 6", len(posts))
	}
	seen := map[string]bool{}
	for i, m := range posts {
		if seen[m.DeliveryID] {
			t.Errorf("delivery %s posted twice", m.DeliveryID)
		}
		seen[m.DeliveryID] = true
		if i > 0 {
			if gap := m.At.Sub(posts[i-1].At); gap < time.Second {
				t.Errorf("posts %d and %d of one lane from two processes are %v apart, want ≥ 1s", i-1, i, gap)
			}
		}
	}
}

func TestSuccessfulQuestionDeliveryRecordsItsAnchor(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		plane := taskplane.New(s, taskplane.WithLogger(quiet))
		task, err := plane.CreateTask(context.Background(), "alice", "")
		if err != nil {
			t.Fatal(err)
		}
		question := func(text string) delivery.Request {
			r := request(task.ID, text)
			r.Operation, r.State = delivery.OpQuestion, taskplane.StateInputRequired
			return r
		}
		p := newProvider(nil)

		t.Run("in the transaction that marks it delivered", func(t *testing.T) {
			e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup}, nil)
			rec := mustDeliver(t, e, question("Which branch?"))
			wantState(t, rec, delivery.StateDelivered)
			a, err := s.GetAnchor(context.Background(), "alice", "slack", rec.ProviderID)
			if err != nil {
				t.Fatalf("anchor of %s: %v", rec.ProviderID, err)
			}
			if a.TaskID != task.ID {
				t.Errorf("anchor names task %s, want %s", a.TaskID, task.ID)
			}
		})

		t.Run("no anchor, no delivered", func(t *testing.T) {
			// If the anchor cannot be written, neither is "delivered": they share one transaction.
			failing := func(context.Context, store.Tx, string, string, string, string, int64, time.Time) error {
				return errors.New("disk full")
			}
			e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup}, nil,
				delivery.WithAnchorRecorder(failing), delivery.WithFinishTimeout(200*time.Millisecond))
			rec := mustDeliver(t, e, question("Which tag?"))
			wantState(t, rec, delivery.StateSending)
			if posts := p.postsOf(rec.ID); len(posts) != 1 {
				t.Fatalf("posts = %d", len(posts))
			} else if _, err := s.GetAnchor(context.Background(), "alice", "slack", posts[0].ProviderID); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("anchor without delivered: %v", err)
			}
		})

		t.Run("a reply that is not a question records none", func(t *testing.T) {
			e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup}, nil)
			rec := mustDeliver(t, e, request(task.ID, "FYI"))
			if _, err := s.GetAnchor(context.Background(), "alice", "slack", rec.ProviderID); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("reply recorded an anchor: %v", err)
			}
		})
	})
}

func TestOperatorResolveMovesAnAmbiguousDeliveryAndLeavesEvidence(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		p := newProvider(nil)
		e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Ambiguous}, nil)
		ambiguous := func(task string) delivery.Record {
			t.Helper()
			p.behave = func(int, delivery.Delivery) (bool, error) { return false, delivery.Indeterminate(errTimeout) }
			defer func() { p.behave = nil }()
			rec := mustDeliver(t, e, request(task, "x"))
			wantState(t, rec, delivery.StateAmbiguous)
			return rec
		}
		ctx := context.Background()

		t.Run("delivered", func(t *testing.T) {
			rec := ambiguous("t-1")
			got, err := e.Resolve(ctx, rec.Principal, rec.ID, delivery.Resolution{Delivered: "msg-seen", By: "ops@example", Note: "found it in #general"})
			if err != nil {
				t.Fatal(err)
			}
			wantState(t, got, delivery.StateDelivered)
			if got.ProviderID != "msg-seen" {
				t.Errorf("provider id = %q", got.ProviderID)
			}
			ev := evidenceOf(t, s, delivery.EvidenceResolved, rec.ID)
			if len(ev) != 1 || ev[0]["by"] != "ops@example" || ev[0]["from"] != "ambiguous" || ev[0]["to"] != "delivered" {
				t.Errorf("resolved evidence = %v", ev)
			}
			a := attempts(t, e, got)
			if last := a[len(a)-1]; last.Kind != "resolve" || last.Owner != "ops@example" || last.Error != "found it in #general" {
				t.Errorf("last attempt = %+v", last)
			}
		})

		t.Run("retry", func(t *testing.T) {
			rec := ambiguous("t-2")
			got, err := e.Resolve(ctx, rec.Principal, rec.ID, delivery.Resolution{Retry: true})
			if err != nil {
				t.Fatal(err)
			}
			wantState(t, got, delivery.StatePrepared)
			if got.Attempts != 0 {
				t.Errorf("attempts after retry = %d, want a fresh budget", got.Attempts)
			}
			got = mustProcess(t, e, got)
			wantState(t, got, delivery.StateDelivered)
			if ev := evidenceOf(t, s, delivery.EvidenceResolved, rec.ID); len(ev) != 1 || ev[0]["resolution"] != "retry" {
				t.Errorf("resolved evidence = %v", ev)
			}
		})

		t.Run("abandon", func(t *testing.T) {
			rec := ambiguous("t-3")
			got, err := e.Resolve(ctx, rec.Principal, rec.ID, delivery.Resolution{Abandon: true})
			if err != nil {
				t.Fatal(err)
			}
			wantState(t, got, delivery.StateFailed)
			if ev := evidenceOf(t, s, delivery.EvidenceResolved, rec.ID); len(ev) != 1 || ev[0]["resolution"] != "abandoned" {
				t.Errorf("resolved evidence = %v", ev)
			}
		})

		t.Run("refusals", func(t *testing.T) {
			done := mustDeliver(t, e, request("t-4", "x"))
			if _, err := e.Resolve(ctx, done.Principal, done.ID, delivery.Resolution{Retry: true}); !errors.Is(err, delivery.ErrNotResolvable) {
				t.Errorf("resolve of a delivered delivery: %v", err)
			}
			if _, err := e.Resolve(ctx, "alice", "dlv_missing", delivery.Resolution{Abandon: true}); !errors.Is(err, delivery.ErrNotFound) {
				t.Errorf("resolve of a missing delivery: %v", err)
			}
			if _, err := e.Resolve(ctx, done.Principal, done.ID, delivery.Resolution{Retry: true, Abandon: true}); !errors.Is(err, delivery.ErrInvalid) {
				t.Errorf("two resolutions at once: %v", err)
			}
		})
	})
}

// A delivery left in sending by an engine that died mid-send, which no engine routing its source
// recovers, is resolvable once its lease has run out on the store's clock (the dashboard offers
// --delivered, --retry and --abandon for it), and refused while the lease is live: an engine is
// sending it.
func TestOperatorResolvesADeliveryStuckInSendingOnceItsLeaseRanOut(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		c := newClock()
		p := newProvider(c)
		route := delivery.Route{Sender: p, Recovery: delivery.Ambiguous}
		crashed := newEngine(t, s, route, c, delivery.WithOwner("crashed"))
		// The operator's engine routes nothing, as the CLI's does.
		op := delivery.New(s, nil, delivery.WithLogger(quiet), delivery.WithClock(c.Now))
		t.Cleanup(func() { op.Close() })
		ctx := context.Background()
		stuck := func(task string) delivery.Record {
			t.Helper()
			rec, err := crashed.Prepare(ctx, request(task, "the answer"))
			if err != nil {
				t.Fatal(err)
			}
			// The provider takes the message, then the process dies before it writes the outcome.
			p.afterPost = runtime.Goexit
			defer func() { p.afterPost = nil }()
			done := make(chan struct{})
			go func() {
				defer close(done)
				crashed.Process(ctx, rec.Principal, rec.ID)
			}()
			<-done
			left, err := op.Get(ctx, rec.Principal, rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			wantState(t, left, delivery.StateSending)
			return left
		}
		recs := map[string]delivery.Record{"delivered": stuck("t-1"), "retry": stuck("t-2"), "abandon": stuck("t-3")}
		choices := map[string]delivery.Resolution{"delivered": {Delivered: "msg-seen"}, "retry": {Retry: true}, "abandon": {Abandon: true}}

		// Under a live lease every choice is refused, naming the engine sending it.
		for name, rec := range recs {
			_, err := op.Resolve(ctx, rec.Principal, rec.ID, choices[name])
			if !errors.Is(err, delivery.ErrNotResolvable) || !strings.Contains(err.Error(), "engine crashed is sending it") {
				t.Errorf("%s under a live lease: %v", name, err)
			}
			if got, _ := op.Get(ctx, rec.Principal, rec.ID); got.State != delivery.StateSending || got.LeaseOwner != "crashed" {
				t.Errorf("%s under a live lease moved it: %+v", name, got)
			}
		}

		c.Advance(delivery.DefaultLease + time.Second)
		for _, name := range []string{"delivered", "retry", "abandon"} {
			t.Run(name, func(t *testing.T) {
				rec := recs[name]
				res := choices[name]
				res.By = "ops@example"
				got, err := op.Resolve(ctx, rec.Principal, rec.ID, res)
				if err != nil {
					t.Fatal(err)
				}
				if got.LeaseOwner != "" || !got.LeaseUntil.IsZero() {
					t.Errorf("lease kept after the resolution: %s until %s", got.LeaseOwner, got.LeaseUntil)
				}
				ev := evidenceOf(t, s, delivery.EvidenceResolved, rec.ID)
				if len(ev) != 1 || ev[0]["from"] != "sending" || ev[0]["by"] != "ops@example" {
					t.Errorf("resolved evidence = %v", ev)
				}
				switch name {
				case "delivered":
					wantState(t, got, delivery.StateDelivered)
					if got.ProviderID != "msg-seen" {
						t.Errorf("provider id = %q", got.ProviderID)
					}
				case "retry":
					// As for an ambiguous delivery: a fresh budget, and sent again (the first
					// call had landed, so the provider now has it twice: the operator's call).
					wantState(t, got, delivery.StatePrepared)
					if got.Attempts != 0 {
						t.Errorf("attempts after retry = %d, want a fresh budget", got.Attempts)
					}
					got = mustProcess(t, crashed, got)
					wantState(t, got, delivery.StateDelivered)
					if n := len(p.postsOf(rec.ID)); n != 2 {
						t.Errorf("posts = %d, want 2", n)
					}
				case "abandon":
					wantState(t, got, delivery.StateFailed)
					if got.LastError != "abandoned by ops@example" {
						t.Errorf("last error = %q", got.LastError)
					}
				}
			})
		}
	})
}

func TestRunDeliversAndCloseStopsIt(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		p := newProvider(nil)
		e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup}, nil)
		ran := make(chan error, 1)
		go func() { ran <- e.Run(context.Background()) }()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var recs []delivery.Record
		for i := range 10 {
			rec, err := e.Prepare(ctx, request("t-"+string(rune('a'+i)), "x"))
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, rec)
		}
		for _, rec := range recs {
			got, err := e.Wait(ctx, rec.Principal, rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			wantState(t, got, delivery.StateDelivered)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-ran:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after Close")
		}
		if _, err := e.Process(ctx, "alice", recs[0].ID); !errors.Is(err, delivery.ErrClosed) {
			t.Errorf("Process after Close: %v", err)
		}
		if p.totalCalls() != 10 {
			t.Errorf("calls = %d, want 10", p.totalCalls())
		}
	})
}

// An engine without a clock of its own takes its store's (store.Clock): on a shared Postgres
// that is the database's, so the leases and due times it writes mean one instant to every process
// that compares them.
func TestEngineWithoutAClockTakesTheStores(t *testing.T) {
	ahead := time.Now().Add(time.Hour)
	s := storetest.Clocked{Store: storetest.OpenSQLite(t), Clock: func() time.Time { return ahead }}
	e := delivery.New(s, delivery.Routes{"slack": {Sender: newProvider(nil), Recovery: delivery.Lookup}},
		delivery.WithLogger(quiet))
	t.Cleanup(func() { e.Close() })
	rec, err := e.Prepare(context.Background(), request("t-1", "the answer"))
	if err != nil {
		t.Fatal(err)
	}
	if want := ahead.UTC().Truncate(time.Microsecond); !rec.CreatedAt.Equal(want) {
		t.Errorf("prepared at %v, want the store's time %v", rec.CreatedAt, want)
	}
}

// A question delivered after its task moved on to another question anchors the input request it
// asked, not the task's current one: a reply to it is new work, and only a reply to the later
// question continues the waiting task.
func TestLateQuestionAnchorsTheInputRequestItAsked(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := context.Background()
		s := open(t)
		plane := taskplane.New(s, taskplane.WithLogger(quiet))
		event := func(id, replyTo, text string) taskplane.Event {
			return taskplane.Event{Principal: "alice", Source: "slack", Identity: id, ConversationKey: "C1/1",
				ReplyTo: replyTo, Message: taskplane.Message{ID: "m-" + id, Role: taskplane.RoleUser,
					Parts: []taskplane.Part{taskplane.TextPart(text)}}}
		}
		acc, err := plane.Accept(ctx, event("ev-1", "", "deploy it"))
		if err != nil {
			t.Fatal(err)
		}
		apply := func(st taskplane.State, text string) *taskplane.Task {
			t.Helper()
			c := taskplane.SetStatus{State: st}
			if text != "" {
				c.Message = &taskplane.Message{ID: "q-" + text, Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart(text)}}
			}
			task, err := plane.Apply(ctx, "alice", acc.Task.ID, taskplane.AnyVersion, c)
			if err != nil {
				t.Fatal(err)
			}
			return task
		}
		first := apply(taskplane.StateInputRequired, "Which branch?")
		e := newEngine(t, s, delivery.Route{Sender: newProvider(nil), Recovery: delivery.Lookup}, nil)
		q := delivery.RequestFor(first, delivery.OpQuestion, *first.Status.Message)
		late, err := e.Prepare(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		// The input request is kept with the delivery, not in its identity.
		if q.InputSeq == 0 {
			t.Fatal("RequestFor set no InputSeq for the question of an interrupted task")
		}
		without := q
		without.InputSeq = 0
		if id, _ := delivery.ID(without); id != late.ID {
			t.Errorf("the question's delivery ID %s depends on its InputSeq (%s without)", late.ID, id)
		}
		// The task moves on (answered elsewhere) and asks again before the first question goes out.
		apply(taskplane.StateWorking, "")
		second := apply(taskplane.StateInputRequired, "Which tag?")
		asked := mustDeliver(t, e, delivery.RequestFor(second, delivery.OpQuestion, *second.Status.Message))
		late = mustProcess(t, e, late)
		wantState(t, late, delivery.StateDelivered)

		stale, err := plane.Accept(ctx, event("ev-2", late.ProviderID, "main"))
		if err != nil {
			t.Fatal(err)
		}
		if stale.Outcome != taskplane.Created || stale.AnchorMiss != taskplane.AnchorNoInputRequest {
			t.Errorf("a reply to the late first question: %s (anchor miss %q), want a new task (%q)",
				stale.Outcome, stale.AnchorMiss, taskplane.AnchorNoInputRequest)
		}
		answer, err := plane.Accept(ctx, event("ev-3", asked.ProviderID, "v1.2"))
		if err != nil {
			t.Fatal(err)
		}
		if answer.Outcome != taskplane.Continued || answer.Task.ID != acc.Task.ID {
			t.Errorf("a reply to the second question: %s of %s, want task %s continued", answer.Outcome, answer.Task.ID, acc.Task.ID)
		}
	})
}

// A task that asks twice without a message of its own gets a notice per ask: the notice of the
// first ask, still waiting to go out when the task asks again, does not swallow the second, and
// only a reply to the second continues the task.
func TestEachAskWithoutAMessageGetsItsOwnNotice(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := context.Background()
		s := open(t)
		plane := taskplane.New(s, taskplane.WithLogger(quiet))
		event := func(id, replyTo string) taskplane.Event {
			return taskplane.Event{Principal: "alice", Source: "slack", Identity: id, ConversationKey: "C1/1",
				ReplyTo: replyTo, Message: taskplane.Message{ID: "m-" + id, Role: taskplane.RoleUser,
					Parts: []taskplane.Part{taskplane.TextPart("text of " + id)}}}
		}
		acc, err := plane.Accept(ctx, event("ev-1", ""))
		if err != nil {
			t.Fatal(err)
		}
		apply := func(st taskplane.State) delivery.Request {
			t.Helper()
			task, err := plane.Apply(ctx, "alice", acc.Task.ID, taskplane.AnyVersion, taskplane.SetStatus{State: st})
			if err != nil {
				t.Fatal(err)
			}
			op, msg, _ := results.What(task)
			return delivery.RequestFor(task, op, msg)
		}
		e := newEngine(t, s, delivery.Route{Sender: newProvider(nil), Recovery: delivery.Lookup}, nil)
		first, err := e.Prepare(ctx, apply(taskplane.StateInputRequired))
		if err != nil {
			t.Fatal(err)
		}
		apply(taskplane.StateWorking)
		second := mustDeliver(t, e, apply(taskplane.StateInputRequired))
		if second.ID == first.ID {
			t.Fatalf("the second ask's notice is the first ask's delivery %s", first.ID)
		}
		first = mustProcess(t, e, first)
		stale, err := plane.Accept(ctx, event("ev-2", first.ProviderID))
		if err != nil {
			t.Fatal(err)
		}
		if stale.Outcome != taskplane.Created {
			t.Errorf("a reply to the first ask's late notice: %s, want a new task", stale.Outcome)
		}
		answer, err := plane.Accept(ctx, event("ev-3", second.ProviderID))
		if err != nil {
			t.Fatal(err)
		}
		if answer.Outcome != taskplane.Continued || answer.Task.ID != acc.Task.ID {
			t.Errorf("a reply to the second ask's notice: %s (anchor miss %q), want task %s continued", answer.Outcome, answer.AnchorMiss, acc.Task.ID)
		}
	})
}

// An idempotent-class delivery whose first call landed just before its process died, and whose
// repeats are then refused until they run out, may have been delivered: it is ambiguous.
func TestRepeatsThatRunOutAfterACrashMidSendAreAmbiguous(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		c := newClock()
		p := newProvider(c)
		route := delivery.Route{Sender: p, Recovery: delivery.Idempotent}
		pol := delivery.WithPolicy(delivery.Policy{MaxAttempts: 3})
		e := newEngine(t, s, route, c, delivery.WithOwner("dies"), pol)
		rec, err := e.Prepare(context.Background(), request("t-crash", "y"))
		if err != nil {
			t.Fatal(err)
		}
		p.afterPost = runtime.Goexit // the process dies right after the provider took the call
		done := make(chan struct{})
		go func() { defer close(done); e.Process(context.Background(), rec.Principal, rec.ID) }()
		<-done
		p.afterPost = nil
		p.behave = func(int, delivery.Delivery) (bool, error) { return false, delivery.Retryable(errors.New("503")) }
		next := newEngine(t, s, route, c, pol)
		for range 10 {
			c.Advance(delivery.DefaultLease + time.Minute)
			if _, err := next.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		got, err := next.Get(context.Background(), rec.Principal, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != delivery.StateAmbiguous {
			t.Errorf("state %s (%s), want ambiguous: the first call landed (%d posts)", got.State, got.LastError, len(p.postsOf(rec.ID)))
		}
	})
}
