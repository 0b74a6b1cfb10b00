package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// Deliveries: rows, per-attempt evidence, leases and rate lanes (store.DeliveryReader,
// store.DeliveryTx). One process owns a SQLite store and its single writer runs every claim, so a
// lease here only has to hold off this process's own goroutines and outlive a crash; the delivery
// package adds an in-process lock per delivery ID.

const deliveryCols = `principal, id, task_id, source, operation, recovery, lane, payload_digest, payload, state,
	attempts, reconciles, next_attempt_at, lease_owner, lease_until, provider_id, last_error, created_at, updated_at`

func scanDelivery(sc scanner) (store.Delivery, error) {
	var d store.Delivery
	var next, lease, created, updated int64
	err := sc.Scan(&d.Principal, &d.ID, &d.TaskID, &d.Source, &d.Operation, &d.Recovery, &d.Lane, &d.PayloadDigest,
		&d.Payload, &d.State, &d.Attempts, &d.Reconciles, &next, &d.LeaseOwner, &lease, &d.ProviderID, &d.LastError,
		&created, &updated)
	if err != nil {
		return store.Delivery{}, err
	}
	d.NextAttemptAt, d.LeaseUntil = fromMicros(next), fromMicros(lease)
	d.CreatedAt, d.UpdatedAt = fromMicros(created), fromMicros(updated)
	return d, nil
}

