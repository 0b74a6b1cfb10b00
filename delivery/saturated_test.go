package delivery_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// dueCounter counts NextDeliveryDue reads.
type dueCounter struct {
	store.Store
	due atomic.Int64
}

func (c *dueCounter) NextDeliveryDue(ctx context.Context, sources []string) (time.Time, bool, error) {
	c.due.Add(1)
	return c.Store.NextDeliveryDue(ctx, sources)
}

// With every worker busy and more deliveries due, Run waits for a worker to finish (or the poll)
// instead of re-reading the store for the next due time every millisecond.
func TestRunWithEveryWorkerBusyDoesNotReReadTheStoreInALoop(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := &dueCounter{Store: open(t)}
		p := newProvider(nil)
		p.entered, p.gate = make(chan struct{}), make(chan struct{})
		e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup}, nil,
			delivery.WithWorkers(1), delivery.WithPoll(time.Second))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var recs []delivery.Record
		for i := range 3 { // three lanes: each is due at once
			rec, err := e.Prepare(ctx, inChannel(request(fmt.Sprint("t-", i), "the answer"), fmt.Sprint("C", i)))
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, rec)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = e.Run(ctx) }()
		<-p.entered // the one worker is held in a provider call; two deliveries are due
		before := s.due.Load()
		time.Sleep(1500 * time.Millisecond)
		n := s.due.Load() - before
		close(p.gate)
		for _, r := range recs {
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			got, err := e.Wait(wctx, r.Principal, r.ID)
			wcancel()
			if err != nil || got.State != delivery.StateDelivered {
				t.Fatalf("delivery %s: %s %v, want delivered once the worker is free", r.ID, got.State, err)
			}
		}
		cancel()
		<-done
		if n >= 100 {
			t.Errorf("with its one worker busy, Run read the next due time %d times in 1.5s (poll 1s): a busy loop", n)
		}
	})
}

// An engine with no routes (no configured instance can send) claims nothing: a due row of a
// source it does not route (a removed instance, the push engine's backlog) does not make its Run
// read the next due time every millisecond.
func TestAnEngineWithoutRoutesDoesNotSpinOnAnotherSourcesDueRow(t *testing.T) {
	raw := storetest.OpenSQLite(t)
	other := delivery.New(raw, delivery.Routes{"slack": {Sender: newProvider(nil), Recovery: delivery.Lookup}},
		delivery.WithLogger(quiet))
	t.Cleanup(func() { other.Close() })
	if _, err := other.Prepare(context.Background(), request("t-1", "x")); err != nil {
		t.Fatal(err)
	}
	s := &dueCounter{Store: raw}
	home := delivery.New(s, delivery.Routes{}, delivery.WithLogger(quiet), delivery.WithPoll(100*time.Millisecond))
	t.Cleanup(func() { home.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_ = home.Run(ctx)
	if n := s.due.Load(); n > 20 {
		t.Errorf("an engine that claims nothing read the next due time %d times in 0.5 s (poll 100 ms)", n)
	}
}
