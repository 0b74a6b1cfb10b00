// Package groupcommit is the queue both store drivers put their Updates on: callers submit
// their fns, runners take the fns waiting for them and run a group of them in one transaction,
// committing once. The drivers bring the transaction; this package brings the queue, the
// hand-over of each caller's outcome, cancellation while queued, and shutdown.
package groupcommit

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/channels-dev/channels/taskplane/store"
)

// Request states. A request moves from queued to running (a runner took it) or to abandoned (its
// caller gave up first), never both: the compare-and-swap decides who owns it.
const (
	queued int32 = iota
	running
	abandoned
)

// Request is one Update waiting for a runner.
type Request struct {
	Ctx context.Context
	Fn  func(ctx context.Context, tx store.Tx) error
	// Attempts counts the runs that ended in a retryable failure (the driver's to keep).
	Attempts int

	state atomic.Int32
	done  chan error // buffered: a runner never blocks on a caller that left
}

// Answer gives the request's caller its outcome. A runner answers each request it runs exactly
// once, unless it hands it back to run again (see Queue.Start).
func (r *Request) Answer(err error) { r.done <- err }

// Queue is the Updates of one store waiting for its runners.
type Queue struct {
	ch       chan *Request
	closing  chan struct{}
	stopped  chan struct{}
	closeMu  sync.Once
	closeErr error
}

// New returns a queue for up to capacity waiting Updates; once closed, Submit and the requests
// still queued fail with errClosed.
func New(capacity int, errClosed error) *Queue {
	return &Queue{ch: make(chan *Request, capacity), closing: make(chan struct{}), stopped: make(chan struct{}),
		closeErr: errClosed}
}

// Start starts n runners. Each takes the requests waiting for it, up to maxGroup, and calls run with
// those whose callers are still waiting; run answers each of them, except those it returns, which
// it calls again with at once. Runners stop when the queue closes, failing what is still queued.
func (q *Queue) Start(n, maxGroup int, run func(group []*Request) (again []*Request)) {
	var live atomic.Int32
	live.Store(int32(n))
	for range n {
		go func() {
			q.loop(maxGroup, run)
			if live.Add(-1) == 0 {
				close(q.stopped)
			}
		}()
	}
}

// Close makes the runners finish their current group, fail what is still queued, and stop; it
// returns once they have stopped. Later calls return at once.
func (q *Queue) Close() {
	q.closeMu.Do(func() { close(q.closing) })
	<-q.stopped
}

// Closing is closed when Close is called.
func (q *Queue) Closing() <-chan struct{} { return q.closing }

// Submit queues fn and waits for its outcome: nil once the transaction that ran it committed, or
// its error. If ctx ends while fn is still queued, Submit returns ctx.Err() and fn never runs;
// once fn has started, Submit waits for the outcome, since fn's writes may commit.
func (q *Queue) Submit(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &Request{Ctx: ctx, Fn: fn, done: make(chan error, 1)}
	select {
	case <-q.closing:
		return q.closeErr
	default:
	}
	select {
	case q.ch <- r:
	case <-q.closing:
		return q.closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		if r.state.CompareAndSwap(queued, abandoned) {
			return ctx.Err()
		}
		return <-r.done
	case <-q.stopped:
		// The runners have stopped; a request one of them took was answered before.
		if r.state.CompareAndSwap(queued, abandoned) {
			return q.closeErr
		}
		return <-r.done
	}
}

func (q *Queue) loop(maxGroup int, run func(group []*Request) []*Request) {
	group := make([]*Request, 0, maxGroup)
	for {
		// Closing wins over queued work: Close promises that pending Updates fail.
		select {
		case <-q.closing:
			q.drain()
			return
		default:
		}
		var first *Request
		select {
		case <-q.closing:
			q.drain()
			return
		case first = <-q.ch:
		}
		group = append(group[:0], first)
	collect:
		for len(group) < maxGroup {
			select {
			case r := <-q.ch:
				group = append(group, r)
			default:
				break collect
			}
		}
		live := group[:0]
		for _, r := range group {
			if r.state.CompareAndSwap(queued, running) {
				live = append(live, r)
			}
		}
		for len(live) > 0 {
			live = run(live)
		}
		clear(group) // drop references to finished requests and their fns
	}
}

// drain fails every request still queued.
func (q *Queue) drain() {
	for {
		select {
		case r := <-q.ch:
			if r.state.CompareAndSwap(queued, running) {
				r.Answer(q.closeErr)
			}
		default:
			return
		}
	}
}

// Len returns how many requests wait for a runner.
func (q *Queue) Len() int { return len(q.ch) }
