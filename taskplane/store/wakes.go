package store

import (
	"context"
	"time"
)

// The wake queue (invariant 7 of docs/architecture.md). The task plane owns the rules (FIFO after acceptance,
// one turn per task, bounded admission, re-offer cap); the store keeps the rows, hands out leases
// and skips rows other transactions hold. These interfaces are embedded in Reader and Tx.

// WakeClaim asks ClaimWakes for due wakes.
type WakeClaim struct {
	// Owner names the claimer; it is written to LeaseOwner.
	Owner string
	// Now is the claimer's clock. A wake is due when it is pending, its DueAt is not after Now and
	// it is not leased (LeaseUntil <= Now), or when it is active and its lease ran out (its holder
	// died or stalled).
	Now time.Time
	// LeaseUntil is the lease expiry written to claimed rows.
	LeaseUntil time.Time
	// Principals, when not empty, restricts the claim to wakes of these principals.
	Principals []string
	// Limit bounds the rows claimed (at least 1).
	Limit int
}

// WakeReader holds the wake-queue reads; Reader embeds it.
type WakeReader interface {
	// GetWake returns one wake of the principal.
	GetWake(ctx context.Context, principal, id string) (Wake, error)
	// ListTaskWakes returns every wake of a task, oldest first (CreatedAt, then insertion order).
	ListTaskWakes(ctx context.Context, principal, taskID string) ([]Wake, error)
	// CountWakes counts wakes in state, stopping at upTo (a bounded count: admission only needs
	// to know whether the queue is full). upTo <= 0 counts all.
	CountWakes(ctx context.Context, state WakeState, upTo int) (int, error)
	// ListStaleTasks returns tasks, of any principal, whose State is one of states and whose
	// StatusTime is before cutoff, oldest status first, at most limit (the timeout sweep). Only
	// unfinished tasks can be stale (LiveStates): a finished state among states matches nothing.
	ListStaleTasks(ctx context.Context, states []string, cutoff time.Time, limit int) ([]Task, error)
}

// WakeTx holds the wake-queue writes; Tx embeds it.
type WakeTx interface {
	// ClaimWakes leases due wakes (see WakeClaim.Now) to c.Owner until c.LeaseUntil and returns
	// them as they are after the claim (State unchanged), oldest first. It returns at most one wake
	// per task, and none of a task that has another pending or active wake whose lease has not run
	// out (one turn per task). On Postgres rows locked by other transactions are skipped (FOR UPDATE SKIP
	// LOCKED), so concurrent claimers in several processes never share a row.
	ClaimWakes(ctx context.Context, c WakeClaim) ([]Wake, error)
	// SaveWake stores w's State, Attempts, Detail, Activation, LeaseOwner, LeaseUntil, DueAt and
	// UpdatedAt; a missing wake is ErrNotFound.
	SaveWake(ctx context.Context, w Wake) error
}

// LiveStatesSQL is the condition, on a tasks row's state, of the index the timeout sweep reads
// (tasks_live_state_status_time): the states of an unfinished task. A query by that index repeats
// it word for word, so that the planner may use the partial index.
const LiveStatesSQL = `state IN ('submitted', 'working', 'input-required', 'auth-required')`
