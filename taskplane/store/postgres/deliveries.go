package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/taskplane/store"
)

// Deliveries: rows, per-attempt evidence, leases and rate lanes (store.DeliveryReader,
// store.DeliveryTx). Leases and lanes are plain rows updated under row locks, never advisory locks,
// so a Postgres-wire engine without advisory locks runs the same SQL (docs/operations.md, "Postgres for several processes").

const deliveryColumns = `principal, id, task_id, source, operation, recovery, lane, payload_digest, payload, state,
	attempts, reconciles, next_attempt_at, lease_owner, lease_until, provider_id, last_error, created_at, updated_at`

// deliveryColumnsOf is deliveryColumns qualified by a table alias, for RETURNING after a join.
func deliveryColumnsOf(alias string) string {
	out := ""
	for i, c := range []string{"principal", "id", "task_id", "source", "operation", "recovery", "lane",
		"payload_digest", "payload", "state", "attempts", "reconciles", "next_attempt_at", "lease_owner",
		"lease_until", "provider_id", "last_error", "created_at", "updated_at"} {
		if i > 0 {
			out += ", "
		}
		out += alias + "." + c
	}
	return out
}

func scanDelivery(row pgx.CollectableRow) (store.Delivery, error) {
	var d store.Delivery
	err := row.Scan(&d.Principal, &d.ID, &d.TaskID, &d.Source, &d.Operation, &d.Recovery, &d.Lane,
		&d.PayloadDigest, &d.Payload, &d.State, &d.Attempts, &d.Reconciles, &d.NextAttemptAt, &d.LeaseOwner,
		&d.LeaseUntil, &d.ProviderID, &d.LastError, &d.CreatedAt, &d.UpdatedAt)
	d.NextAttemptAt, d.LeaseUntil = utc(d.NextAttemptAt), utc(d.LeaseUntil)
	d.CreatedAt, d.UpdatedAt = utc(d.CreatedAt), utc(d.UpdatedAt)
	return d, err
}

func (r reader) GetDelivery(ctx context.Context, principal, id string) (store.Delivery, error) {
	return r.getDelivery(ctx, principal, id, "")
}

// getDelivery reads one delivery; lock is appended to the query ("FOR UPDATE" or nothing).
func (r reader) getDelivery(ctx context.Context, principal, id, lock string) (store.Delivery, error) {
	rows, _ := r.q.Query(ctx, `SELECT `+deliveryColumns+` FROM deliveries WHERE principal = $1 AND id = $2 `+lock,
		principal, id)
	d, err := pgx.CollectExactlyOneRow(rows, scanDelivery)
	if err != nil {
		return store.Delivery{}, fmt.Errorf("get delivery %s: %w", id, notFound(err))
	}
	return d, nil
}

// GetDelivery in a transaction locks the delivery until it ends (see store.Tx): the engine reads
// a row to record a provider call's outcome on it, and a claim by another process (whose lease
// clock said ours had run out) must neither take the row between that read and the write nor be
// overwritten by it. A claim skips the locked row; one that committed first is what the read sees.
func (t *tx) GetDelivery(ctx context.Context, principal, id string) (store.Delivery, error) {
	return t.getDelivery(ctx, principal, id, "FOR UPDATE")
}

