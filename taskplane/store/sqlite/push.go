package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/channels-dev/channels/taskplane/store"
)

// Push-notification configs (store.PushReader, store.PushTx). The single writer serializes every
// PutPushConfig, so counting a task's configs and inserting one cannot interleave with another put.

const pushCols = `principal, task_id, id, url, token, auth_scheme, auth_credentials, registration, cursor_seq,
	snapshot, last_delivery, finished_registration, created_at, updated_at`

// pushColsOf is what a select of push_configs c reads: pushCols qualified by the alias, with
// Finished worked out from the registration that finished (a config is finished only for the
// registration that was: a new one, put by any build, is live again).
const pushColsOf = `c.principal, c.task_id, c.id, c.url, c.token, c.auth_scheme, c.auth_credentials, c.registration,
	c.cursor_seq, c.snapshot, c.last_delivery, c.finished_registration = c.registration, c.created_at, c.updated_at`

func scanPushConfig(sc scanner) (store.PushConfig, error) {
	var c store.PushConfig
	var created, updated int64
	if err := sc.Scan(&c.Principal, &c.TaskID, &c.ID, &c.URL, &c.Token, &c.AuthScheme, &c.AuthCredentials,
		&c.Registration, &c.Cursor, &c.Snapshot, &c.LastDelivery, &c.Finished, &created, &updated); err != nil {
		return store.PushConfig{}, err
	}
	c.CreatedAt, c.UpdatedAt = fromMicros(created), fromMicros(updated)
	return c, nil
}

