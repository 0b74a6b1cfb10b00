package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/internal/wakecount"
)

// querier is what both the read pool (*sql.DB) and the writer's transaction (*sql.Tx) offer.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// reader serves store.Reader from the read-only pool. Operations that issue more than one query
// run them in one read transaction, so they see one snapshot.
type reader struct {
	db cachedDB
}

func (r reader) snapshot(ctx context.Context, fn func(q querier) error) error {
	return r.db.snapshot(ctx, fn)
}

func (r reader) GetTask(ctx context.Context, principal, id string) (store.Task, error) {
	return getTask(ctx, r.db, principal, id)
}

func (r reader) ListTasks(ctx context.Context, principal string, f store.TaskFilter) (tasks []store.Task, total int, err error) {
	err = r.snapshot(ctx, func(q querier) error {
		tasks, total, err = listTasks(ctx, q, principal, f)
		return err
	})
	return tasks, total, err
}

func (r reader) TaskEvents(ctx context.Context, principal, taskID string, after int64, limit int) ([]store.TaskEvent, error) {
	return taskEvents(ctx, r.db, principal, taskID, after, limit) // one statement: one snapshot
}

func (r reader) GetClaim(ctx context.Context, principal, source, identity string) (store.Claim, error) {
	return getClaim(ctx, r.db, principal, source, identity)
}

func (r reader) GetContext(ctx context.Context, principal, contextID string) (store.Context, error) {
	return getContext(ctx, r.db, principal, contextID)
}

func (r reader) GetAnchor(ctx context.Context, principal, source, providerID string) (store.Anchor, error) {
	return getAnchor(ctx, r.db, principal, source, providerID)
}

func (r reader) GetCheckpoint(ctx context.Context, principal, source, instance string) (store.Checkpoint, error) {
	return getCheckpoint(ctx, r.db, principal, source, instance)
}

func (r reader) ListEvidence(ctx context.Context, f store.EvidenceFilter) ([]store.Evidence, error) {
	return listEvidence(ctx, r.db, f)
}

func (r reader) ListWakes(ctx context.Context, state store.WakeState, limit int) ([]store.Wake, error) {
	return listWakes(ctx, r.db, state, limit)
}

// errTxDone is returned by a Tx used after its fn returned.
var errTxDone = errors.New("sqlite store: Tx used after its Update fn returned")

// txn is the store.Tx handed to one fn. Its statements run on the writer's transaction with a
// context that is never cancelled (see writer.runBatch); the caller's ctx is checked before each
// operation instead, so a cancelled caller stops at the next operation without disturbing the
// other fns sharing the transaction.
type txn struct {
	q       querier
	pending *wakecount.Pending // the writer's count of pending wakes in the current transaction

	mu   sync.Mutex // held during each operation, so finish waits for one in flight
	done bool
}

var _ store.Tx = (*txn)(nil)

// finish makes every later use of t fail: the transaction belongs to the next fn from now on.
func (t *txn) finish() {
	t.mu.Lock()
	t.done = true
	t.mu.Unlock()
}

// do runs op on the transaction if t is still live and ctx not done.
func do[T any](ctx context.Context, t *txn, op func(ctx context.Context, q querier) (T, error)) (T, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var zero T
	if t.done {
		return zero, errTxDone
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	return op(context.WithoutCancel(ctx), t.q)
}

// do0 is do for operations with no result.
func do0(ctx context.Context, t *txn, op func(ctx context.Context, q querier) error) error {
	_, err := do(ctx, t, func(ctx context.Context, q querier) (struct{}, error) {
		return struct{}{}, op(ctx, q)
	})
	return err
}

func (t *txn) GetTask(ctx context.Context, principal, id string) (store.Task, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (store.Task, error) {
		return getTask(ctx, q, principal, id)
	})
}

func (t *txn) ListTasks(ctx context.Context, principal string, f store.TaskFilter) ([]store.Task, int, error) {
	type result struct {
		tasks []store.Task
		total int
	}
	r, err := do(ctx, t, func(ctx context.Context, q querier) (result, error) {
		tasks, total, err := listTasks(ctx, q, principal, f)
		return result{tasks, total}, err
	})
	return r.tasks, r.total, err
}

func (t *txn) TaskEvents(ctx context.Context, principal, taskID string, after int64, limit int) ([]store.TaskEvent, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.TaskEvent, error) {
		return taskEvents(ctx, q, principal, taskID, after, limit)
	})
}

func (t *txn) GetClaim(ctx context.Context, principal, source, identity string) (store.Claim, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (store.Claim, error) {
		return getClaim(ctx, q, principal, source, identity)
	})
}

