package sqlite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// The aggregate reads (store.SummaryReader).

// evidenceEvents is the number of events one evidence row stands for: its detail's "count" when
// that is a number from -1e9 to 1e9 (truncated to an integer), else 1: a count too large to be
// one counts once, as one that is not a number does, so no detail can overflow the sum. Detail
// is a BLOB holding JSON text; the cast makes the JSON functions read it as text (a BLOB would be
// taken for JSONB).
const evidenceEvents = `CASE WHEN json_valid(CAST(detail AS TEXT))
	AND json_type(CAST(detail AS TEXT), '$.count') IN ('integer', 'real')
	AND json_extract(CAST(detail AS TEXT), '$.count') BETWEEN -1e9 AND 1e9
	THEN CAST(json_extract(CAST(detail AS TEXT), '$.count') AS INTEGER) ELSE 1 END`

func countEvidence(ctx context.Context, q querier, f store.EvidenceCountFilter) ([]store.EvidenceCount, error) {
	if f.Bucket > 0 && f.Since.IsZero() {
		return nil, errors.New("count evidence: buckets need Since")
	}
	var w filter
	w.eq("principal", f.Principal)
	w.eq("source", f.Source)
	w.eq("kind", f.Kind)
	if !f.Since.IsZero() {
		w.add("created_at >= ?", micros(f.Since))
	}
	if !f.Until.IsZero() {
		w.add("created_at < ?", micros(f.Until))
	}
	where, args := w.where(), w.args
	bucket := "0"
	if f.Bucket > 0 {
		// Integer division of the offset from Since: the bucket's index. Since and the width are
		// parameters (placed before the filter's, as the select list comes first), so every
		// dashboard load runs one statement text and the statement cache keeps one entry for it.
		bucket = "((created_at - ?) / ?)"
		args = append([]any{micros(f.Since), f.Bucket.Microseconds()}, args...)
	}
	rows, err := q.QueryContext(ctx, `SELECT source, kind, `+bucket+` AS b, COUNT(*), SUM(`+evidenceEvents+`), MAX(created_at)
		FROM evidence`+where+` GROUP BY source, kind, b ORDER BY source, kind, b`, args...)
	if err != nil {
		return nil, fmt.Errorf("count evidence: %w", err)
	}
	defer rows.Close()
	var out []store.EvidenceCount
	for rows.Next() {
		var c store.EvidenceCount
		var b, last int64
		if err := rows.Scan(&c.Source, &c.Kind, &b, &c.Rows, &c.Events, &last); err != nil {
			return nil, fmt.Errorf("count evidence: %w", err)
		}
		if f.Bucket > 0 {
			c.Bucket = f.Since.Add(f.Bucket * time.Duration(b))
		}
		c.Last = fromMicros(last)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count evidence: %w", err)
	}
	return out, nil
}

func countDeliveries(ctx context.Context, q querier, principal string) ([]store.DeliveryCount, error) {
	where, args := "", []any{}
	if principal != "" {
		where, args = " WHERE principal = ?", append(args, principal)
	}
	rows, err := q.QueryContext(ctx, `SELECT source, lane, state, COUNT(*), MIN(updated_at) FROM deliveries`+where+`
		GROUP BY source, lane, state ORDER BY source, lane, state`, args...)
	if err != nil {
		return nil, fmt.Errorf("count deliveries: %w", err)
	}
	defer rows.Close()
	var out []store.DeliveryCount
	for rows.Next() {
		var c store.DeliveryCount
		var st string
		var oldest int64
		if err := rows.Scan(&c.Source, &c.Lane, &st, &c.N, &oldest); err != nil {
			return nil, fmt.Errorf("count deliveries: %w", err)
		}
		c.State, c.Oldest = store.DeliveryState(st), fromMicros(oldest)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count deliveries: %w", err)
	}
	return out, nil
}

func countTasks(ctx context.Context, q querier) ([]store.TaskCount, error) {
	rows, err := q.QueryContext(ctx, `SELECT principal, source, state, COUNT(*) FROM tasks
		GROUP BY principal, source, state ORDER BY principal, source, state`)
	if err != nil {
		return nil, fmt.Errorf("count tasks: %w", err)
	}
	defer rows.Close()
	var out []store.TaskCount
	for rows.Next() {
		var c store.TaskCount
		if err := rows.Scan(&c.Principal, &c.Source, &c.State, &c.N); err != nil {
			return nil, fmt.Errorf("count tasks: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count tasks: %w", err)
	}
	return out, nil
}

func listCheckpoints(ctx context.Context, q querier, source string) ([]store.Checkpoint, error) {
	where, args := "", []any{}
	if source != "" {
		where, args = " WHERE source = ?", append(args, source)
	}
	rows, err := q.QueryContext(ctx, `SELECT principal, source, instance, position, seq, version, updated_at FROM checkpoints`+
		where+` ORDER BY source, principal, instance`, args...)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	defer rows.Close()
	var out []store.Checkpoint
	for rows.Next() {
		var c store.Checkpoint
		var updated int64
		if err := rows.Scan(&c.Principal, &c.Source, &c.Instance, &c.Position, &c.Seq, &c.Version, &updated); err != nil {
			return nil, fmt.Errorf("list checkpoints: %w", err)
		}
		c.UpdatedAt = fromMicros(updated)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	return out, nil
}

func (r reader) CountEvidence(ctx context.Context, f store.EvidenceCountFilter) ([]store.EvidenceCount, error) {
	return countEvidence(ctx, r.db, f)
}

func (r reader) CountDeliveries(ctx context.Context, principal string) ([]store.DeliveryCount, error) {
	return countDeliveries(ctx, r.db, principal)
}

func (r reader) CountTasks(ctx context.Context) ([]store.TaskCount, error) {
	return countTasks(ctx, r.db)
}

func (r reader) ListCheckpoints(ctx context.Context, source string) ([]store.Checkpoint, error) {
	return listCheckpoints(ctx, r.db, source)
}

func (t *txn) CountEvidence(ctx context.Context, f store.EvidenceCountFilter) ([]store.EvidenceCount, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.EvidenceCount, error) { return countEvidence(ctx, q, f) })
}

func (t *txn) CountDeliveries(ctx context.Context, principal string) ([]store.DeliveryCount, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.DeliveryCount, error) {
		return countDeliveries(ctx, q, principal)
	})
}

func (t *txn) CountTasks(ctx context.Context) ([]store.TaskCount, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.TaskCount, error) { return countTasks(ctx, q) })
}

func (t *txn) ListCheckpoints(ctx context.Context, source string) ([]store.Checkpoint, error) {
	return do(ctx, t, func(ctx context.Context, q querier) ([]store.Checkpoint, error) {
		return listCheckpoints(ctx, q, source)
	})
}