func collectPushConfigs(rows *sql.Rows, err error, op string) ([]store.PushConfig, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer rows.Close()
	var out []store.PushConfig
	for rows.Next() {
		c, err := scanPushConfig(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

// blobArg binds an empty snapshot as NULL, so "no snapshot" has one representation.
func blobArg(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

func getPushConfig(ctx context.Context, q querier, principal, taskID, id string) (store.PushConfig, error) {
	c, err := scanPushConfig(q.QueryRowContext(ctx, `SELECT `+pushColsOf+` FROM push_configs c
		WHERE principal = ? AND task_id = ? AND id = ?`, principal, taskID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.PushConfig{}, notFound("push config", taskID, id)
	}
	if err != nil {
		return store.PushConfig{}, fmt.Errorf("get push config %s/%s: %w", taskID, id, err)
	}
	return c, nil
}

func listPushConfigs(ctx context.Context, q querier, principal, taskID, afterID string, limit int) ([]store.PushConfig, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+pushColsOf+` FROM push_configs c
		WHERE principal = ? AND task_id = ? AND id > ? ORDER BY id LIMIT ?`, principal, taskID, afterID, limitArg(limit))
	return collectPushConfigs(rows, err, "list push configs of task "+taskID)
}

func listPushWork(ctx context.Context, q querier, limit int) ([]store.PushConfig, error) {
	rows, err := q.QueryContext(ctx, pushWorkSQL, limitArg(limit))
	return collectPushConfigs(rows, err, "list push work")
}

// pushWorkSQL selects up to ?1 configs with work, of those not Finished (by their partial index:
// the configs of finished tasks, most of them in time, are not read at all).
const pushWorkSQL = `SELECT ` + pushColsOf + ` FROM push_configs c INDEXED BY push_configs_live
		JOIN tasks t ON t.principal = c.principal AND t.id = c.task_id
		LEFT JOIN deliveries d ON d.principal = c.principal AND d.id = c.last_delivery
		WHERE c.finished_registration <> c.registration AND (c.snapshot IS NOT NULL OR c.cursor_seq < t.last_seq)
		AND (c.last_delivery = '' OR d.id IS NULL OR d.state IN ('delivered', 'failed', 'ambiguous'))
		ORDER BY c.updated_at, c.principal, c.task_id, c.id LIMIT ?`

func putPushConfig(ctx context.Context, q querier, c store.PushConfig, maxPerTask int) (bool, error) {
	if _, err := getTask(ctx, q, c.Principal, c.TaskID); err != nil {
		return false, fmt.Errorf("put push config %s/%s: %w", c.TaskID, c.ID, err)
	}
	var exists, n int
	if err := q.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(id = ?), 0) FROM push_configs
		WHERE principal = ? AND task_id = ?`, c.ID, c.Principal, c.TaskID).Scan(&n, &exists); err != nil {
		return false, fmt.Errorf("put push config %s/%s: %w", c.TaskID, c.ID, err)
	}
	if exists == 0 && maxPerTask > 0 && n >= maxPerTask {
		return false, fmt.Errorf("put push config %s/%s: %w", c.TaskID, c.ID, store.ErrPushConfigLimit)
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO push_configs (`+pushCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (principal, task_id, id) DO UPDATE SET url = excluded.url, token = excluded.token,
			auth_scheme = excluded.auth_scheme, auth_credentials = excluded.auth_credentials,
			registration = excluded.registration, cursor_seq = excluded.cursor_seq, snapshot = excluded.snapshot,
			last_delivery = excluded.last_delivery, finished_registration = excluded.finished_registration,
			created_at = excluded.created_at, updated_at = excluded.updated_at`,
		c.Principal, c.TaskID, c.ID, c.URL, c.Token, c.AuthScheme, c.AuthCredentials, c.Registration, c.Cursor,
		blobArg(c.Snapshot), c.LastDelivery, store.FinishedRegistration(c), micros(c.CreatedAt), micros(c.UpdatedAt)); err != nil {
		return false, fmt.Errorf("put push config %s/%s: %w", c.TaskID, c.ID, err)
	}
	return exists > 0, nil
}

func deletePushConfig(ctx context.Context, q querier, principal, taskID, id string) (bool, error) {
	res, err := q.ExecContext(ctx, `DELETE FROM push_configs WHERE principal = ? AND task_id = ? AND id = ?`,
		principal, taskID, id)
	if err != nil {
		return false, fmt.Errorf("delete push config %s/%s: %w", taskID, id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("delete push config %s/%s: %w", taskID, id, err)
	}
	return n > 0, nil
}

func advancePushConfig(ctx context.Context, q querier, c store.PushConfig, expectCursor int64) (bool, error) {
	res, err := q.ExecContext(ctx, `UPDATE push_configs SET cursor_seq = ?, snapshot = ?, last_delivery = ?,
		finished_registration = ?, updated_at = ? WHERE principal = ? AND task_id = ? AND id = ? AND registration = ?
		AND cursor_seq = ?`,
		c.Cursor, blobArg(c.Snapshot), c.LastDelivery, store.FinishedRegistration(c), micros(c.UpdatedAt), c.Principal,
		c.TaskID, c.ID, c.Registration, expectCursor)
	if err != nil {
		return false, fmt.Errorf("advance push config %s/%s: %w", c.TaskID, c.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("advance push config %s/%s: %w", c.TaskID, c.ID, err)
	}
	return n > 0, nil
}

func prunePushConfigs(ctx context.Context, q querier, limit int) (int, error) {
	res, err := q.ExecContext(ctx, `DELETE FROM push_configs WHERE (principal, task_id, id) IN (
		SELECT c.principal, c.task_id, c.id FROM push_configs c
		WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.principal = c.principal AND t.id = c.task_id)
		LIMIT ?)`, limitArg(limit))
	if err != nil {
		return 0, fmt.Errorf("prune push configs: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("prune push configs: %w", err)
	}
	return int(n), nil
}

func (r reader) GetPushConfig(ctx context.Context, principal, taskID, id string) (store.PushConfig, error) {
	return getPushConfig(ctx, r.db, principal, taskID, id)
}

func (r reader) ListPushConfigs(ctx context.Context, principal, taskID, afterID string, limit int) ([]store.PushConfig, error) {
	return listPushConfigs(ctx, r.db, principal, taskID, afterID, limit)
}

func (r reader) ListPushWork(ctx context.Context, limit int) ([]store.PushConfig, error) {
	return listPushWork(ctx, r.db, limit)
}

func (t *txn) GetPushConfig(ctx context.Context, principal, taskID, id string) (store.PushConfig, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (store.PushConfig, error) {
		return getPushConfig(ctx, q, principal, taskID, id)
	})
}

func (t *txn) ListPushConfigs(ctx context.Context, principal, taskID, afterID string, limit int) ([]store.PushConfig, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.PushConfig, error) {
		return listPushConfigs(ctx, q, principal, taskID, afterID, limit)
	})
}

func (t *txn) ListPushWork(ctx context.Context, limit int) ([]store.PushConfig, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.PushConfig, error) {
		return listPushWork(ctx, q, limit)
	})
}

func (t *txn) PutPushConfig(ctx context.Context, c store.PushConfig, maxPerTask int) (bool, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (bool, error) { return putPushConfig(ctx, q, c, maxPerTask) })
}

func (t *txn) DeletePushConfig(ctx context.Context, principal, taskID, id string) (bool, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (bool, error) {
		return deletePushConfig(ctx, q, principal, taskID, id)
	})
}

func (t *txn) AdvancePushConfig(ctx context.Context, c store.PushConfig, expectCursor int64) (bool, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (bool, error) {
		return advancePushConfig(ctx, q, c, expectCursor)
	})
}

func (t *txn) PrunePushConfigs(ctx context.Context, limit int) (int, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (int, error) { return prunePushConfigs(ctx, q, limit) })
}
