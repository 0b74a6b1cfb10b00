package delivery_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// blipStore fails Updates while failing > 0 (a Postgres failover of a couple of seconds).
type blipStore struct {
	store.Store
	failing atomic.Int32
}

func (b *blipStore) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if b.failing.Load() > 0 {
		b.failing.Add(-1)
		return errors.New("connection refused (failover)")
	}
	return b.Store.Update(ctx, fn)
}

// A provider call that succeeded while the store was away for a few seconds (a failover) is
// recorded delivered once the store is back, not left to recovery, which would find it ambiguous.
func TestAReceiptSurvivesAStoreAwayForSeconds(t *testing.T) {
	s := &blipStore{Store: storetest.OpenSQLite(t)}
	c := newClock()
	p := newProvider(c)
	p.afterPost = func() { s.failing.Store(5) } // away for the next 5 Updates: past the 5 tries that were all a finish made
	e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Ambiguous}, c)
	rec := mustDeliver(t, e, request("t-1", "the answer"))
	t.Logf("after the call: %s", rec.State)
	c.Advance(2 * time.Minute) // the lease runs out; recovery
	if _, err := e.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ := e.Get(context.Background(), rec.Principal, rec.ID)
	t.Logf("after recovery: %s provider=%q last error %q; provider has %d post(s) with id %q", got.State, got.ProviderID,
		got.LastError, len(p.allPosts()), p.allPosts()[0].ProviderID)
	if got.State != delivery.StateDelivered {
		t.Fatalf("a delivery whose receipt the engine held is %s", got.State)
	}
}

// A delivery whose send had an unknown outcome stays in sending, unleased, its repeat or lookup
// scheduled by the engine: it is not stuck, and Resolve leaves it to the engine (a retry would
// skip the lookup that finds the first post, and send it twice).
func TestResolveLeavesAnUnleasedSendingDeliveryToItsEngine(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		e, p, c, rec := firstAttempt(t, s, delivery.Lookup, func(call int, d delivery.Delivery) (bool, error) {
			if call == 1 {
				return true, delivery.Indeterminate(errors.New("connection reset after the post"))
			}
			return true, nil
		})
		op := delivery.New(s, nil, delivery.WithLogger(quiet), delivery.WithClock(c.Now))
		t.Cleanup(func() { op.Close() })
		ctx := context.Background()
		got, _ := op.Get(ctx, rec.Principal, rec.ID)
		if got.State != delivery.StateSending || !got.LeaseUntil.IsZero() {
			t.Fatalf("setup: %+v", got)
		}
		for _, r := range []delivery.Resolution{{Retry: true, By: "ops"}, {Abandon: true, By: "ops"}, {Delivered: "P1", By: "ops"}} {
			if _, err := op.Resolve(ctx, rec.Principal, rec.ID, r); !errors.Is(err, delivery.ErrNotResolvable) {
				t.Errorf("Resolve %+v of a delivery its engine looks up next: %v, want ErrNotResolvable", r, err)
			}
		}
		c.Advance(time.Hour)
		e.Process(ctx, rec.Principal, rec.ID)
		if got, _ := op.Get(ctx, rec.Principal, rec.ID); got.State != delivery.StateDelivered || len(p.postsOf(rec.ID)) != 1 {
			t.Fatalf("after the engine's lookup: %s with %d posts, want delivered with 1", got.State, len(p.postsOf(rec.ID)))
		}
	})
}

// A delivery released in sending after an unknown outcome whose source no engine routes any
// more (its instance removed from the configuration) is stuck: once no step has been recorded
// for longer than any repeat or lookup waits, an operator can resolve it.
func TestAnUnleasedSendingDeliveryNoEngineWorksCanBeResolved(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		e, _, c, rec := firstAttempt(t, s, delivery.Idempotent, func(call int, d delivery.Delivery) (bool, error) {
			return true, delivery.Indeterminate(errors.New("502 after the post"))
		})
		ctx := context.Background()
		e.Close() // the process restarts without that source
		op := delivery.New(s, nil, delivery.WithLogger(quiet), delivery.WithClock(c.Now))
		t.Cleanup(func() { op.Close() })
		c.Advance(10 * time.Minute)
		if _, err := op.Resolve(ctx, rec.Principal, rec.ID, delivery.Resolution{Abandon: true, By: "ops"}); !errors.Is(err, delivery.ErrNotResolvable) {
			t.Fatalf("10 minutes after its last step: %v, want ErrNotResolvable (an engine may still repeat it)", err)
		}
		c.Advance(2 * time.Hour)
		got, err := op.Resolve(ctx, rec.Principal, rec.ID, delivery.Resolution{Abandon: true, By: "ops"})
		if err != nil || got.State != delivery.StateFailed {
			t.Fatalf("two hours later: %v %v, want it abandoned", got.State, err)
		}
	})
}

// An operator's retry says the provider does not have the delivery: a refusal after it is
// failed, not ambiguous again because of an unknown outcome from before the retry.
func TestARefusalAfterAnOperatorsRetryIsFailed(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		e, _, c, rec := firstAttempt(t, open(t), delivery.Idempotent, func(call int, d delivery.Delivery) (bool, error) {
			if call == 1 {
				return false, delivery.Indeterminate(errors.New("timeout after write"))
			}
			return false, delivery.Permanent(errors.New("400 bad request"))
		})
		ctx := context.Background()
		c.Advance(time.Hour)
		e.Process(ctx, rec.Principal, rec.ID)
		if got, _ := e.Get(ctx, rec.Principal, rec.ID); got.State != delivery.StateAmbiguous {
			t.Fatalf("a repeat refused after an unknown outcome: %s, want ambiguous", got.State)
		}
		if _, err := e.Resolve(ctx, rec.Principal, rec.ID, delivery.Resolution{Retry: true, By: "ops", Note: "the receiver has no record of it"}); err != nil {
			t.Fatal(err)
		}
		e.Process(ctx, rec.Principal, rec.ID)
		if got, _ := e.Get(ctx, rec.Principal, rec.ID); got.State != delivery.StateFailed {
			t.Errorf("refused after an operator's retry: %s, want failed (%s)", got.State, got.LastError)
		}
	})
}

