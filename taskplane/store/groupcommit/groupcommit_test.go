package groupcommit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/groupcommit"
)

var errClosed = errors.New("closed")

// run is a runner that calls each fn with a nil Tx and answers it with the fn's error, recording
// the size of every group.
type run struct {
	mu      sync.Mutex
	groups  []int
	entered chan struct{} // receives once per group, before the gate
	gate    chan struct{} // each group waits for it
}

func newRun() *run { return &run{entered: make(chan struct{}, 64), gate: make(chan struct{})} }

func (r *run) fn(group []*groupcommit.Request) []*groupcommit.Request {
	r.entered <- struct{}{}
	<-r.gate
	r.mu.Lock()
	r.groups = append(r.groups, len(group))
	r.mu.Unlock()
	for _, q := range group {
		q.Answer(q.Fn(q.Ctx, nil))
	}
	return nil
}

func TestWaitingRequestsShareAGroupAndEachGetsItsOwnOutcome(t *testing.T) {
	q := groupcommit.New(64, errClosed)
	r := newRun()
	q.Start(1, 64, r.fn)
	defer q.Close()
	// The first request holds the runner at the gate; the next ten queue behind it.
	first := make(chan error, 1)
	go func() { first <- q.Submit(context.Background(), func(context.Context, store.Tx) error { return nil }) }()
	<-r.entered
	mine := errors.New("mine")
	errs := make(chan error, 10)
	for i := range 10 {
		go func() {
			errs <- q.Submit(context.Background(), func(context.Context, store.Tx) error {
				if i == 3 {
					return mine
				}
				return nil
			})
		}()
	}
	for q.Len() < 10 {
		time.Sleep(time.Millisecond)
	}
	close(r.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	failed := 0
	for range 10 {
		if err := <-errs; errors.Is(err, mine) {
			failed++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if failed != 1 {
		t.Fatalf("%d callers got the failing fn's error, want 1", failed)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.groups) != 2 || r.groups[1] != 10 {
		t.Fatalf("groups %v, want [1 10]", r.groups)
	}
}

func TestCanceledWhileQueuedNeverRunsAndCloseFailsTheRest(t *testing.T) {
	q := groupcommit.New(64, errClosed)
	r := newRun()
	q.Start(1, 64, r.fn)
	holder := make(chan error, 1)
	go func() { holder <- q.Submit(context.Background(), func(context.Context, store.Tx) error { return nil }) }()
	<-r.entered
	var ran atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	canceled := make(chan error, 1)
	go func() {
		canceled <- q.Submit(ctx, func(context.Context, store.Tx) error { ran.Add(1); return nil })
	}()
	queued := make(chan error, 1)
	go func() {
		queued <- q.Submit(context.Background(), func(context.Context, store.Tx) error { ran.Add(1); return nil })
	}()
	for q.Len() < 2 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-canceled; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled while queued: %v", err)
	}
	closed := make(chan struct{})
	go func() { q.Close(); close(closed) }()
	<-q.Closing() // Close has begun (a sleep of 10 ms was not always enough); the runner still holds the first group
	close(r.gate)
	<-closed
	if err := <-holder; err != nil {
		t.Fatalf("the running request: %v", err)
	}
	if err := <-queued; !errors.Is(err, errClosed) {
		t.Fatalf("queued at Close: %v, want the closed error", err)
	}
	if ran.Load() != 0 {
		t.Fatalf("%d fns ran after they were canceled or closed", ran.Load())
	}
	if err := q.Submit(context.Background(), func(context.Context, store.Tx) error { return nil }); !errors.Is(err, errClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
}
