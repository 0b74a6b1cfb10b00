package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/groupcommit"
)

// Group commit: Updates queue for a few committers, each of which runs the Updates waiting for it
// in one transaction, each fn inside its own savepoint, and commits once. A commit waits for a
// WAL flush; measured here, Postgres's own grouping of concurrent commits left about 1.5
// commits per flush, so the flushes, not the statements, bounded acceptances per second. A
// group's fns run one after another on one connection; several committers run side by side.

// maxGroup bounds the Updates that share one transaction, so one commit's latency (and how long
// the last fn of a group waits for the first) stays bounded under load.
const maxGroup = 32

// committers is how many groups run at once: half the pool, leaving the rest to reads and LISTEN.
func committers(poolSize int32) int { return max(2, int(poolSize)/2) }

// startCommitters starts the committers; Close stops them.
func (s *Store) startCommitters(n int) {
	s.queue = groupcommit.New(maxGroup*n, ErrClosed)
	s.queue.Start(n, maxGroup, s.runGroup)
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
	return s.queue.Submit(ctx, fn)
}

// runGroup runs the fns of group in one transaction and commits once. It answers every request
// except those it returns, which are to run again in a fresh transaction: deadlock and
// serialization victims (after a backoff), and, when the transaction itself was lost, the fns that
// had succeeded in it.
func (s *Store) runGroup(group []*groupcommit.Request) []*groupcommit.Request {
	// The group's statements run on the store's context, never on one caller's: cancelling a
	// statement of a shared transaction must not cost the other callers their writes.
	gctx := s.closing
	fail := func(reqs []*groupcommit.Request, err error) {
		for _, r := range reqs {
			r.Answer(s.closedErr(err))
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
		ok      []*groupcommit.Request
		retry   []*groupcommit.Request
		hints   []string
		lastErr error
	)
	// again answers r with err, or, for a deadlock or serialization victim with attempts left,
	// keeps it to run again.
	again := func(r *groupcommit.Request, err error) {
		r.Attempts++
		if retryable(err) && r.Attempts < maxUpdateAttempts {
			retry, lastErr = append(retry, r), err
			return
		}
		r.Answer(s.closedErr(err))
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
			r.Answer(s.closedErr(fnErr))
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
		s.logger().Warn("postgres store: send task event hints", "error", hintErr, "tasks", len(hints))
	}
	for _, r := range ok {
		r.Answer(nil)
	}
	return s.backoff(retry, lastErr)
}

// backoff waits before retry runs again, a jittered exponential delay so that the transactions
// that collided do not collide again, and returns it; if the store closes meanwhile, retry is
// answered with lastErr instead.
func (s *Store) backoff(retry []*groupcommit.Request, lastErr error) []*groupcommit.Request {
	if len(retry) == 0 {
		return nil
	}
	d := retryBaseDelay << (retry[0].Attempts - 1)
	t := time.NewTimer(d/2 + rand.N(d))
	defer t.Stop()
	select {
	case <-s.closing.Done():
		for _, r := range retry {
			r.Answer(s.closedErr(lastErr))
		}
		return nil
	case <-t.C:
		return retry
	}
}

// committerKey marks the context handed to an fn, to catch an Update nested inside an fn: it
// could wait for a committer busy running that fn.
type committerKey struct{}

// call runs r.Fn on t and turns a panic into an error for r's caller alone.
func call(r *groupcommit.Request, t *tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("postgres store: panic in Update fn: %v\n%s", p, debug.Stack())
		}
	}()
	return r.Fn(context.WithValue(r.Ctx, committerKey{}, t.s), t)
}

// closedErr marks an error of an Update that Close interrupted with ErrClosed. The original error
// stays in the chain, so errors.Is still finds what fn returned.
func (s *Store) closedErr(err error) error {
	if err != nil && s.closing.Err() != nil && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}
