package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/taskplane/store"
)

// Group commit: Updates queue for a few committers, each of which runs the Updates waiting for it
// in one transaction, each fn inside its own savepoint, and commits once. A commit waits for a
// WAL flush; measured here, Postgres's own grouping of concurrent commits left about 1.5
// commits per flush, so the flushes, not the statements, bounded acceptances per second. A
// group's fns run one after another on one connection; several committers run side by side.

// maxGroup bounds the Updates that share one transaction, so one commit's latency (and how long
// the last fn of a group waits for the first) stays bounded under load.
const maxGroup = 32

// Request states, as in the SQLite driver: a request moves from queued to running (a committer
// took it) or to abandoned (its caller gave up first), never both.
const (
	reqQueued int32 = iota
	reqRunning
	reqAbandoned
)

// request is one Update waiting for a committer.
type request struct {
	ctx      context.Context
	fn       func(ctx context.Context, tx store.Tx) error
	state    atomic.Int32
	attempts int
	done     chan error // buffered: a committer never blocks on a caller that left
}

// committers is how many groups run at once: half the pool, leaving the rest to reads and LISTEN.
func committers(poolSize int32) int { return max(2, int(poolSize)/2) }

// startCommitters starts the committers; they stop when the store closes.
func (s *Store) startCommitters(n int) {
	s.queue = make(chan *request, maxGroup*n)
	s.committed = make(chan struct{})
	var live atomic.Int32
	live.Store(int32(n))
	for range n {
		go func() {
			s.commitLoop()
			if live.Add(-1) == 0 {
				close(s.committed)
			}
		}()
	}
}

// Update runs fn in one READ COMMITTED transaction, which it may share with other Updates of this
// Store (group commit: fn runs in a savepoint of its own; its writes are pipelined, see pipe). It
// returns once that transaction has committed, or with fn's error (fn's writes rolled back, the
// group's other fns unaffected). A serialization failure or deadlock in fn's statements rolls fn
// back and runs it again in a later transaction, up to maxUpdateAttempts times; any other error
// from fn is returned unchanged (wrapped with ErrClosed only when Close interrupted the call).
//
// If ctx ends while fn is still queued, Update returns ctx.Err() and fn never runs. Once fn has
// started, Update waits for the outcome, since fn's writes may commit; fn's statements fail with
// ctx.Err() from then on, and a statement already sent runs to its end.
func (s *Store) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if ctx.Value(committerKey{}) == s {
		return errors.New("postgres store: Update called inside an Update fn (it could wait for itself)")
	}
	if s.closing.Err() != nil {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &request{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case s.queue <- r:
	case <-s.closing.Done():
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return ctx.Err()
		}
		return <-r.done
	case <-s.committed:
		// The committers have stopped; a request one of them took was answered before.
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return ErrClosed
		}
		return <-r.done
	}
}

func (s *Store) commitLoop() {
	group := make([]*request, 0, maxGroup)
	for {
		var first *request
		select {
		case <-s.closing.Done():
			s.drain()
			return
		case first = <-s.queue:
		}
		group = append(group[:0], first)
	collect:
		for len(group) < maxGroup {
			select {
			case r := <-s.queue:
				group = append(group, r)
			default:
				break collect
			}
		}
		live := group[:0]
		for _, r := range group {
			if r.state.CompareAndSwap(reqQueued, reqRunning) {
				live = append(live, r)
			}
		}
		for len(live) > 0 {
			live = s.runGroup(live)
		}
		clear(group)
	}
}

// drain fails every request still queued.
func (s *Store) drain() {
	for {
		select {
		case r := <-s.queue:
			if r.state.CompareAndSwap(reqQueued, reqRunning) {
				r.done <- ErrClosed
			}
		default:
			return
		}
	}
}