// reclaimedDuringItsCall runs a delivery whose first call outlives its lease: while that call is
// held, the same engine claims the row again (RunOnce) and its step waits on the delivery's
// lock; then the first call returns what behave (made by mk for the engine; nil: success) says
// for call 1.
func reclaimedDuringItsCall(t *testing.T, mk func(e *delivery.Engine) func(call int, d delivery.Delivery) (bool, error)) (*provider, delivery.Record) {
	t.Helper()
	s := storetest.OpenSQLite(t)
	c := newClock()
	p := newProvider(c)
	p.entered, p.gate = make(chan struct{}), make(chan struct{})
	e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Idempotent}, c)
	if mk != nil {
		p.behave = mk(e)
	}
	ctx := context.Background()
	rec, err := e.Prepare(ctx, request("t-1", "x"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); e.Process(ctx, rec.Principal, rec.ID) }()
	<-p.entered
	c.Advance(delivery.DefaultLease + time.Second)
	ran := make(chan struct{})
	go func() { defer close(ran); _, _ = e.RunOnce(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if got, _ := e.Get(ctx, rec.Principal, rec.ID); got.Attempts == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the engine did not claim its own delivery again after the lease ran out")
		}
	}
	close(p.gate)
	<-done
	<-ran
	got, _ := e.Get(ctx, rec.Principal, rec.ID)
	return p, got
}

// A call that outlived its lease and then delivered: the step this engine's own re-claim queued
// behind it finds the row delivered and calls nothing.
func TestAReclaimOfItsOwnDeliveryAfterItsCallDeliveredSendsNothing(t *testing.T) {
	p, got := reclaimedDuringItsCall(t, nil)
	if n := p.totalCalls(); n != 1 || got.State != delivery.StateDelivered {
		t.Fatalf("%d provider calls, %s; want 1 and delivered", n, got.State)
	}
}

// A call that outlived its lease and then came back retryable: its late outcome is recorded as
// superseded and leaves the re-claim's lease alone, so the re-claimed call runs under a lease no
// other engine can take.
func TestALateOutcomeOfACallThatOutlivedItsLeaseLeavesTheReclaimsLease(t *testing.T) {
	var during delivery.Record
	_, got := reclaimedDuringItsCall(t, func(e *delivery.Engine) func(int, delivery.Delivery) (bool, error) {
		return func(call int, d delivery.Delivery) (bool, error) {
			if call == 1 {
				return false, delivery.Retryable(errTimeout)
			}
			during, _ = e.Get(context.Background(), d.Principal, d.ID)
			return true, nil
		}
	})
	if during.State != delivery.StateSending || during.LeaseUntil.IsZero() {
		t.Fatalf("during the re-claimed call the row is %s with lease %v: claimable by another engine", during.State, during.LeaseUntil)
	}
	if got.State != delivery.StateDelivered {
		t.Fatalf("after it: %s, want delivered", got.State)
	}
}

// flakyGet fails the next GetDelivery outside a transaction once armed (a store blip).
type flakyGet struct {
	store.Store
	armed atomic.Bool
}

func (f *flakyGet) GetDelivery(ctx context.Context, principal, id string) (store.Delivery, error) {
	if f.armed.CompareAndSwap(true, false) {
		return store.Delivery{}, errors.New("connection reset by peer")
	}
	return f.Store.GetDelivery(ctx, principal, id)
}

// A store blip on the read a claimed step makes before acting does not drop the step: the
// claim already moved the row to sending and spent an attempt, so a dropped step would leave a
// delivery never sent to be settled ambiguous once its lease ran out.
func TestAReadFailingBeforeAClaimedStepActsDoesNotDropIt(t *testing.T) {
	s := &flakyGet{Store: storetest.OpenSQLite(t)}
	c := newClock()
	p := newProvider(c)
	e := newEngine(t, s, delivery.Route{Sender: sendOnly{p}, Recovery: delivery.Ambiguous}, c)
	ctx := context.Background()
	rec, err := e.Prepare(ctx, request("t-1", "x"))
	if err != nil {
		t.Fatal(err)
	}
	s.armed.Store(true)
	if n, err := e.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v", n, err)
	}
	got, _ := e.Get(ctx, rec.Principal, rec.ID)
	if p.totalCalls() != 1 || got.State != delivery.StateDelivered {
		t.Fatalf("provider calls %d, state %s (%s); want the claimed delivery sent and delivered", p.totalCalls(), got.State, got.LastError)
	}
}

// firstAttempt prepares one delivery on an engine over s (recovery class rc; a lookup engine's
// provider is its reconciler too) whose provider answers by behave, and processes it once.
func firstAttempt(t *testing.T, s store.Store, rc delivery.Recovery, behave func(call int, d delivery.Delivery) (bool, error)) (*delivery.Engine, *provider, *clock, delivery.Record) {
	t.Helper()
	c := newClock()
	p := newProvider(c)
	p.behave = behave
	route := delivery.Route{Sender: p, Recovery: rc}
	if rc == delivery.Lookup {
		route.Reconciler = p
	}
	e := newEngine(t, s, route, c)
	rec, err := e.Prepare(context.Background(), request("t-1", "the answer"))
	if err != nil {
		t.Fatal(err)
	}
	e.Process(context.Background(), rec.Principal, rec.ID)
	return e, p, c, rec
}
