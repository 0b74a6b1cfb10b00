package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/taskplane/store"
)

// The aggregate reads (store.SummaryReader). The tx embeds reader, so these serve both.

// evidenceEvents is the number of events one evidence row stands for: its detail's "count" when
// that is a number from -1e9 to 1e9 (truncated to an integer), else 1. Detail is bytea holding a
// JSON object (the store contract), read through evidenceDetail as j.d.
//
// No detail may fail the summary: a count too large to be one (1e30, or 1e200000, which numeric
// cannot hold) counts once like a count that is not a number; a detail that is not an object has
// no count; and a string holding \u0000 (json.Marshal's spelling of a NUL, which provider-supplied
// identities and error texts can carry) is read as \ufffd, since PostgreSQL's JSON functions
// refuse \u0000 (SQLSTATE 22P05) and only the count is read. The \\ pairs are spelled \u005c
// first, so a backslash that is itself escaped is never taken for the start of \u0000.
// The count's text is matched before it is cast (in a CASE of its own: PostgreSQL may evaluate
// the operands of AND in any order), so the cast to numeric cannot overflow.
const evidenceEvents = `CASE WHEN json_typeof(j.d) = 'object' AND json_typeof(j.d -> 'count') = 'number'
	AND j.d ->> 'count' ~ '^-?[0-9]{1,20}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?$'
	THEN CASE WHEN (j.d ->> 'count')::numeric BETWEEN -1e9 AND 1e9
		THEN trunc((j.d ->> 'count')::numeric)::bigint ELSE 1 END
	ELSE 1 END`

// evidenceDetail joins each evidence row to its detail as json (j.d); see evidenceEvents.
const evidenceDetail = `CROSS JOIN LATERAL (SELECT replace(replace(convert_from(detail, 'UTF8'),
	'\\', '\u005c'), '\u0000', '\ufffd')::json AS d) j`

func (r reader) CountEvidence(ctx context.Context, f store.EvidenceCountFilter) ([]store.EvidenceCount, error) {
	if f.Bucket > 0 && f.Since.IsZero() {
		return nil, errors.New("count evidence: buckets need Since")
	}
	var w where
	if f.Principal != "" {
		w.add("principal = ?", f.Principal)
	}
	if f.Source != "" {
		w.add("source = ?", f.Source)
	}
	if f.Kind != "" {
		w.add("kind = ?", f.Kind)
	}
	if !f.Since.IsZero() {
		w.add("created_at >= ?", f.Since)
	}
	if !f.Until.IsZero() {
		w.add("created_at < ?", f.Until)
	}
	bucket := "0::bigint"
	if f.Bucket > 0 {
		// The bucket's index: whole bucket widths between Since and the row, in microseconds.
		// Since and the width are parameters, so every dashboard load runs one statement text
		// (each text is a statement prepared on the connection).
		n := len(w.args)
		w.args = append(w.args, f.Since.UnixMicro(), f.Bucket.Microseconds())
		bucket = fmt.Sprintf(`floor((extract(epoch FROM created_at) * 1000000 - $%d::bigint) / $%d::bigint)::bigint`, n+1, n+2)
	}
	rows, _ := r.q.Query(ctx, `SELECT source, kind, `+bucket+` AS b, count(*), sum(`+evidenceEvents+`)::bigint,
		max(created_at) FROM evidence `+evidenceDetail+` WHERE `+w.sql()+` GROUP BY source, kind, b ORDER BY source, kind, b`, w.args...)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.EvidenceCount, error) {
		var c store.EvidenceCount
		var b int64
		err := row.Scan(&c.Source, &c.Kind, &b, &c.Rows, &c.Events, &c.Last)
		if f.Bucket > 0 {
			c.Bucket = f.Since.Add(f.Bucket * time.Duration(b))
		}
		c.Last = utc(c.Last)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("count evidence: %w", err)
	}
	return out, nil
}

func (r reader) CountDeliveries(ctx context.Context, principal string) ([]store.DeliveryCount, error) {
	var w where
	if principal != "" {
		w.add("principal = ?", principal)
	}
	rows, _ := r.q.Query(ctx, `SELECT source, lane, state, count(*), min(updated_at) FROM deliveries WHERE `+w.sql()+`
		GROUP BY source, lane, state ORDER BY source, lane, state`, w.args...)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.DeliveryCount, error) {
		var c store.DeliveryCount
		var st string
		err := row.Scan(&c.Source, &c.Lane, &st, &c.N, &c.Oldest)
		c.State, c.Oldest = store.DeliveryState(st), utc(c.Oldest)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("count deliveries: %w", err)
	}
	return out, nil
}

func (r reader) CountTasks(ctx context.Context) ([]store.TaskCount, error) {
	rows, _ := r.q.Query(ctx, `SELECT principal, source, state, count(*) FROM tasks
		GROUP BY principal, source, state ORDER BY principal, source, state`)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.TaskCount, error) {
		var c store.TaskCount
		err := row.Scan(&c.Principal, &c.Source, &c.State, &c.N)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("count tasks: %w", err)
	}
	return out, nil
}

func (r reader) ListCheckpoints(ctx context.Context, source string) ([]store.Checkpoint, error) {
	var w where
	if source != "" {
		w.add("source = ?", source)
	}
	rows, _ := r.q.Query(ctx, `SELECT `+checkpointColumns+` FROM checkpoints WHERE `+w.sql()+
		` ORDER BY source, principal, instance`, w.args...)
	out, err := pgx.CollectRows(rows, scanCheckpoint)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	return out, nil
}
