package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/channels-dev/channels/taskplane/store"
)

// querier is what the reads and writes need: a pool outside a transaction, a pgx.Tx inside one.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// reader implements store.Reader on a querier.
type reader struct {
	q querier
}

// notFound maps pgx.ErrNoRows to store.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

// utc returns t in UTC: pgx reads timestamptz in the local zone.
func utc(t time.Time) time.Time { return t.UTC() }

const taskColumns = `principal, id, context_id, source, state, status_time, version, last_seq, body, created_at, updated_at`

func scanTask(row pgx.CollectableRow) (store.Task, error) {
	var t store.Task
	err := row.Scan(&t.Principal, &t.ID, &t.ContextID, &t.Source, &t.State, &t.StatusTime, &t.Version,
		&t.LastSeq, &t.Body, &t.CreatedAt, &t.UpdatedAt)
	t.StatusTime, t.CreatedAt, t.UpdatedAt = utc(t.StatusTime), utc(t.CreatedAt), utc(t.UpdatedAt)
	return t, err
}

func (r reader) GetTask(ctx context.Context, principal, id string) (store.Task, error) {
	rows, _ := r.q.Query(ctx, `SELECT `+taskColumns+` FROM tasks WHERE principal = $1 AND id = $2`, principal, id)
	t, err := pgx.CollectExactlyOneRow(rows, scanTask)
	if err != nil {
		return store.Task{}, fmt.Errorf("get task: %w", notFound(err))
	}
	return t, nil
}

// where accumulates SQL conditions and their arguments.
type where struct {
	conds []string
	args  []any
}

// add appends a condition in which "?" stands for the next argument.
func (w *where) add(cond string, arg any) {
	w.args = append(w.args, arg)
	w.conds = append(w.conds, strings.Replace(cond, "?", "$"+strconv.Itoa(len(w.args)), 1))
}

func (w *where) sql() string {
	if len(w.conds) == 0 {
		return "TRUE"
	}
	return strings.Join(w.conds, " AND ")
}