func (t *txn) GetContext(ctx context.Context, principal, contextID string) (store.Context, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (store.Context, error) {
		return getContext(ctx, q, principal, contextID)
	})
}

func (t *txn) GetAnchor(ctx context.Context, principal, source, providerID string) (store.Anchor, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (store.Anchor, error) {
		return getAnchor(ctx, q, principal, source, providerID)
	})
}

func (t *txn) GetCheckpoint(ctx context.Context, principal, source, instance string) (store.Checkpoint, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (store.Checkpoint, error) {
		return getCheckpoint(ctx, q, principal, source, instance)
	})
}

func (t *txn) ListEvidence(ctx context.Context, f store.EvidenceFilter) ([]store.Evidence, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.Evidence, error) {
		return listEvidence(ctx, q, f)
	})
}

func (t *txn) ListWakes(ctx context.Context, state store.WakeState, limit int) ([]store.Wake, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.Wake, error) {
		return listWakes(ctx, q, state, limit)
	})
}

func (t *txn) InsertClaim(ctx context.Context, c store.Claim) (store.Claim, bool, error) {
	type result struct {
		c        store.Claim
		inserted bool
	}
	r, err := do(ctx, t, func(ctx context.Context, q querier) (result, error) {
		c, inserted, err := insertClaim(ctx, q, c)
		return result{c, inserted}, err
	})
	return r.c, r.inserted, err
}

func (t *txn) DeleteClaim(ctx context.Context, principal, source, identity, taskID string) (bool, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (bool, error) {
		return deleteClaim(ctx, q, principal, source, identity, taskID)
	})
}

func (t *txn) EnsureContext(ctx context.Context, principal, source, conversationKey, candidateID string, now time.Time) (string, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (string, error) {
		return ensureContext(ctx, q, principal, source, conversationKey, candidateID, now)
	})
}

func (t *txn) InsertContext(ctx context.Context, c store.Context) error {
	return do0(ctx, t, func(ctx context.Context, q querier) error { return insertContext(ctx, q, c) })
}

func (t *txn) TouchContext(ctx context.Context, principal, contextID string, at time.Time) error {
	return do0(ctx, t, func(ctx context.Context, q querier) error {
		return touchContext(ctx, q, principal, contextID, at)
	})
}

func (t *txn) InsertTask(ctx context.Context, task store.Task) error {
	return do0(ctx, t, func(ctx context.Context, q querier) error { return insertTask(ctx, q, task) })
}

func (t *txn) UpdateTask(ctx context.Context, task store.Task, expectVersion int64) error {
	return do0(ctx, t, func(ctx context.Context, q querier) error {
		return updateTask(ctx, q, task, expectVersion)
	})
}

func (t *txn) AppendTaskEvent(ctx context.Context, principal, taskID string, seq int64, kind string, payload []byte, at time.Time) error {
	return do0(ctx, t, func(ctx context.Context, q querier) error {
		return appendTaskEvent(ctx, q, principal, taskID, seq, kind, payload, at)
	})
}

func (t *txn) PutAnchor(ctx context.Context, a store.Anchor) error {
	return do0(ctx, t, func(ctx context.Context, q querier) error { return putAnchor(ctx, q, a) })
}

func (t *txn) InsertEvidence(ctx context.Context, e store.Evidence) error {
	return do0(ctx, t, func(ctx context.Context, q querier) error { return insertEvidence(ctx, q, e) })
}

func (t *txn) InsertWake(ctx context.Context, w store.Wake) error {
	return do0(ctx, t, func(ctx context.Context, q querier) error {
		if err := insertWake(ctx, q, w); err != nil {
			t.pending.Forget()
			return err
		}
		if w.State == store.WakePending {
			t.pending.Add()
		}
		return nil
	})
}

func (t *txn) UpdateWake(ctx context.Context, w store.Wake) error {
	return do0(ctx, t, func(ctx context.Context, q querier) error {
		t.pending.Forget()
		return updateWake(ctx, q, w)
	})
}

func (t *txn) AdvanceCheckpoint(ctx context.Context, c store.Checkpoint) (store.Checkpoint, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (store.Checkpoint, error) {
		return advanceCheckpoint(ctx, q, c)
	})
}

func (t *txn) Prune(ctx context.Context, cutoff time.Time, terminal []string, limit int) (store.PruneResult, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (store.PruneResult, error) {
		t.pending.Forget()
		return prune(ctx, q, cutoff, terminal, limit)
	})
}