func (r reader) ListDeliveries(ctx context.Context, f store.DeliveryFilter) ([]store.Delivery, error) {
	var w where
	if f.Principal != "" {
		w.add("principal = ?", f.Principal)
	}
	if f.ID != "" {
		w.add("id = ?", f.ID)
	}
	if f.TaskID != "" {
		w.add("task_id = ?", f.TaskID)
	}
	if f.Source != "" {
		w.add("source = ?", f.Source)
	}
	if f.State != "" {
		w.add("state = ?", string(f.State))
	}
	if f.OmitAbandoned {
		// No abandoning resolution that is the delivery's latest attempt. A delivery's attempts
		// are written under its row lock, so their seqs follow their order.
		w.conds = append(w.conds, `NOT EXISTS (SELECT 1 FROM delivery_attempts a
			WHERE a.principal = deliveries.principal AND a.delivery_id = deliveries.id
			AND a.kind = '`+store.AttemptResolve+`' AND a.outcome = '`+store.OutcomeAbandoned+`'
			AND NOT EXISTS (SELECT 1 FROM delivery_attempts b
				WHERE b.principal = a.principal AND b.delivery_id = a.delivery_id AND b.seq > a.seq))`)
	}
	if !f.LeaseRanOutBefore.IsZero() {
		// The zero time ('0001-01-01') in lease_until is "not leased".
		w.add("lease_until > ?", time.Time{})
		w.add("lease_until < ?", f.LeaseRanOutBefore)
	}
	if !f.UnleasedIdleBefore.IsZero() {
		w.add("lease_until = ?", time.Time{})
		w.add("created_at < ?", f.UnleasedIdleBefore)
		w.add(`NOT EXISTS (SELECT 1 FROM delivery_attempts a WHERE a.principal = deliveries.principal
			AND a.delivery_id = deliveries.id AND a.created_at >= ?)`, f.UnleasedIdleBefore)
	}
	query := `SELECT ` + deliveryColumns + ` FROM deliveries WHERE ` + w.sql() + ` ORDER BY created_at DESC, id DESC`
	if f.Limit > 0 {
		query += ` LIMIT ` + strconv.Itoa(f.Limit)
	}
	rows, _ := r.q.Query(ctx, query, w.args...)
	out, err := pgx.CollectRows(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return out, nil
}

func (r reader) ListDeliveryAttempts(ctx context.Context, principal, deliveryID string) ([]store.DeliveryAttempt, error) {
	rows, _ := r.q.Query(ctx, `SELECT seq, principal, delivery_id, attempt, kind, outcome, error, provider_status,
		retry_after_ms, owner, created_at FROM delivery_attempts WHERE principal = $1 AND delivery_id = $2 ORDER BY seq`,
		principal, deliveryID)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.DeliveryAttempt, error) {
		var a store.DeliveryAttempt
		var ms int64
		err := row.Scan(&a.Seq, &a.Principal, &a.DeliveryID, &a.Attempt, &a.Kind, &a.Outcome, &a.Error,
			&a.ProviderStatus, &ms, &a.Owner, &a.CreatedAt)
		a.RetryAfter, a.CreatedAt = time.Duration(ms)*time.Millisecond, utc(a.CreatedAt)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("list delivery attempts of %s: %w", deliveryID, err)
	}
	return out, nil
}

func (r reader) NextDeliveryDue(ctx context.Context, sources []string) (time.Time, bool, error) {
	var due *time.Time
	where, args := sourceFilter("d.source", nil, sources)
	err := r.q.QueryRow(ctx, `SELECT min(GREATEST(d.next_attempt_at, d.lease_until, COALESCE(l.next_allowed, d.next_attempt_at)))
		FROM deliveries d LEFT JOIN delivery_lanes l ON d.lane <> '' AND l.principal = d.principal AND l.lane = d.lane
		WHERE d.state IN ('prepared', 'sending') AND `+laneHeadCondition+where, args...).Scan(&due)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next delivery due: %w", err)
	}
	if due == nil {
		return time.Time{}, false, nil
	}
	return utc(*due), true, nil
}