func (r reader) ListTasks(ctx context.Context, principal string, f store.TaskFilter) ([]store.Task, int, error) {
	var w where
	w.add("principal = ?", principal)
	if f.ContextID != "" {
		w.add("context_id = ?", f.ContextID)
	}
	if f.Source != "" {
		w.add("source = ?", f.Source)
	}
	if f.State != "" {
		w.add("state = ?", f.State)
	}
	if !f.StatusAfter.IsZero() {
		w.add("status_time >= ?", f.StatusAfter)
	}
	var total int
	if err := r.q.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE `+w.sql(), w.args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("list tasks: count: %w", err)
	}
	if f.CursorID != "" {
		// Row comparison matches the (status_time DESC, id DESC) index order.
		w.args = append(w.args, f.CursorTime, f.CursorID)
		w.conds = append(w.conds, fmt.Sprintf("(status_time, id) < ($%d, $%d)", len(w.args)-1, len(w.args)))
	}
	const order = ` ORDER BY status_time DESC, id DESC`
	limit := ""
	if f.Limit > 0 {
		limit = ` LIMIT ` + strconv.Itoa(f.Limit)
	}
	query := `SELECT ` + taskColumns + ` FROM tasks WHERE ` + w.sql() + order + limit
	if f.MaxBytes > 0 && f.Limit > 0 {
		// The database leaves out the rows past the one whose body passes MaxBytes (as
		// ReadTasks would stop there), so it neither reads their stored bodies (octet_length of
		// a bytea does not detoast it) nor sends them. Only under a limit: without one the filter
		// would have the database scan every matching row, where a stream can be stopped.
		w.args = append(w.args, f.MaxBytes)
		query = `SELECT ` + taskColumns + ` FROM (SELECT ` + taskColumns + `, row_number() OVER w AS n,
			sum(coalesce(octet_length(body), 0)) OVER w AS upto FROM tasks WHERE ` + w.sql() + `
			WINDOW w AS (ORDER BY status_time DESC, id DESC ROWS UNBOUNDED PRECEDING)` + order + limit + `) page
			WHERE n <= 2 OR upto - coalesce(octet_length(body), 0) <= $` + strconv.Itoa(len(w.args)) + order
	}
	rows, _ := r.q.Query(ctx, query, w.args...)
	tasks, err := store.ReadTasks(f, rows.Next, func() (store.Task, error) { return scanTask(rows) })
	rows.Close() // the rows a listing stopped early did not read are discarded
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list tasks: %w", err)
	}
	return tasks, total, nil
}

func (r reader) TaskEvents(ctx context.Context, principal, taskID string, after int64, limit int) ([]store.TaskEvent, error) {
	// A missing task is ErrNotFound rather than an empty log. One statement answers both, in one
	// snapshot: no row means no task (whatever events its key may have), a row without an event
	// means no event after `after`.
	query := `SELECT e.seq, e.kind, e.payload, e.created_at FROM tasks t
		LEFT JOIN task_events e ON e.principal = t.principal AND e.task_id = t.id AND e.seq > $3
		WHERE t.principal = $1 AND t.id = $2 ORDER BY e.seq`
	if limit > 0 {
		query += ` LIMIT ` + strconv.Itoa(limit)
	}
	rows, _ := r.q.Query(ctx, query, principal, taskID, after)
	type row struct {
		seq     *int64
		kind    *string
		payload []byte
		created *time.Time
	}
	got, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (row, error) {
		var x row
		err := cr.Scan(&x.seq, &x.kind, &x.payload, &x.created)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("task events: %w", err)
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("task events: %w", store.ErrNotFound)
	}
	var events []store.TaskEvent
	for _, x := range got {
		if x.seq == nil {
			continue // the task, with no event after `after`
		}
		events = append(events, store.TaskEvent{Principal: principal, TaskID: taskID, Seq: *x.seq, Kind: *x.kind,
			Payload: x.payload, CreatedAt: utc(*x.created)})
	}
	return events, nil
}

const claimColumns = `principal, source, identity, digest, state, outcome_kind, task_id, context_id, message, created_at, updated_at`

func scanClaim(row pgx.CollectableRow) (store.Claim, error) {
	var c store.Claim
	err := row.Scan(&c.Principal, &c.Source, &c.Identity, &c.Digest, &c.State, &c.OutcomeKind, &c.TaskID,
		&c.ContextID, &c.Message, &c.CreatedAt, &c.UpdatedAt)
	c.CreatedAt, c.UpdatedAt = utc(c.CreatedAt), utc(c.UpdatedAt)
	return c, err
}

func (r reader) GetClaim(ctx context.Context, principal, source, identity string) (store.Claim, error) {
	rows, _ := r.q.Query(ctx, claimByKeySQL, principal, source, identity)
	return collectClaim(rows)
}

// claimByKeySQL reads the claim of (principal, source, identity).
const claimByKeySQL = `SELECT ` + claimColumns + ` FROM claims WHERE principal = $1 AND source = $2 AND identity = $3`

// collectClaim reads the one claim of rows (claimByKeySQL's); none is an error wrapping
// store.ErrNotFound.
func collectClaim(rows pgx.Rows) (store.Claim, error) {
	c, err := pgx.CollectExactlyOneRow(rows, scanClaim)
	if err != nil {
		return store.Claim{}, fmt.Errorf("get claim: %w", notFound(err))
	}
	return c, nil
}

func (r reader) GetContext(ctx context.Context, principal, contextID string) (store.Context, error) {
	return r.getContext(ctx, principal, contextID, "")
}

// getContext reads one context; lock is a locking clause for a transaction's read, or "".
func (r reader) getContext(ctx context.Context, principal, contextID, lock string) (store.Context, error) {
	var c store.Context
	err := r.q.QueryRow(ctx, `SELECT principal, id, source, conversation_key, created_at, last_event_at
		FROM contexts WHERE principal = $1 AND id = $2`+lock, principal, contextID).
		Scan(&c.Principal, &c.ID, &c.Source, &c.ConversationKey, &c.CreatedAt, &c.LastEventAt)
	if err != nil {
		return store.Context{}, fmt.Errorf("get context: %w", notFound(err))
	}
	c.CreatedAt, c.LastEventAt = utc(c.CreatedAt), utc(c.LastEventAt)
	return c, nil
}

func (r reader) GetAnchor(ctx context.Context, principal, source, providerID string) (store.Anchor, error) {
	var a store.Anchor
	err := r.q.QueryRow(ctx, `SELECT principal, source, provider_id, task_id, input_seq, created_at
		FROM anchors WHERE principal = $1 AND source = $2 AND provider_id = $3`, principal, source, providerID).
		Scan(&a.Principal, &a.Source, &a.ProviderID, &a.TaskID, &a.InputSeq, &a.CreatedAt)
	if err != nil {
		return store.Anchor{}, fmt.Errorf("get anchor: %w", notFound(err))
	}
	a.CreatedAt = utc(a.CreatedAt)
	return a, nil
}

const checkpointColumns = `principal, source, instance, position, seq, version, updated_at`

func scanCheckpoint(row pgx.CollectableRow) (store.Checkpoint, error) {
	var c store.Checkpoint
	err := row.Scan(&c.Principal, &c.Source, &c.Instance, &c.Position, &c.Seq, &c.Version, &c.UpdatedAt)
	c.UpdatedAt = utc(c.UpdatedAt)
	return c, err
}

// GetCheckpoint reads the checkpoint of (principal, source, instance), or while instance has
// none, the one kept from before checkpoints were per instance (instance "").
func (r reader) GetCheckpoint(ctx context.Context, principal, source, instance string) (store.Checkpoint, error) {
	rows, _ := r.q.Query(ctx, `SELECT `+checkpointColumns+` FROM checkpoints
		WHERE principal = $1 AND source = $2 AND instance IN ($3, '') ORDER BY instance = '' LIMIT 1`,
		principal, source, instance)
	c, err := pgx.CollectExactlyOneRow(rows, scanCheckpoint)
	if err != nil {
		return store.Checkpoint{}, fmt.Errorf("get checkpoint: %w", notFound(err))
	}
	return c, nil
}

func (r reader) ListEvidence(ctx context.Context, f store.EvidenceFilter) ([]store.Evidence, error) {
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
	if f.TaskID != "" {
		w.add("task_id = ?", f.TaskID)
	}
	if !f.Since.IsZero() {
		w.add("created_at >= ?", f.Since)
	}
	if !f.Until.IsZero() {
		w.add("created_at <= ?", f.Until)
	}
	if f.AfterID > 0 {
		w.add("id > ?", f.AfterID)
	}
	if f.Follow {
		h, err := r.evidenceHorizon(ctx, f.AfterID)
		if err != nil {
			return nil, fmt.Errorf("list evidence: %w", err)
		}
		w.add("id < ?", h)
	}
	order := ` ORDER BY id DESC`
	if f.Forward {
		order = ` ORDER BY id`
	}
	query := `SELECT id, principal, source, kind, task_id, detail, created_at FROM evidence WHERE ` + w.sql() + order
	if f.Limit > 0 {
		query += ` LIMIT ` + strconv.Itoa(f.Limit)
	}
	rows, _ := r.q.Query(ctx, query, w.args...)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Evidence, error) {
		var e store.Evidence
		err := row.Scan(&e.ID, &e.Principal, &e.Source, &e.Kind, &e.TaskID, &e.Detail, &e.CreatedAt)
		e.CreatedAt = utc(e.CreatedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list evidence: %w", err)
	}
	return out, nil
}

// Evidence ids are drawn when a row is inserted, but transactions commit in their own order, so
// a follower that has read id N+1 could miss an N committed after it. A read after an id
// (AfterID) therefore reads only the run of ids after it that has no gap, as one snapshot saw
// them, and passes a gap only once every transaction that could have drawn its id has ended
// (committed, so the record is there to read, or rolled back, so it never will be).
//
// Which transactions could have: one that draws an evidence id holds a ROW EXCLUSIVE lock on the
// table from before the draw (the statement takes it) until it ends. So once the sequence's last
// value L is read, every transaction still able to commit an id up to L is among those holding
// that lock when it is looked at next; once none of them holds it any more, every id up to L is
// settled. A transaction left open holds the follower at its gap for as long as it stays open: the
// follower waits, it does not skip. Transactions that never wrote evidence here (in another
// database, say) hold nothing up.
const evidenceHorizonMax = 10000 // ids looked at past a start; the read stops after them

// evidenceWait bounds how long one read waits for the transactions that may own a gap to end
// before it stops short of the gap; the follower's next read tries again. A variable for tests.
var evidenceWait = 2 * time.Second

// evidenceHorizon returns the id a follower's read after `after` must stay below.
func (r reader) evidenceHorizon(ctx context.Context, after int64) (int64, error) {
	h, gap, err := r.evidenceRun(ctx, after)
	if err != nil || !gap {
		return h, err
	}
	settled, err := r.evidenceSettled(ctx)
	if err != nil || settled <= after {
		return h, err
	}
	// Every id up to settled is final: the read may pass its gaps, and a follower whose filter
	// matched nothing for a while (its after far behind) is not held evidenceHorizonMax ids past it.
	h, _, err = r.evidenceRun(ctx, settled)
	return h, err
}

// evidenceRun returns the id just past the run of ids after `after` that has no gap (after+1 when
// there is none), and whether the run ends at a gap below a later id or at the scan's bound
// (evidenceHorizonMax ids) rather than at the newest id.
func (r reader) evidenceRun(ctx context.Context, after int64) (end int64, gap bool, err error) {
	rows, _ := r.q.Query(ctx, `SELECT id FROM evidence WHERE id > $1 ORDER BY id LIMIT `+strconv.Itoa(evidenceHorizonMax), after)
	next, n := after+1, 0
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		n++
		if id > next {
			return errHorizon
		}
		next = id + 1
		return nil
	})
	switch {
	case errors.Is(err, errHorizon):
		return next, true, nil
	case err != nil:
		return 0, false, err
	}
	return next, n == evidenceHorizonMax, nil
}

var errHorizon = errors.New("horizon found")

// evidenceSettled returns an evidence id up to which every id drawn is settled, waiting up to
// evidenceWait for the transactions that may own one to end; 0 when they did not (or the read
// runs inside a transaction).
func (r reader) evidenceSettled(ctx context.Context) (int64, error) {
	switch r.q.(type) {
	case pgx.Tx, *pipe: // a read transaction, or an Update's (whose own evidence it would wait for)
		return 0, nil
	}
	var last int64
	if err := r.q.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM evidence_id_seq`).Scan(&last); err != nil {
		return 0, err
	}
	// Read after last: the writers that may hold an id up to it.
	const writers = `SELECT l.virtualtransaction FROM pg_locks l
		WHERE l.locktype = 'relation' AND l.relation = 'evidence'::regclass AND l.mode = 'RowExclusiveLock'
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`
	rows, _ := r.q.Query(ctx, writers)
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(evidenceWait)
	for len(held) > 0 {
		if !time.Now().Before(deadline) {
			return 0, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		rows, _ := r.q.Query(ctx, writers+` AND l.virtualtransaction = ANY($1)`, held)
		if held, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return 0, err
		}
	}
	return last, nil
}

func (r reader) ListWakes(ctx context.Context, state store.WakeState, limit int) ([]store.Wake, error) {
	query := `SELECT ` + wakeColumns + ` FROM wakes WHERE state = $1 ORDER BY created_at, seq`
	if limit > 0 {
		query += ` LIMIT ` + strconv.Itoa(limit)
	}
	rows, _ := r.q.Query(ctx, query, string(state))
	out, err := pgx.CollectRows(rows, scanWake)
	if err != nil {
		return nil, fmt.Errorf("list wakes: %w", err)
	}
	return out, nil
}
