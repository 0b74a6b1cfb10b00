package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// The wake queue (store.WakeReader, store.WakeTx). One process owns a SQLite store and its single
// writer runs every claim, so a lease here holds off this process's own goroutines and survives a
// crash; it never has to skip rows another writer holds.

const wakeCols = `id, principal, task_id, activation, state, attempts, detail, lease_owner, lease_until, due_at,
	created_at, updated_at`

func scanWake(sc scanner) (store.Wake, error) {
	var w store.Wake
	var st string
	var lease, due, created, updated int64
	if err := sc.Scan(&w.ID, &w.Principal, &w.TaskID, &w.Activation, &st, &w.Attempts, &w.Detail, &w.LeaseOwner,
		&lease, &due, &created, &updated); err != nil {
		return store.Wake{}, err
	}
	w.State = store.WakeState(st)
	w.LeaseUntil, w.DueAt = fromMicros(lease), fromMicros(due)
	w.CreatedAt, w.UpdatedAt = fromMicros(created), fromMicros(updated)
	return w, nil
}

func collectWakes(rows *sql.Rows, err error, op string) ([]store.Wake, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer rows.Close()
	var out []store.Wake
	for rows.Next() {
		w, err := scanWake(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

func getWake(ctx context.Context, q querier, principal, id string) (store.Wake, error) {
	w, err := scanWake(q.QueryRowContext(ctx, `SELECT `+wakeCols+` FROM wakes WHERE principal = ? AND id = ?`, principal, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Wake{}, notFound("wake", id)
	}
	if err != nil {
		return store.Wake{}, fmt.Errorf("get wake %s: %w", id, err)
	}
	return w, nil
}

func listTaskWakes(ctx context.Context, q querier, principal, taskID string) ([]store.Wake, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+wakeCols+` FROM wakes WHERE principal = ? AND task_id = ?
		ORDER BY created_at, seq`, principal, taskID)
	return collectWakes(rows, err, "list wakes of task "+taskID)
}

func countWakes(ctx context.Context, q querier, state store.WakeState, upTo int) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM wakes WHERE state = ? LIMIT ?)`,
		string(state), limitArg(upTo)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count %s wakes: %w", state, err)
	}
	return n, nil
}

// staleTasksSQL selects the tasks of n states (?1..?n) whose status is older than ?(n+1), oldest
// first, at most ?(n+2): by (state, status_time) of the unfinished tasks, which reads only the old
// ones. The index's own condition is repeated, so that SQLite may use it.
func staleTasksSQL(n int) string {
	return `SELECT ` + taskCols + ` FROM tasks INDEXED BY tasks_live_state_status_time
		WHERE ` + store.LiveStatesSQL + ` AND state IN (` + placeholders(n) + `)
		AND status_time < ? ORDER BY status_time, principal, id LIMIT ?`
}

func listStaleTasks(ctx context.Context, q querier, states []string, cutoff time.Time, limit int) ([]store.Task, error) {
	if len(states) == 0 {
		return nil, nil
	}
	args := make([]any, 0, len(states)+2)
	for _, s := range states {
		args = append(args, s)
	}
	args = append(args, micros(cutoff), limitArg(limit))
	rows, err := q.QueryContext(ctx, staleTasksSQL(len(states)), args...)
	if err != nil {
		return nil, fmt.Errorf("list stale tasks: %w", err)
	}
	defer rows.Close()
	var out []store.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, fmt.Errorf("list stale tasks: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list stale tasks: %w", err)
	}
	return out, nil
}

// wakeDue selects the rows a claimer may take at ?1 (now): pending, due and not leased, or active
// with a lease that ran out.
const wakeDue = `((w.state = 'pending' AND w.due_at <= ?1 AND w.lease_until <= ?1)
	OR (w.state = 'active' AND w.lease_until <= ?1))`

func claimWakes(ctx context.Context, q querier, c store.WakeClaim) ([]store.Wake, error) {
	args := []any{micros(c.Now), max(c.Limit, 1)}
	principals := ""
	if len(c.Principals) > 0 {
		principals = " AND w.principal IN ("
		for i, p := range c.Principals {
			if i > 0 {
				principals += ", "
			}
			args = append(args, p)
			principals += fmt.Sprintf("?%d", len(args))
		}
		principals += ")"
	}
	// heads keeps the oldest due wake of each task: one turn per task. A task with a live turn (an
	// active wake whose lease holds) has no due wake at all.
	rows, err := q.QueryContext(ctx, `WITH heads AS (
			SELECT w.seq, row_number() OVER (PARTITION BY w.principal, w.task_id ORDER BY w.created_at, w.seq) AS rn
			FROM wakes w
			WHERE w.state IN ('pending', 'active') AND `+wakeDue+principals+`
			AND NOT EXISTS (SELECT 1 FROM wakes a WHERE a.principal = w.principal AND a.task_id = w.task_id
				AND a.seq <> w.seq AND a.state IN ('pending', 'active') AND a.lease_until > ?1))
		SELECT `+wakeCols+` FROM wakes WHERE seq IN (SELECT seq FROM heads WHERE rn = 1)
		ORDER BY created_at, seq LIMIT ?2`, args...)
	ws, err := collectWakes(rows, err, "claim wakes")
	if err != nil {
		return nil, err
	}
	for i := range ws {
		ws[i].LeaseOwner, ws[i].LeaseUntil = c.Owner, c.LeaseUntil
		if _, err := q.ExecContext(ctx, `UPDATE wakes SET lease_owner = ?, lease_until = ? WHERE principal = ? AND id = ?`,
			c.Owner, micros(c.LeaseUntil), ws[i].Principal, ws[i].ID); err != nil {
			return nil, fmt.Errorf("claim wake %s: %w", ws[i].ID, err)
		}
	}
	return ws, nil
}

func saveWake(ctx context.Context, q querier, w store.Wake) error {
	res, err := q.ExecContext(ctx, `UPDATE wakes SET state = ?, attempts = ?, detail = ?, activation = ?, lease_owner = ?,
		lease_until = ?, due_at = ?, updated_at = ? WHERE principal = ? AND id = ?`,
		string(w.State), w.Attempts, w.Detail, w.Activation, w.LeaseOwner, micros(w.LeaseUntil), micros(w.DueAt),
		micros(w.UpdatedAt), w.Principal, w.ID)
	return affectedOne(res, err, "save wake", "wake", w.ID)
}

func (r reader) GetWake(ctx context.Context, principal, id string) (store.Wake, error) {
	return getWake(ctx, r.db, principal, id)
}

func (r reader) ListTaskWakes(ctx context.Context, principal, taskID string) ([]store.Wake, error) {
	return listTaskWakes(ctx, r.db, principal, taskID)
}

func (r reader) CountWakes(ctx context.Context, state store.WakeState, upTo int) (int, error) {
	return countWakes(ctx, r.db, state, upTo)
}

func (r reader) ListStaleTasks(ctx context.Context, states []string, cutoff time.Time, limit int) ([]store.Task, error) {
	return listStaleTasks(ctx, r.db, states, cutoff, limit)
}

func (t *txn) GetWake(ctx context.Context, principal, id string) (store.Wake, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (store.Wake, error) { return getWake(ctx, q, principal, id) })
}

func (t *txn) ListTaskWakes(ctx context.Context, principal, taskID string) ([]store.Wake, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.Wake, error) {
		return listTaskWakes(ctx, q, principal, taskID)
	})
}

func (t *txn) CountWakes(ctx context.Context, state store.WakeState, upTo int) (int, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (int, error) {
		if state != store.WakePending {
			return countWakes(ctx, q, state, upTo)
		}
		return t.pending.Count(upTo, func(upTo int) (int, error) { return countWakes(ctx, q, state, upTo) })
	})
}

func (t *txn) ListStaleTasks(ctx context.Context, states []string, cutoff time.Time, limit int) ([]store.Task, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.Task, error) {
		return listStaleTasks(ctx, q, states, cutoff, limit)
	})
}

func (t *txn) ClaimWakes(ctx context.Context, c store.WakeClaim) ([]store.Wake, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.Wake, error) {
		t.pending.Forget()
		return claimWakes(ctx, q, c)
	})
}

func (t *txn) SaveWake(ctx context.Context, w store.Wake) error {
	return do0(ctx, t, func(ctx context.Context, q querier) error {
		t.pending.Forget()
		return saveWake(ctx, q, w)
	})
}