// runGroup runs the fns of group in one transaction and commits once. It answers every request
// except those it returns, which are to run again in a fresh transaction: deadlock and
// serialization victims (after a backoff), and, when the transaction itself was lost, the fns that
// had succeeded in it.
func (s *Store) runGroup(group []*request) []*request {
	// The group's statements run on the store's context, never on one caller's: cancelling a
	// statement of a shared transaction must not cost the other callers their writes.
	gctx := s.closing
	fail := func(reqs []*request, err error) {
		for _, r := range reqs {
			r.done <- s.closedErr(err)
		}
	}
	c, err := s.pool.Acquire(gctx)
	if err != nil {
		fail(group, fmt.Errorf("postgres: begin: %w", err))
		return nil
	}
	defer c.Release() // a connection left inside a transaction is closed by the pool, not reused
	p := &pipe{conn: c.Conn(), run: gctx}
	var (
		ok      []*request
		retry   []*request
		hints   []string
		lastErr error
	)
	// again answers r with err, or, for a deadlock or serialization victim with attempts left,
	// keeps it to run again.
	again := func(r *request, err error) {
		r.attempts++
		if retryable(err) && r.attempts < maxUpdateAttempts {
			retry, lastErr = append(retry, r), err
			return
		}
		r.done <- s.closedErr(err)
	}
	// A group of one needs no savepoint: its fn's failure rolls back the transaction, and the
	// fn's held-back writes go with the COMMIT.
	solo := len(group) == 1
	for i, r := range group {
		if !solo {
			p.savepoint()
		}
		t := &tx{reader: reader{q: p}, s: s, p: p}
		fnErr := call(r, t)
		if fnErr == nil && solo {
			ok, hints = append(ok, r), t.hints
			break
		}
		if fnErr == nil {
			// The fn's held-back writes go now, so a failure among them is the fn's own.
			if _, fnErr = p.Exec(gctx, "RELEASE SAVEPOINT fn"); fnErr == nil {
				ok = append(ok, r)
				hints = append(hints, t.hints...)
				continue
			}
		}
		if solo {
			_ = p.rollback()
			again(r, fnErr)
			return s.backoff(retry, lastErr)
		}
		if err := p.undo(); err != nil {
			// The transaction is lost (the connection broke, or Close): r hears its error, the
			// fns that had succeeded in it run again.
			r.done <- s.closedErr(fnErr)
			_ = p.rollback()
			if gctx.Err() != nil {
				fail(append(ok, group[i+1:]...), fmt.Errorf("postgres: transaction lost: %w", err))
				fail(retry, lastErr)
				return nil
			}
			return append(append(ok, retry...), group[i+1:]...)
		}
		again(r, fnErr)
	}
	var after func(b *pgx.Batch) int
	if len(hints) > 0 {
		after = func(b *pgx.Batch) int {
			b.Queue(notifySQL, s.channel, hints)
			return 1
		}
	}
	hintErr, err := p.commit(gctx, after)
	if err != nil {
		_ = p.rollback()
		if solo && len(ok) == 1 {
			again(ok[0], fmt.Errorf("postgres: commit: %w", err)) // its held-back writes failed here
		} else {
			fail(ok, fmt.Errorf("postgres: commit: %w", err))
		}
		return s.backoff(retry, lastErr)
	}
	if hintErr != nil {
		slog.Warn("postgres store: send task event hints", "error", hintErr, "tasks", len(hints))
	}
	for _, r := range ok {
		r.done <- nil
	}
	return s.backoff(retry, lastErr)
}

// backoff waits before retry runs again, a jittered exponential delay so that the transactions
// that collided do not collide again, and returns it; if the store closes meanwhile, retry is
// answered with lastErr instead.
func (s *Store) backoff(retry []*request, lastErr error) []*request {
	if len(retry) == 0 {
		return nil
	}
	d := retryBaseDelay << (retry[0].attempts - 1)
	t := time.NewTimer(d/2 + rand.N(d))
	defer t.Stop()
	select {
	case <-s.closing.Done():
		for _, r := range retry {
			r.done <- s.closedErr(lastErr)
		}
		return nil
	case <-t.C:
		return retry
	}
}

// committerKey marks the context handed to an fn, to catch an Update nested inside an fn: it
// could wait for a committer busy running that fn.
type committerKey struct{}

// call runs r.fn on t and turns a panic into an error for r's caller alone.
func call(r *request, t *tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("postgres store: panic in Update fn: %v\n%s", p, debug.Stack())
		}
	}()
	return r.fn(context.WithValue(r.ctx, committerKey{}, t.s), t)
}

// closedErr marks an error of an Update that Close interrupted with ErrClosed. The original error
// stays in the chain, so errors.Is still finds what fn returned.
func (s *Store) closedErr(err error) error {
	if err != nil && s.closing.Err() != nil && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}
