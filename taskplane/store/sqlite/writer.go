package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/channels-dev/channels/taskplane/store"
)

// maxBatch bounds how many fns share one transaction, so one commit's latency (and the time the
// last fn of a batch waits for the first) stays bounded under load.
const maxBatch = 256

// Request states. A request moves from queued to running (the writer took it) or to abandoned
// (its caller gave up first), never both: the compare-and-swap decides who owns it.
const (
	reqQueued int32 = iota
	reqRunning
	reqAbandoned
)

// request is one Update waiting for the writer.
type request struct {
	ctx   context.Context
	fn    func(ctx context.Context, tx store.Tx) error
	state atomic.Int32
	done  chan error // buffered: the writer never blocks on a caller that left
}

// writer is the single goroutine that runs every Update of a Store (group commit).
type writer struct {
	s       *Store
	db      *sql.DB
	stmts   *stmtCache
	queue   chan *request
	closing chan struct{}
	stopped chan struct{}
	stopMu  sync.Once

	batches atomic.Int64 // committed or attempted transactions, for tests and metrics
}

// writerKey marks the context handed to an fn, to catch an Update nested inside an fn: it would
// wait for the writer that is running it.
type writerKey struct{}

func (w *writer) start(s *Store, db *sql.DB) {
	w.s = s
	w.db = db
	w.stmts = newStmtCache(db)
	w.queue = make(chan *request, maxBatch)
	w.closing = make(chan struct{})
	w.stopped = make(chan struct{})
	go w.loop()
}

// stop makes the writer finish its current batch, fail what is still queued, and exit; it
// returns once the writer has exited.
func (w *writer) stop() {
	w.stopMu.Do(func() { close(w.closing) })
	<-w.stopped
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
	if err := ctx.Err(); err != nil {
		return err
	}
	w := &s.w
	r := &request{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case w.queue <- r:
	case <-w.closing:
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
	case <-w.stopped:
		// The writer has exited; a request it took was answered before it did.
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return ErrClosed
		}
		return <-r.done
	}
}

func (w *writer) loop() {
	defer close(w.stopped)
	defer w.stmts.close()
	batch := make([]*request, 0, maxBatch)
	for {
		// Closing wins over queued work: Close promises that pending Updates fail.
		select {
		case <-w.closing:
			w.drain()
			return
		default:
		}
		var first *request
		select {
		case <-w.closing:
			w.drain()
			return
		case first = <-w.queue:
		}
		batch = append(batch[:0], first)
	collect:
		for len(batch) < maxBatch {
			select {
			case r := <-w.queue:
				batch = append(batch, r)
			default:
				break collect
			}
		}
		live := batch[:0]
		for _, r := range batch {
			if r.state.CompareAndSwap(reqQueued, reqRunning) {
				live = append(live, r)
			}
		}
		for len(live) > 0 {
			live = w.runBatch(live)
		}
		w.stmts.warm(context.Background())
		clear(batch) // drop references to finished requests and their fns
	}
}

// drain fails every request still queued.
func (w *writer) drain() {
	for {
		select {
		case r := <-w.queue:
			if r.state.CompareAndSwap(reqQueued, reqRunning) {
				r.done <- ErrClosed
			}
		default:
			return
		}
	}
}

// runBatch runs the fns of batch in one transaction, each in its own savepoint, and commits once.
// It answers every request except those it returns: when a fn's failure (or a statement's)
// destroyed the whole transaction, that fn's caller gets the error and the other requests are
// returned to be run again in a fresh transaction, which the Update contract allows.
func (w *writer) runBatch(batch []*request) (retry []*request) {
	w.batches.Add(1)
	// The writer's statements run on a context that is never cancelled: cancelling a statement
	// interrupts it, and an interrupted write rolls back the whole shared transaction.
	bg := context.Background()
	fail := func(reqs []*request, err error) {
		for _, r := range reqs {
			r.done <- err
		}
	}
	tx, err := w.db.BeginTx(bg, nil)
	if err != nil {
		fail(batch, fmt.Errorf("sqlite store: begin: %w", err))
		return nil
	}
	ok := make([]*request, 0, len(batch))
	for i, r := range batch {
		if _, err := tx.ExecContext(bg, "SAVEPOINT fn"); err != nil {
			tx.Rollback()
			fail(append(ok, batch[i:]...), fmt.Errorf("sqlite store: savepoint: %w", err))
			return nil
		}
		fnErr := w.call(r, tx)
		var endErr error
		if fnErr != nil {
			_, endErr = tx.ExecContext(bg, "ROLLBACK TO fn; RELEASE fn")
		} else {
			_, endErr = tx.ExecContext(bg, "RELEASE fn")
		}
		if endErr != nil {
			// The savepoint is gone, so SQLite rolled back the whole transaction (as it does
			// after e.g. SQLITE_FULL or an interrupt): the fns that succeeded before r lost their
			// writes too.
			tx.Rollback()
			if fnErr == nil {
				fnErr = fmt.Errorf("sqlite store: transaction lost: %w", endErr)
			}
			r.done <- fnErr
			return append(ok, batch[i+1:]...)
		}
		if fnErr != nil {
			r.done <- fnErr
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

// call runs r.fn on tx and turns a panic into an error for r's caller alone.
func (w *writer) call(r *request, tx *sql.Tx) (err error) {
	t := &txn{q: cachedTx{tx: tx, c: w.stmts}}
	defer func() {
		// A Tx kept by fn must not write into the next fn's savepoint.
		t.finish()
		if p := recover(); p != nil {
			err = fmt.Errorf("sqlite store: panic in Update fn: %v\n%s", p, debug.Stack())
		}
	}()
	return r.fn(context.WithValue(r.ctx, writerKey{}, w.s), t)
}
