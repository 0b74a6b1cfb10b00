package postgres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/taskplane/store"
)

// The wake queue (store.WakeReader, store.WakeTx). Leases are plain columns updated under row
// locks, never advisory locks, so a Postgres-wire engine without advisory locks runs the same SQL
// (docs/operations.md, "Postgres for several processes"). Claimers in several processes skip each other's rows (FOR UPDATE SKIP LOCKED).

const wakeColumns = `principal, id, task_id, activation, state, attempts, detail, lease_owner, lease_until, due_at,
	created_at, updated_at`

func scanWake(row pgx.CollectableRow) (store.Wake, error) {
	var w store.Wake
	err := row.Scan(&w.Principal, &w.ID, &w.TaskID, &w.Activation, &w.State, &w.Attempts, &w.Detail, &w.LeaseOwner,
		&w.LeaseUntil, &w.DueAt, &w.CreatedAt, &w.UpdatedAt)
	w.LeaseUntil, w.DueAt, w.CreatedAt, w.UpdatedAt = utc(w.LeaseUntil), utc(w.DueAt), utc(w.CreatedAt), utc(w.UpdatedAt)
	return w, err
}

func (r reader) GetWake(ctx context.Context, principal, id string) (store.Wake, error) {
	return r.getWake(ctx, principal, id, "")
}

// getWake reads one wake; lock is appended to the query ("FOR UPDATE" or nothing).
func (r reader) getWake(ctx context.Context, principal, id, lock string) (store.Wake, error) {
	rows, _ := r.q.Query(ctx, `SELECT `+wakeColumns+` FROM wakes WHERE principal = $1 AND id = $2 `+lock, principal, id)
	w, err := pgx.CollectExactlyOneRow(rows, scanWake)
	if err != nil {
		return store.Wake{}, fmt.Errorf("get wake %s: %w", id, notFound(err))
	}
	return w, nil
}

// GetWake in a transaction locks the wake until it ends (see store.Tx): every such read comes
// before a write of the wake (renew, retire), which must not overwrite a change committed since
// the read, such as a turn's final update retiring it while a heartbeat renews it.
func (t *tx) GetWake(ctx context.Context, principal, id string) (store.Wake, error) {
	return t.getWake(ctx, principal, id, "FOR UPDATE")
}

func (r reader) ListTaskWakes(ctx context.Context, principal, taskID string) ([]store.Wake, error) {
	rows, _ := r.q.Query(ctx, `SELECT `+wakeColumns+` FROM wakes WHERE principal = $1 AND task_id = $2
		ORDER BY created_at, seq`, principal, taskID)
	out, err := pgx.CollectRows(rows, scanWake)
	if err != nil {
		return nil, fmt.Errorf("list wakes of task %s: %w", taskID, err)
	}
	return out, nil
}

// CountWakes reads the live states' counts from wake_counts, which triggers keep (migrations 0005
// and 0011), adding the change the transaction made and has not yet written there, and counts the
// other states in wakes.
func (r reader) CountWakes(ctx context.Context, state store.WakeState, upTo int) (int, error) {
	query := `SELECT count(*) FROM wakes WHERE state = $1`
	args := []any{string(state)}
	switch {
	case state == store.WakePending:
		query, args = `SELECT sum(pending) + `+ownChange("pending")+` FROM wake_counts`, nil
	case state == store.WakeActive:
		query, args = `SELECT sum(active) + `+ownChange("active")+` FROM wake_counts`, nil
	case upTo > 0:
		query = `SELECT count(*) FROM (SELECT 1 FROM wakes WHERE state = $1 LIMIT ` + strconv.Itoa(upTo) + `) w`
	}
	var n int
	if err := r.q.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s wakes: %w", state, err)
	}
	if upTo > 0 {
		n = min(n, upTo)
	}
	return n, nil
}

// ownChange is the change to the count of the live wake state (pending or active) that the
// transaction made and writes to wake_counts at its commit (migration 0011); 0 outside one.
func ownChange(state string) string {
	return `coalesce(nullif(current_setting('channels.wake_` + state + `', true), ''), '0')::bigint`
}

