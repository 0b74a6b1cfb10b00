package delivery_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// Invariant 8: a process dies while its lookup-class call is still in flight at the provider.
// Recovery, once the lease runs out, does not look it up before the call could have landed (the
// send timeout and LookupGrace after it began), as after a call that timed out: the call landing
// 61 s after it was made is found, not posted again.
func TestRecoveryWaitsForACallInFlightBeforeLookingItUp(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		c := newClock()
		p := newProvider(c)
		route := delivery.Route{Sender: p, Recovery: delivery.Lookup}
		crashed, rec := prepareCrashing(t, s, route, c)
		p.dieInCall(1, nil) // the request is at the provider, not landed yet; the process dies
		crash(crashed, rec)
		p.behave = nil
		c.Advance(delivery.DefaultLease + time.Second)
		next := newEngine(t, s, route, c, delivery.WithOwner("restarted"))
		if _, err := next.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := next.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		got, _ := next.Get(context.Background(), rec.Principal, rec.ID)
		if got.State != delivery.StateSending || p.lookups != 0 || p.calls[rec.ID] != 1 {
			t.Fatalf("at lease expiry: state %s, %d lookups, %d calls; want it left in sending, not looked up", got.State, p.lookups, p.calls[rec.ID])
		}
		// The first call lands 61 s after it was made: within DefaultSendTimeout+LookupGrace.
		p.mu.Lock()
		p.posts = append(p.posts, post{DeliveryID: rec.ID, ProviderID: "msg-late", At: c.Now()})
		p.mu.Unlock()
		c.Advance(delivery.DefaultSendTimeout + delivery.DefaultPolicy.LookupGrace - delivery.DefaultLease)
		for range 2 {
			if _, err := next.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		got, _ = next.Get(context.Background(), rec.Principal, rec.ID)
		wantState(t, got, delivery.StateDelivered)
		if n := len(p.postsOf(rec.ID)); n != 1 || got.ProviderID != "msg-late" {
			t.Errorf("posts = %d, provider id %q; want the late call found, not posted again", n, got.ProviderID)
		}
	})
}

// bobOnly routes "slack" for bob alone (a process hosting another tenant's Slack instance).
type bobOnly struct{ r delivery.Route }

func (b bobOnly) Route(principal, source string) (delivery.Route, error) {
	if principal != "bob" {
		return delivery.Route{}, fmt.Errorf("%w %q for %s", delivery.ErrNoRoute, source, principal)
	}
	return b.r, nil
}
func (bobOnly) Sources() []string { return []string{"slack"} }

// A process that hosts the source for other principals only claims the dead worker's row first
// and releases it (no route): that does not shorten the wait before the lookup.
func TestRecoveryWaitOutlastsAReleaseByAProcessWithoutARoute(t *testing.T) {
	s := storetest.OpenSQLite(t)
	c := newClock()
	p := newProvider(c)
	route := delivery.Route{Sender: p, Recovery: delivery.Lookup}
	crashed, rec := prepareCrashing(t, s, route, c)
	p.dieInCall(1, nil)
	crash(crashed, rec)
	p.behave = nil
	c.Advance(delivery.DefaultLease + time.Second)
	// Another process, hosting slack for bob only, claims the row first: no route, released.
	other := delivery.New(s, bobOnly{route}, delivery.WithLogger(quiet), delivery.WithPoll(20*time.Millisecond),
		delivery.WithClock(c.Now), delivery.WithOwner("other"))
	t.Cleanup(func() { other.Close() })
	if _, err := other.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second)
	next := newEngine(t, s, route, c, delivery.WithOwner("restarted"))
	for range 2 {
		if _, err := next.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := next.Get(context.Background(), rec.Principal, rec.ID)
	if p.lookups != 0 || got.State != delivery.StateSending {
		t.Fatalf("%s after the call began: %s, looked up %d time(s); want it waiting until send timeout + LookupGrace (90 s): the call may still land",
			delivery.DefaultLease+2*time.Second, got.State, p.lookups)
	}
}

// A lookup finds nothing, the delivery is sent again at once and its worker dies in that call,
// begun in the same instant as the lookup's outcome was recorded (no clock tick between them):
// recovery still waits until that call could no longer land before looking it up.
func TestRecoveryWaitsForACallBegunInTheInstantOfALookup(t *testing.T) {
	s := storetest.OpenSQLite(t)
	c := newClock()
	p := newProvider(c)
	route := delivery.Route{Sender: p, Recovery: delivery.Lookup}
	crashed, rec := prepareCrashing(t, s, route, c)
	// The first call's outcome is unknown (not posted); the worker dies in the second.
	p.dieInCall(2, func() (bool, error) { return false, errTimeout })
	mustProcess(t, crashed, rec)
	c.Advance(delivery.DefaultPolicy.LookupGrace + time.Second)
	crash(crashed, rec)
	p.behave = nil
	if p.lookups != 1 {
		t.Fatalf("lookups = %d, want 1", p.lookups)
	}
	c.Advance(delivery.DefaultLease + time.Second)
	next := newEngine(t, s, route, c, delivery.WithOwner("restarted"))
	if _, err := next.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.lookups != 1 {
		got, _ := next.Get(context.Background(), rec.Principal, rec.ID)
		t.Fatalf("%s after the second call began the row was looked up again (lookups %d, state %s, attempts %v); want it to wait until send timeout + LookupGrace",
			delivery.DefaultLease+time.Second, p.lookups, got.State, outcomes(attempts(t, next, rec)))
	}
}
