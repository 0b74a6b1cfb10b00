package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/groupcommit"
	"github.com/channels-dev/channels/taskplane/store/internal/wakecount"
)

// maxBatch bounds how many fns share one transaction, so one commit's latency (and the time the
// last fn of a batch waits for the first) stays bounded under load.
const maxBatch = 256

// writer is the single goroutine that runs every Update of a Store (group commit).
type writer struct {
	s     *Store
	db    *sql.DB
	stmts *stmtCache
	q     *groupcommit.Queue

	batches atomic.Int64 // committed or attempted transactions, for tests and metrics
	// pending counts the pending wakes in the transaction in progress (writer goroutine only).
	// The store is the only writer of its file and every write goes through the writer, so
	// between two statements of one transaction only its own writes change the count.
	pending wakecount.Pending
}

// writerKey marks the context handed to an fn, to catch an Update nested inside an fn: it would
// wait for the writer that is running it.
type writerKey struct{}

func (w *writer) start(s *Store, db *sql.DB) {
	w.s = s
	w.db = db
	w.stmts = newStmtCache(db)
	w.q = groupcommit.New(maxBatch, ErrClosed)
	w.q.Start(1, maxBatch, func(batch []*groupcommit.Request) []*groupcommit.Request {
		retry := w.runBatch(batch)
		w.stmts.warm(context.Background()) // no transaction holds the connection now
		return retry
	})
}

// stop makes the writer finish its current batch, fail what is still queued, and exit; it
// returns once the writer has exited.
func (w *writer) stop() {
	w.q.Close()
	w.stmts.close()
}

// Update runs fn in the writer's next transaction, inside its own savepoint, and returns once
// that transaction has committed (nil), or with fn's error (its writes rolled back, other fns of
// the batch unaffected), or with the commit's error. fn must not call Update: it would wait for
// itself. A panic in fn is returned as an error to this caller only.
//
// If ctx ends while fn is still queued, Update returns ctx.Err() and fn never runs. Once fn has
// started, Update waits for the outcome, because by then fn's writes may commit; fn observes the
// cancellation through its ctx and through Tx methods, which fail with ctx.Err().
func (s *Store) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if ctx.Value(writerKey{}) == s {
		return errors.New("sqlite store: Update called inside an Update fn (it would deadlock)")
	}
	return s.w.q.Submit(ctx, fn)
}

// runBatch runs the fns of batch in one transaction, each in its own savepoint, and commits once.
// It answers every request except those it returns: when a fn's failure (or a statement's)
// destroyed the whole transaction, that fn's caller gets the error and the other requests are
// returned to be run again in a fresh transaction, which the Update contract allows.
func (w *writer) runBatch(batch []*groupcommit.Request) (retry []*groupcommit.Request) {
	w.batches.Add(1)
	// The writer's statements run on a context that is never cancelled: cancelling a statement
	// interrupts it, and an interrupted write rolls back the whole shared transaction.
	bg := context.Background()
	fail := func(reqs []*groupcommit.Request, err error) {
		for _, r := range reqs {
			r.Answer(err)
		}
	}
	tx, err := w.db.BeginTx(bg, nil)
	if err != nil {
		fail(batch, fmt.Errorf("sqlite store: begin: %w", err))
		return nil
	}
	w.pending.Forget()
	ok := make([]*groupcommit.Request, 0, len(batch))
	// The savepoint statements go through the statement cache too (prepared once, not parsed
	// per fn); the rollback's two statements run from their text, on the rare failure path.
	q := cachedTx{tx: tx, c: w.stmts}
	for i, r := range batch {
		if _, err := q.ExecContext(bg, "SAVEPOINT fn"); err != nil {
			tx.Rollback()
			fail(append(ok, batch[i:]...), fmt.Errorf("sqlite store: savepoint: %w", err))
			return nil
		}
		fnErr := w.call(r, tx)
		var endErr error
		if fnErr != nil {
			w.pending.Forget() // fn's wakes are rolled back with it
			_, endErr = tx.ExecContext(bg, "ROLLBACK TO fn; RELEASE fn")
		} else {
			_, endErr = q.ExecContext(bg, "RELEASE fn")
		}
		if endErr != nil {
			// The savepoint is gone, so SQLite rolled back the whole transaction (as it does
			// after e.g. SQLITE_FULL or an interrupt): the fns that succeeded before r lost their
			// writes too.
			tx.Rollback()
			if fnErr == nil {
				fnErr = fmt.Errorf("sqlite store: transaction lost: %w", endErr)
			}
			r.Answer(fnErr)
			return append(ok, batch[i+1:]...)
		}
		if fnErr != nil {
			r.Answer(fnErr)
			continue
		}
		ok = append(ok, r)
	}
	if err := tx.Commit(); err != nil {
		fail(ok, fmt.Errorf("sqlite store: commit: %w", err))
		return nil
	}
	fail(ok, nil)
	return nil
}

// call runs r.Fn on tx and turns a panic into an error for r's caller alone.
func (w *writer) call(r *groupcommit.Request, tx *sql.Tx) (err error) {
	t := &txn{q: cachedTx{tx: tx, c: w.stmts}, pending: &w.pending}
	defer func() {
		// A Tx kept by fn must not write into the next fn's savepoint.
		t.finish()
		if p := recover(); p != nil {
			err = fmt.Errorf("sqlite store: panic in Update fn: %v\n%s", p, debug.Stack())
		}
	}()
	return r.Fn(context.WithValue(r.Ctx, writerKey{}, w.s), t)
}