func collectDeliveries(rows *sql.Rows, err error, op string) ([]store.Delivery, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer rows.Close()
	var out []store.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

func getDelivery(ctx context.Context, q querier, principal, id string) (store.Delivery, error) {
	d, err := scanDelivery(q.QueryRowContext(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE principal = ? AND id = ?`,
		principal, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Delivery{}, notFound("delivery", id)
	}
	if err != nil {
		return store.Delivery{}, fmt.Errorf("get delivery %s: %w", id, err)
	}
	return d, nil
}

func listDeliveries(ctx context.Context, q querier, f store.DeliveryFilter) ([]store.Delivery, error) {
	var w filter
	w.eq("principal", f.Principal)
	w.eq("id", f.ID)
	w.eq("task_id", f.TaskID)
	w.eq("source", f.Source)
	w.eq("state", string(f.State))
	if f.OmitAbandoned {
		w.conds = append(w.conds, omitAbandoned)
	}
	if !f.LeaseRanOutBefore.IsZero() {
		// The zero time in lease_until is "not leased".
		w.add("lease_until > ?", micros(time.Time{}))
		w.add("lease_until < ?", micros(f.LeaseRanOutBefore))
	}
	if !f.UnleasedIdleBefore.IsZero() {
		w.add("lease_until = ?", micros(time.Time{}))
		w.add("created_at < ?", micros(f.UnleasedIdleBefore))
		w.add(`NOT EXISTS (SELECT 1 FROM delivery_attempts a WHERE a.principal = deliveries.principal
			AND a.delivery_id = deliveries.id AND a.created_at >= ?)`, micros(f.UnleasedIdleBefore))
	}
	args := append(w.args, limitArg(f.Limit))
	rows, err := q.QueryContext(ctx, `SELECT `+deliveryCols+` FROM deliveries`+w.where()+
		` ORDER BY created_at DESC, id DESC LIMIT ?`, args...)
	return collectDeliveries(rows, err, "list deliveries")
}

// omitAbandoned is the condition of store.DeliveryFilter.OmitAbandoned: no abandoning
// resolution that is the delivery's latest attempt.
const omitAbandoned = `NOT EXISTS (SELECT 1 FROM delivery_attempts a
	WHERE a.principal = deliveries.principal AND a.delivery_id = deliveries.id
	AND a.kind = '` + store.AttemptResolve + `' AND a.outcome = '` + store.OutcomeAbandoned + `'
	AND NOT EXISTS (SELECT 1 FROM delivery_attempts b
		WHERE b.principal = a.principal AND b.delivery_id = a.delivery_id AND b.seq > a.seq))`

func listDeliveryAttempts(ctx context.Context, q querier, principal, deliveryID string) ([]store.DeliveryAttempt, error) {
	rows, err := q.QueryContext(ctx, `SELECT seq, principal, delivery_id, attempt, kind, outcome, error, provider_status,
		retry_after_ms, owner, created_at FROM delivery_attempts WHERE principal = ? AND delivery_id = ? ORDER BY seq`,
		principal, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("list delivery attempts of %s: %w", deliveryID, err)
	}
	defer rows.Close()
	var out []store.DeliveryAttempt
	for rows.Next() {
		var a store.DeliveryAttempt
		var ms, created int64
		if err := rows.Scan(&a.Seq, &a.Principal, &a.DeliveryID, &a.Attempt, &a.Kind, &a.Outcome, &a.Error,
			&a.ProviderStatus, &ms, &a.Owner, &created); err != nil {
			return nil, fmt.Errorf("list delivery attempts of %s: %w", deliveryID, err)
		}
		a.RetryAfter, a.CreatedAt = time.Duration(ms)*time.Millisecond, fromMicros(created)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list delivery attempts of %s: %w", deliveryID, err)
	}
	return out, nil
}

func nextDeliveryDue(ctx context.Context, q querier, sources []string) (time.Time, bool, error) {
	var due sql.NullInt64
	where, args := sourceFilter("d.source", nil, sources)
	err := q.QueryRowContext(ctx, `SELECT MIN(MAX(d.next_attempt_at, d.lease_until, COALESCE(l.next_allowed, d.next_attempt_at)))
		FROM deliveries d LEFT JOIN delivery_lanes l ON d.lane != '' AND l.principal = d.principal AND l.lane = d.lane
		WHERE d.state IN ('prepared', 'sending') AND `+laneHeadCond+where, args...).Scan(&due)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next delivery due: %w", err)
	}
	if !due.Valid {
		return time.Time{}, false, nil
	}
	return fromMicros(due.Int64), true, nil
}

func insertDelivery(ctx context.Context, q querier, d store.Delivery) (store.Delivery, bool, error) {
	res, err := q.ExecContext(ctx, `INSERT INTO deliveries (`+deliveryCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (principal, id) DO NOTHING`,
		d.Principal, d.ID, d.TaskID, d.Source, d.Operation, d.Recovery, d.Lane, d.PayloadDigest, d.Payload,
		string(d.State), d.Attempts, d.Reconciles, micros(d.NextAttemptAt), d.LeaseOwner, micros(d.LeaseUntil),
		d.ProviderID, d.LastError, micros(d.CreatedAt), micros(d.UpdatedAt))
	if err != nil {
		return store.Delivery{}, false, fmt.Errorf("insert delivery %s: %w", d.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return store.Delivery{}, false, fmt.Errorf("insert delivery %s: %w", d.ID, err)
	}
	if n == 1 {
		return d, true, nil
	}
	existing, err := getDelivery(ctx, q, d.Principal, d.ID)
	if err != nil {
		return store.Delivery{}, false, err
	}
	return existing, false, nil
}

func updateDelivery(ctx context.Context, q querier, d store.Delivery) error {
	res, err := q.ExecContext(ctx, `UPDATE deliveries SET state = ?, attempts = ?, reconciles = ?, next_attempt_at = ?,
		lease_owner = ?, lease_until = ?, provider_id = ?, last_error = ?, updated_at = ?
		WHERE principal = ? AND id = ?`,
		string(d.State), d.Attempts, d.Reconciles, micros(d.NextAttemptAt), d.LeaseOwner, micros(d.LeaseUntil),
		d.ProviderID, d.LastError, micros(d.UpdatedAt), d.Principal, d.ID)
	return affectedOne(res, err, "update delivery", "delivery", d.ID)
}

// sourceFilter returns " AND col IN (…)" for sources, with numbered parameters following args,
// and args with the sources appended; no sources, no filter.
func sourceFilter(col string, args []any, sources []string) (string, []any) {
	if len(sources) == 0 {
		return "", args
	}
	in := make([]string, len(sources))
	for i, s := range sources {
		args = append(args, s)
		in[i] = fmt.Sprintf("?%d", len(args))
	}
	return ` AND ` + col + ` IN (` + strings.Join(in, ", ") + `)`, args
}

// laneHeadCond holds d, a row of a lane, back while an older row of its lane is pending.
const laneHeadCond = `(d.lane = '' OR NOT EXISTS (SELECT 1 FROM deliveries o WHERE o.principal = d.principal
	AND o.lane = d.lane AND o.state IN ('prepared', 'sending')
	AND (o.created_at < d.created_at OR (o.created_at = d.created_at AND o.id < d.id))))`

// dueCond selects rows a claimer may take at the first argument (now): pending, due, not leased.
const dueCond = `state IN ('prepared', 'sending') AND next_attempt_at <= ?1 AND lease_until <= ?1`

func claimDeliveries(ctx context.Context, q querier, c store.DeliveryClaim) ([]store.Delivery, error) {
	// Numbered parameters: ?1 now, ?2 owner, ?3 lease until, then the rest in order.
	args := []any{micros(c.Now), c.Owner, micros(c.LeaseUntil)}
	sources, args := sourceFilter("source", args, c.Sources)
	var pick string
	if c.ID != "" {
		args = append(args, c.Principal, c.ID)
		pick = fmt.Sprintf(`SELECT principal, id FROM deliveries d WHERE principal = ?%d AND id = ?%d AND `,
			len(args)-1, len(args)) + dueCond + sources + ` AND ` + laneHeadCond
	} else {
		args = append(args, max(c.Limit, 1))
		// The head of each lane, as on Postgres: a lane sends its rows one at a time, oldest
		// first, so its oldest pending row goes first even when a later one falls due sooner
		// (the head waits out a Retry-After: the lane waits with it).
		pick = `SELECT principal, id FROM (
				SELECT principal, id, lane, state, next_attempt_at, lease_until, created_at,
					row_number() OVER (PARTITION BY principal, lane ORDER BY created_at, id) AS rn
				FROM deliveries d WHERE state IN ('prepared', 'sending')` + sources + `
				AND (lane = '' OR NOT EXISTS (SELECT 1 FROM delivery_lanes l
					WHERE l.principal = d.principal AND l.lane = d.lane AND l.next_allowed > ?1))
			) WHERE (lane = '' OR rn = 1) AND ` + dueCond + `
			ORDER BY next_attempt_at, created_at, id LIMIT ?` + fmt.Sprint(len(args))
	}
	rows, err := q.QueryContext(ctx, `UPDATE deliveries SET lease_owner = ?2, lease_until = ?3
		WHERE (principal, id) IN (`+pick+`) RETURNING `+deliveryCols, args...)
	out, err := collectDeliveries(rows, err, "claim deliveries")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b store.Delivery) int {
		return cmp.Or(a.NextAttemptAt.Compare(b.NextAttemptAt), a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

func insertDeliveryAttempt(ctx context.Context, q querier, a store.DeliveryAttempt) error {
	_, err := q.ExecContext(ctx, `INSERT INTO delivery_attempts (principal, delivery_id, attempt, kind, outcome, error,
		provider_status, retry_after_ms, owner, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.Principal, a.DeliveryID, a.Attempt, a.Kind, a.Outcome, a.Error, a.ProviderStatus, a.RetryAfter.Milliseconds(),
		a.Owner, micros(a.CreatedAt))
	if err != nil {
		return fmt.Errorf("insert delivery attempt of %s: %w", a.DeliveryID, err)
	}
	return nil
}

func reserveLane(ctx context.Context, q querier, principal, lane string, now, next time.Time) (bool, time.Time, error) {
	var got int64
	err := q.QueryRowContext(ctx, `INSERT INTO delivery_lanes (principal, lane, next_allowed, updated_at) VALUES (?1, ?2, ?4, ?3)
		ON CONFLICT (principal, lane) DO UPDATE SET next_allowed = excluded.next_allowed, updated_at = excluded.updated_at
		WHERE delivery_lanes.next_allowed <= ?3
		RETURNING next_allowed`, principal, lane, micros(now), micros(next)).Scan(&got)
	if err == nil {
		return true, fromMicros(got), nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return false, time.Time{}, fmt.Errorf("reserve lane %s: %w", lane, err)
	}
	if err := q.QueryRowContext(ctx, `SELECT next_allowed FROM delivery_lanes WHERE principal = ? AND lane = ?`,
		principal, lane).Scan(&got); err != nil {
		return false, time.Time{}, fmt.Errorf("reserve lane %s: %w", lane, err)
	}
	return false, fromMicros(got), nil
}

func delayLane(ctx context.Context, q querier, principal, lane string, until time.Time) error {
	_, err := q.ExecContext(ctx, `INSERT INTO delivery_lanes (principal, lane, next_allowed, updated_at) VALUES (?1, ?2, ?3, ?3)
		ON CONFLICT (principal, lane) DO UPDATE
		SET next_allowed = MAX(delivery_lanes.next_allowed, excluded.next_allowed), updated_at = excluded.updated_at`,
		principal, lane, micros(until))
	if err != nil {
		return fmt.Errorf("delay lane %s: %w", lane, err)
	}
	return nil
}

// settledDeliveriesSQL selects up to ?2 delivered and failed deliveries settled before ?1, by their
// partial index (SQLite's own choice sorted every settled row, twice per batch). A settled
// delivery of a task still going on (stored, in none of the n terminal states ?3..) stays: it is
// what finds the same delivery asked for again (a long wait for an answer) instead of sending it
// a second time. Those of finished tasks go: such a task asks for nothing more, and keeping them
// while their conversation stays active would have every batch read them again.
func settledDeliveriesSQL(n int) string {
	return `SELECT principal, id FROM deliveries d INDEXED BY deliveries_settled
	WHERE state IN ('delivered', 'failed') AND updated_at < ?1
	AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.principal = d.principal AND t.id = d.task_id
		AND t.state NOT IN (` + numbered(3, n) + `))
	ORDER BY updated_at LIMIT ?2`
}

func pruneDeliveries(ctx context.Context, q querier, cutoff time.Time, terminal []string, limit int) (int, error) {
	c := micros(cutoff)
	victims := settledDeliveriesSQL(len(terminal))
	args := []any{c, limitArg(limit)}
	for _, s := range terminal {
		args = append(args, s)
	}
	if _, err := q.ExecContext(ctx, `DELETE FROM delivery_attempts WHERE (principal, delivery_id) IN (`+victims+`)`,
		args...); err != nil {
		return 0, fmt.Errorf("prune delivery attempts: %w", err)
	}
	res, err := q.ExecContext(ctx, `DELETE FROM deliveries WHERE (principal, id) IN (`+victims+`)`, args...)
	if err != nil {
		return 0, fmt.Errorf("prune deliveries: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("prune deliveries: %w", err)
	}
	if _, err := q.ExecContext(ctx, `DELETE FROM delivery_lanes WHERE next_allowed < ?`, c); err != nil {
		return 0, fmt.Errorf("prune delivery lanes: %w", err)
	}
	return int(n), nil
}

// ---- store.DeliveryReader on the read pool ----

func (r reader) GetDelivery(ctx context.Context, principal, id string) (store.Delivery, error) {
	return getDelivery(ctx, r.db, principal, id)
}

func (r reader) ListDeliveries(ctx context.Context, f store.DeliveryFilter) ([]store.Delivery, error) {
	return listDeliveries(ctx, r.db, f)
}

func (r reader) ListDeliveryAttempts(ctx context.Context, principal, deliveryID string) ([]store.DeliveryAttempt, error) {
	return listDeliveryAttempts(ctx, r.db, principal, deliveryID)
}

func (r reader) NextDeliveryDue(ctx context.Context, sources []string) (time.Time, bool, error) {
	return nextDeliveryDue(ctx, r.db, sources)
}

// ---- store.DeliveryReader and store.DeliveryTx in a write transaction ----

func (t *txn) GetDelivery(ctx context.Context, principal, id string) (store.Delivery, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (store.Delivery, error) {
		return getDelivery(ctx, q, principal, id)
	})
}

func (t *txn) ListDeliveries(ctx context.Context, f store.DeliveryFilter) ([]store.Delivery, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.Delivery, error) {
		return listDeliveries(ctx, q, f)
	})
}

func (t *txn) ListDeliveryAttempts(ctx context.Context, principal, deliveryID string) ([]store.DeliveryAttempt, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.DeliveryAttempt, error) {
		return listDeliveryAttempts(ctx, q, principal, deliveryID)
	})
}

func (t *txn) NextDeliveryDue(ctx context.Context, sources []string) (time.Time, bool, error) {
	type result struct {
		due time.Time
		ok  bool
	}
	r, err := do(ctx, t, func(ctx context.Context, q querier) (result, error) {
		due, ok, err := nextDeliveryDue(ctx, q, sources)
		return result{due, ok}, err
	})
	return r.due, r.ok, err
}

func (t *txn) InsertDelivery(ctx context.Context, d store.Delivery) (store.Delivery, bool, error) {
	type result struct {
		d        store.Delivery
		inserted bool
	}
	r, err := do(ctx, t, func(ctx context.Context, q querier) (result, error) {
		d, inserted, err := insertDelivery(ctx, q, d)
		return result{d, inserted}, err
	})
	return r.d, r.inserted, err
}

func (t *txn) UpdateDelivery(ctx context.Context, d store.Delivery) error {
	return do0(ctx, t, func(ctx context.Context, q querier) error { return updateDelivery(ctx, q, d) })
}

func (t *txn) ClaimDeliveries(ctx context.Context, c store.DeliveryClaim) ([]store.Delivery, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.Delivery, error) {
		return claimDeliveries(ctx, q, c)
	})
}

func (t *txn) InsertDeliveryAttempt(ctx context.Context, a store.DeliveryAttempt) error {
	return do0(ctx, t, func(ctx context.Context, q querier) error { return insertDeliveryAttempt(ctx, q, a) })
}

func (t *txn) ReserveLane(ctx context.Context, principal, lane string, now, next time.Time) (bool, time.Time, error) {
	type result struct {
		granted bool
		next    time.Time
	}
	r, err := do(ctx, t, func(ctx context.Context, q querier) (result, error) {
		granted, next, err := reserveLane(ctx, q, principal, lane, now, next)
		return result{granted, next}, err
	})
	return r.granted, r.next, err
}

func (t *txn) DelayLane(ctx context.Context, principal, lane string, until time.Time) error {
	return do0(ctx, t, func(ctx context.Context, q querier) error { return delayLane(ctx, q, principal, lane, until) })
}

func (t *txn) PruneDeliveries(ctx context.Context, cutoff time.Time, terminal []string, limit int) (int, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (int, error) {
		return pruneDeliveries(ctx, q, cutoff, terminal, limit)
	})
}