func (t *tx) InsertDelivery(ctx context.Context, d store.Delivery) (store.Delivery, bool, error) {
	for range maxLookups {
		// A concurrent uncommitted insert of the same key makes this wait for its transaction; the
		// read that follows is a new statement and sees the committed row.
		tag, err := t.q.Exec(ctx, `INSERT INTO deliveries (`+deliveryColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
			ON CONFLICT (principal, id) DO NOTHING`,
			d.Principal, d.ID, d.TaskID, d.Source, d.Operation, d.Recovery, d.Lane, d.PayloadDigest, d.Payload,
			string(d.State), d.Attempts, d.Reconciles, d.NextAttemptAt, d.LeaseOwner, d.LeaseUntil, d.ProviderID,
			d.LastError, d.CreatedAt, d.UpdatedAt)
		if err != nil {
			return store.Delivery{}, false, fmt.Errorf("insert delivery %s: %w", d.ID, err)
		}
		if tag.RowsAffected() == 1 {
			return d, true, nil
		}
		// Not locked: a concurrent Prepare of the same request only reads it, and a lock held
		// to the end of this transaction would make a claim skip the row meanwhile.
		existing, err := t.reader.GetDelivery(ctx, d.Principal, d.ID)
		if errors.Is(err, store.ErrNotFound) {
			continue // pruned between the two statements
		}
		if err != nil {
			return store.Delivery{}, false, fmt.Errorf("insert delivery %s: %w", d.ID, err)
		}
		return existing, false, nil
	}
	return store.Delivery{}, false, fmt.Errorf("insert delivery %s: conflicting row vanished %d times", d.ID, maxLookups)
}

func (t *tx) UpdateDelivery(ctx context.Context, d store.Delivery) error {
	tag, err := t.q.Exec(ctx, `UPDATE deliveries SET state = $3, attempts = $4, reconciles = $5, next_attempt_at = $6,
		lease_owner = $7, lease_until = $8, provider_id = $9, last_error = $10, updated_at = $11
		WHERE principal = $1 AND id = $2`,
		d.Principal, d.ID, string(d.State), d.Attempts, d.Reconciles, d.NextAttemptAt, d.LeaseOwner, d.LeaseUntil,
		d.ProviderID, d.LastError, d.UpdatedAt)
	if err != nil {
		return fmt.Errorf("update delivery %s: %w", d.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("update delivery %s: %w", d.ID, store.ErrNotFound)
	}
	return nil
}

// laneHeadCondition holds d, a row of a lane, back while an older row of its lane is pending.
const laneHeadCondition = `(d.lane = '' OR NOT EXISTS (SELECT 1 FROM deliveries o WHERE o.principal = d.principal
	AND o.lane = d.lane AND o.state IN ('prepared', 'sending')
	AND (o.created_at, o.id) < (d.created_at, d.id)))`

// dueCondition selects rows a claimer may take at $1 (now): pending, due, and not leased.
const dueCondition = `state IN ('prepared', 'sending') AND next_attempt_at <= $1 AND lease_until <= $1`

func (t *tx) ClaimDeliveries(ctx context.Context, c store.DeliveryClaim) ([]store.Delivery, error) {
	args := []any{c.Now, c.Owner, c.LeaseUntil}
	sources, args := sourceFilter("source", args, c.Sources)
	var query string
	if c.ID != "" {
		args = append(args, c.Principal, c.ID)
		n := len(args)
		query = `WITH c AS (
			SELECT principal, id FROM deliveries d
			WHERE principal = $` + strconv.Itoa(n-1) + ` AND id = $` + strconv.Itoa(n) + ` AND ` + dueCondition + sources + `
			AND ` + laneHeadCondition + `
			FOR UPDATE SKIP LOCKED)
		UPDATE deliveries d SET lease_owner = $2, lease_until = $3
		FROM c WHERE d.principal = c.principal AND d.id = c.id
		RETURNING ` + deliveryColumnsOf("d")
	} else {
		args = append(args, max(c.Limit, 1))
		// heads keeps the head of each lane, its oldest pending row: a lane sends its rows one at
		// a time, oldest first, so a later row never overtakes one waiting out a Retry-After, and
		// claiming more of a lane would only hand rows back. Rows another transaction holds are
		// skipped; the outer conditions are evaluated again on the locked row version.
		query = `WITH pending AS (
			SELECT principal, id, lane, created_at FROM deliveries d
			WHERE state IN ('prepared', 'sending')` + sources + `
			AND (lane = '' OR NOT EXISTS (SELECT 1 FROM delivery_lanes l
				WHERE l.principal = d.principal AND l.lane = d.lane AND l.next_allowed > $1))
		), heads AS (
			SELECT principal, id FROM (
				SELECT principal, id, lane,
					row_number() OVER (PARTITION BY principal, lane ORDER BY created_at, id) AS rn
				FROM pending) r
			WHERE lane = '' OR rn = 1
		), c AS (
			SELECT d.principal, d.id FROM deliveries d JOIN heads h ON d.principal = h.principal AND d.id = h.id
			WHERE ` + dueCondition + `
			ORDER BY d.next_attempt_at, d.created_at, d.id
			LIMIT $` + strconv.Itoa(len(args)) + `
			FOR UPDATE OF d SKIP LOCKED)
		UPDATE deliveries d SET lease_owner = $2, lease_until = $3
		FROM c WHERE d.principal = c.principal AND d.id = c.id
		RETURNING ` + deliveryColumnsOf("d")
	}
	rows, _ := t.q.Query(ctx, query, args...)
	out, err := pgx.CollectRows(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	sortDue(out)
	return out, nil
}

// sortDue orders claimed rows as the claim did (RETURNING has no order).
func sortDue(ds []store.Delivery) {
	slices.SortFunc(ds, func(a, b store.Delivery) int {
		return cmp.Or(a.NextAttemptAt.Compare(b.NextAttemptAt), a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
}

func (t *tx) InsertDeliveryAttempt(ctx context.Context, a store.DeliveryAttempt) error {
	_, err := t.q.Exec(ctx, `INSERT INTO delivery_attempts (principal, delivery_id, attempt, kind, outcome, error,
		provider_status, retry_after_ms, owner, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		a.Principal, a.DeliveryID, a.Attempt, a.Kind, a.Outcome, a.Error, a.ProviderStatus,
		a.RetryAfter.Milliseconds(), a.Owner, a.CreatedAt)
	if err != nil {
		return fmt.Errorf("insert delivery attempt of %s: %w", a.DeliveryID, err)
	}
	return nil
}

func (t *tx) ReserveLane(ctx context.Context, principal, lane string, now, next time.Time) (bool, time.Time, error) {
	// The upsert locks the lane row whether or not its WHERE holds; a concurrent reserver waits
	// for this transaction and then sees the new next_allowed.
	var got time.Time
	err := t.q.QueryRow(ctx, `INSERT INTO delivery_lanes (principal, lane, next_allowed, updated_at) VALUES ($1, $2, $4, $3)
		ON CONFLICT (principal, lane) DO UPDATE SET next_allowed = EXCLUDED.next_allowed, updated_at = EXCLUDED.updated_at
		WHERE delivery_lanes.next_allowed <= $3
		RETURNING next_allowed`, principal, lane, now, next).Scan(&got)
	if err == nil {
		return true, utc(got), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return false, time.Time{}, fmt.Errorf("reserve lane %s: %w", lane, err)
	}
	if err := t.q.QueryRow(ctx, `SELECT next_allowed FROM delivery_lanes WHERE principal = $1 AND lane = $2`,
		principal, lane).Scan(&got); err != nil {
		return false, time.Time{}, fmt.Errorf("reserve lane %s: %w", lane, err)
	}
	return false, utc(got), nil
}

func (t *tx) DelayLane(ctx context.Context, principal, lane string, until time.Time) error {
	_, err := t.q.Exec(ctx, `INSERT INTO delivery_lanes (principal, lane, next_allowed, updated_at) VALUES ($1, $2, $3, $3)
		ON CONFLICT (principal, lane) DO UPDATE
		SET next_allowed = GREATEST(delivery_lanes.next_allowed, EXCLUDED.next_allowed), updated_at = EXCLUDED.updated_at`,
		principal, lane, until)
	if err != nil {
		return fmt.Errorf("delay lane %s: %w", lane, err)
	}
	return nil
}

func (t *tx) PruneDeliveries(ctx context.Context, cutoff time.Time, terminal []string, limit int) (int, error) {
	var lim *int // NULL: no limit
	if limit > 0 {
		lim = &limit
	}
	// The outer conditions repeat the inner ones: a row changed while the delete waited for its lock
	// (an operator's retry made it prepared again) is read again and kept. Its attempts go in a
	// statement of their own, whose snapshot sees every attempt committed before the rows were
	// locked (in one statement, one recorded in between was left behind for good).
	// A settled delivery of a task still going on (stored, not in a terminal state) stays: it is
	// what finds the same delivery asked for again (a long wait for an answer) instead of sending
	// it a second time. Those of finished tasks go: such a task asks for nothing more.
	rows, _ := t.q.Query(ctx, `DELETE FROM deliveries WHERE (principal, id) IN (
			SELECT principal, id FROM deliveries d WHERE state IN ('delivered', 'failed') AND updated_at < $1
			AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.principal = d.principal AND t.id = d.task_id
				AND t.state <> ALL(coalesce($3::text[], '{}')))
			ORDER BY updated_at LIMIT $2)
		AND state IN ('delivered', 'failed') AND updated_at < $1
		RETURNING principal, id`, cutoff, lim, terminal)
	ps, ids, err := collectKeys(rows)
	if err != nil {
		return 0, fmt.Errorf("prune deliveries: %w", err)
	}
	if len(ids) > 0 {
		if _, err := t.q.Exec(ctx, `DELETE FROM delivery_attempts a
			USING (SELECT unnest($1::text[]) AS principal, unnest($2::text[]) AS id) gone
			WHERE a.principal = gone.principal AND a.delivery_id = gone.id`, ps, ids); err != nil {
			return 0, fmt.Errorf("prune delivery attempts: %w", err)
		}
	}
	n := len(ids)
	if _, err := t.q.Exec(ctx, `DELETE FROM delivery_lanes WHERE next_allowed < $1`, cutoff); err != nil {
		return 0, fmt.Errorf("prune delivery lanes: %w", err)
	}
	return n, nil
}

// sourceFilter returns " AND col = ANY($n)" for sources, $n following args, and args with the
// sources appended; no sources, no filter.
func sourceFilter(col string, args []any, sources []string) (string, []any) {
	if len(sources) == 0 {
		return "", args
	}
	args = append(args, sources)
	return ` AND ` + col + ` = ANY($` + strconv.Itoa(len(args)) + `)`, args
}
