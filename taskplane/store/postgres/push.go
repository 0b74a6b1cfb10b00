package postgres

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/taskplane/store"
)

// Push-notification configs (store.PushReader, store.PushTx). PutPushConfig locks the task row
// before it counts the task's configs, so concurrent puts in several processes take turns and
// never exceed the bound.

const pushColumns = `principal, task_id, id, url, token, auth_scheme, auth_credentials, registration, cursor_seq,
	snapshot, last_delivery, finished_registration, created_at, updated_at`

// pushColumnsOfC is what a select of push_configs c reads: Finished is worked out from the
// registration that finished (a config is finished only for the registration that was: a new
// one, put by any build, is live again).
const pushColumnsOfC = `c.principal, c.task_id, c.id, c.url, c.token, c.auth_scheme, c.auth_credentials, c.registration,
	c.cursor_seq, c.snapshot, c.last_delivery, c.finished_registration = c.registration, c.created_at, c.updated_at`

func scanPushConfig(row pgx.CollectableRow) (store.PushConfig, error) {
	var c store.PushConfig
	err := row.Scan(&c.Principal, &c.TaskID, &c.ID, &c.URL, &c.Token, &c.AuthScheme, &c.AuthCredentials,
		&c.Registration, &c.Cursor, &c.Snapshot, &c.LastDelivery, &c.Finished, &c.CreatedAt, &c.UpdatedAt)
	c.CreatedAt, c.UpdatedAt = utc(c.CreatedAt), utc(c.UpdatedAt)
	return c, err
}

// byteaArg binds an empty snapshot as NULL, so "no snapshot" has one representation.
func byteaArg(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// limitClause is " LIMIT n", or "" for no limit.
func limitClause(limit int) string {
	if limit <= 0 {
		return ""
	}
	return " LIMIT " + strconv.Itoa(limit)
}

func (r reader) GetPushConfig(ctx context.Context, principal, taskID, id string) (store.PushConfig, error) {
	rows, _ := r.q.Query(ctx, `SELECT `+pushColumnsOfC+` FROM push_configs c WHERE principal = $1 AND task_id = $2 AND id = $3`,
		principal, taskID, id)
	c, err := pgx.CollectExactlyOneRow(rows, scanPushConfig)
	if err != nil {
		return store.PushConfig{}, fmt.Errorf("get push config %s/%s: %w", taskID, id, notFound(err))
	}
	return c, nil
}

func (r reader) ListPushConfigs(ctx context.Context, principal, taskID, afterID string, limit int) ([]store.PushConfig, error) {
	rows, _ := r.q.Query(ctx, `SELECT `+pushColumnsOfC+` FROM push_configs c WHERE principal = $1 AND task_id = $2 AND id > $3
		ORDER BY id`+limitClause(limit), principal, taskID, afterID)
	out, err := pgx.CollectRows(rows, scanPushConfig)
	if err != nil {
		return nil, fmt.Errorf("list push configs of task %s: %w", taskID, err)
	}
	return out, nil
}

func (r reader) ListPushWork(ctx context.Context, limit int) ([]store.PushConfig, error) {
	rows, _ := r.q.Query(ctx, `SELECT `+pushColumnsOfC+` FROM push_configs c
		JOIN tasks t ON t.principal = c.principal AND t.id = c.task_id
		LEFT JOIN deliveries d ON d.principal = c.principal AND d.id = c.last_delivery
		WHERE c.finished_registration <> c.registration AND (c.snapshot IS NOT NULL OR c.cursor_seq < t.last_seq)
		AND (c.last_delivery = '' OR d.id IS NULL OR d.state IN ('delivered', 'failed', 'ambiguous'))
		ORDER BY c.updated_at, c.principal, c.task_id, c.id`+limitClause(limit))
	out, err := pgx.CollectRows(rows, scanPushConfig)
	if err != nil {
		return nil, fmt.Errorf("list push work: %w", err)
	}
	return out, nil
}

func (t *tx) PutPushConfig(ctx context.Context, c store.PushConfig, maxPerTask int) (bool, error) {
	var one int
	if err := t.q.QueryRow(ctx, `SELECT 1 FROM tasks WHERE principal = $1 AND id = $2 FOR UPDATE`,
		c.Principal, c.TaskID).Scan(&one); err != nil {
		return false, fmt.Errorf("put push config %s/%s: %w", c.TaskID, c.ID, notFound(err))
	}
	var n, exists int
	if err := t.q.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE id = $3) FROM push_configs
		WHERE principal = $1 AND task_id = $2`, c.Principal, c.TaskID, c.ID).Scan(&n, &exists); err != nil {
		return false, fmt.Errorf("put push config %s/%s: %w", c.TaskID, c.ID, err)
	}
	if exists == 0 && maxPerTask > 0 && n >= maxPerTask {
		return false, fmt.Errorf("put push config %s/%s: %w", c.TaskID, c.ID, store.ErrPushConfigLimit)
	}
	if _, err := t.q.Exec(ctx, `INSERT INTO push_configs (`+pushColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
		ON CONFLICT (principal, task_id, id) DO UPDATE SET url = excluded.url, token = excluded.token,
			auth_scheme = excluded.auth_scheme, auth_credentials = excluded.auth_credentials,
			registration = excluded.registration, cursor_seq = excluded.cursor_seq, snapshot = excluded.snapshot,
			last_delivery = excluded.last_delivery, finished_registration = excluded.finished_registration,
			created_at = excluded.created_at, updated_at = excluded.updated_at`,
		c.Principal, c.TaskID, c.ID, c.URL, c.Token, c.AuthScheme, c.AuthCredentials, c.Registration, c.Cursor,
		byteaArg(c.Snapshot), c.LastDelivery, store.FinishedRegistration(c), c.CreatedAt, c.UpdatedAt); err != nil {
		return false, fmt.Errorf("put push config %s/%s: %w", c.TaskID, c.ID, err)
	}
	return exists > 0, nil
}

func (t *tx) DeletePushConfig(ctx context.Context, principal, taskID, id string) (bool, error) {
	tag, err := t.q.Exec(ctx, `DELETE FROM push_configs WHERE principal = $1 AND task_id = $2 AND id = $3`,
		principal, taskID, id)
	if err != nil {
		return false, fmt.Errorf("delete push config %s/%s: %w", taskID, id, err)
	}
	return tag.RowsAffected() > 0, nil
}

func (t *tx) AdvancePushConfig(ctx context.Context, c store.PushConfig, expectCursor int64) (bool, error) {
	tag, err := t.q.Exec(ctx, `UPDATE push_configs SET cursor_seq = $1, snapshot = $2, last_delivery = $3,
		finished_registration = $4, updated_at = $5
		WHERE principal = $6 AND task_id = $7 AND id = $8 AND registration = $9 AND cursor_seq = $10`,
		c.Cursor, byteaArg(c.Snapshot), c.LastDelivery, store.FinishedRegistration(c), c.UpdatedAt, c.Principal,
		c.TaskID, c.ID, c.Registration, expectCursor)
	if err != nil {
		return false, fmt.Errorf("advance push config %s/%s: %w", c.TaskID, c.ID, err)
	}
	return tag.RowsAffected() > 0, nil
}

func (t *tx) PrunePushConfigs(ctx context.Context, limit int) (int, error) {
	tag, err := t.q.Exec(ctx, `DELETE FROM push_configs WHERE (principal, task_id, id) IN (
		SELECT c.principal, c.task_id, c.id FROM push_configs c
		WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.principal = c.principal AND t.id = c.task_id)`+
		limitClause(limit)+`)`)
	if err != nil {
		return 0, fmt.Errorf("prune push configs: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