// CountWakes in a transaction reads the pending count once and follows the transaction's own
// changes from there (see pipe.wakes).
func (t *tx) CountWakes(ctx context.Context, state store.WakeState, upTo int) (int, error) {
	if state != store.WakePending {
		return t.reader.CountWakes(ctx, state, upTo)
	}
	// The sum is exact whatever the cap, so it is kept uncapped and capped here.
	n, err := t.p.wakes.Count(0, func(int) (int, error) { return t.reader.CountWakes(ctx, state, 0) })
	if upTo > 0 {
		n = min(n, upTo)
	}
	return n, err
}

func (r reader) ListStaleTasks(ctx context.Context, states []string, cutoff time.Time, limit int) ([]store.Task, error) {
	if len(states) == 0 {
		return nil, nil
	}
	// The index's own condition is repeated, so that the planner may use it.
	query := `SELECT ` + taskColumns + ` FROM tasks WHERE ` + store.LiveStatesSQL + ` AND state = ANY($1)
		AND status_time < $2 ORDER BY status_time, principal, id`
	if limit > 0 {
		query += ` LIMIT ` + strconv.Itoa(limit)
	}
	rows, _ := r.q.Query(ctx, query, states, cutoff)
	out, err := pgx.CollectRows(rows, scanTask)
	if err != nil {
		return nil, fmt.Errorf("list stale tasks: %w", err)
	}
	return out, nil
}

// wakeDue selects the rows of alias w a claimer may take at $1 (now): pending, due and not leased,
// or active with a lease that ran out.
const wakeDue = `((w.state = 'pending' AND w.due_at <= $1 AND w.lease_until <= $1)
	OR (w.state = 'active' AND w.lease_until <= $1))`

func (t *tx) ClaimWakes(ctx context.Context, c store.WakeClaim) ([]store.Wake, error) {
	args := []any{c.Now, c.Owner, c.LeaseUntil, max(c.Limit, 1)}
	principals := ""
	if len(c.Principals) > 0 {
		args = append(args, c.Principals)
		principals = ` AND w.principal = ANY($5)`
	}
	// heads keeps the oldest due wake of each task (one turn per task); a task with a live turn (an
	// active wake whose lease holds) has none. The locking select evaluates the due condition again
	// on the row version it locks, and skips rows other claimers hold. The last select returns the
	// claimed rows in the order they were claimed in (RETURNING has no order).
	query := `WITH heads AS (
			SELECT principal, id FROM (
				SELECT w.principal, w.id,
					row_number() OVER (PARTITION BY w.principal, w.task_id ORDER BY w.created_at, w.seq) AS rn
				FROM wakes w
				WHERE w.state IN ('pending', 'active') AND ` + wakeDue + principals + `
				AND NOT EXISTS (SELECT 1 FROM wakes a WHERE a.principal = w.principal AND a.task_id = w.task_id
					AND a.id <> w.id AND a.state IN ('pending', 'active') AND a.lease_until > $1)) r
			WHERE rn = 1
		), c AS (
			SELECT w.principal, w.id FROM wakes w JOIN heads h ON w.principal = h.principal AND w.id = h.id
			WHERE ` + wakeDue + `
			ORDER BY w.created_at, w.seq
			LIMIT $4
			FOR UPDATE OF w SKIP LOCKED
		), u AS (
			UPDATE wakes w SET lease_owner = $2, lease_until = $3
			FROM c WHERE w.principal = c.principal AND w.id = c.id
			RETURNING w.*)
		SELECT ` + wakeColumns + ` FROM u ORDER BY created_at, seq`
	t.p.wakes.Forget()
	rows, _ := t.q.Query(ctx, query, args...)
	out, err := pgx.CollectRows(rows, scanWake)
	if err != nil {
		return nil, fmt.Errorf("claim wakes: %w", err)
	}
	return out, nil
}

func (t *tx) SaveWake(ctx context.Context, w store.Wake) error {
	t.p.wakes.Forget()
	t.p.later("save wake "+w.ID, mustTouch(`UPDATE wakes SET state = $3, attempts = $4, detail = $5, activation = $6,
		lease_owner = $7, lease_until = $8, due_at = $9, updated_at = $10 WHERE principal = $1 AND id = $2 RETURNING 1`),
		notTouched, w.Principal, w.ID, string(w.State), w.Attempts, w.Detail, w.Activation, w.LeaseOwner, w.LeaseUntil,
		w.DueAt, w.UpdatedAt)
	return nil
}
