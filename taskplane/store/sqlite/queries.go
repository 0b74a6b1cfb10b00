package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// Times are stored as unix microseconds: callers pass UTC times truncated to microseconds, so
// this round-trips them exactly, and SQL compares them as integers.
func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// notFound wraps store.ErrNotFound with what was looked up. A row of another principal takes the
// same path as a missing one, so the two are indistinguishable to the caller.
func notFound(what string, key ...string) error {
	return fmt.Errorf("%s %s: %w", what, strings.Join(key, "/"), store.ErrNotFound)
}

// limitArg turns the store's "0 = no limit" into SQLite's LIMIT -1.
func limitArg(limit int) int {
	if limit <= 0 {
		return -1
	}
	return limit
}

// filter builds a WHERE clause from optional conditions: each non-zero value adds "column = ?".
type filter struct {
	conds []string
	args  []any
}

// add adds cond with its argument.
func (f *filter) add(cond string, arg any) {
	f.conds = append(f.conds, cond)
	f.args = append(f.args, arg)
}

// eq adds "column = ?" when value is not empty.
func (f *filter) eq(column, value string) {
	if value != "" {
		f.add(column+" = ?", value)
	}
}

// where is " WHERE c1 AND c2 …", or "" without conditions.
func (f *filter) where() string {
	if len(f.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(f.conds, " AND ")
}

// placeholders returns "?, ?, …" for n arguments.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// numbered returns n numbered placeholders from ?from on: "?3, ?4".
func numbered(from, n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = "?" + strconv.Itoa(from+i)
	}
	return strings.Join(ps, ", ")
}

// ---- tasks ----

const taskCols = `principal, id, context_id, source, state, status_time, version, last_seq, body, created_at, updated_at`

func scanTask(sc scanner) (store.Task, error) {
	var t store.Task
	var statusTime, created, updated int64
	err := sc.Scan(&t.Principal, &t.ID, &t.ContextID, &t.Source, &t.State, &statusTime, &t.Version, &t.LastSeq,
		&t.Body, &created, &updated)
	if err != nil {
		return store.Task{}, err
	}
	t.StatusTime, t.CreatedAt, t.UpdatedAt = fromMicros(statusTime), fromMicros(created), fromMicros(updated)
	return t, nil
}

func getTask(ctx context.Context, q querier, principal, id string) (store.Task, error) {
	t, err := scanTask(q.QueryRowContext(ctx, `SELECT `+taskCols+` FROM tasks WHERE principal = ? AND id = ?`, principal, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Task{}, notFound("task", id)
	}
	if err != nil {
		return store.Task{}, fmt.Errorf("get task %s: %w", id, err)
	}
	return t, nil
}

// taskFilter is the FROM and WHERE clauses, and the arguments, of a listing of principal's tasks by
// f (without its cursor). A listing of one context reads that context's tasks by tasks_context:
// without it SQLite walked every task of the principal in the state asked for when a state was
// given too (1.5 s at 50,000 tasks, against 3 ms).
func taskFilter(principal string, f store.TaskFilter) (from, where string, args []any) {
	from = "tasks"
	if f.ContextID != "" {
		from = "tasks INDEXED BY tasks_context"
	}
	where = "principal = ?"
	args = []any{principal}
	if f.ContextID != "" {
		where += " AND context_id = ?"
		args = append(args, f.ContextID)
	}
	if f.Source != "" {
		where += " AND source = ?"
		args = append(args, f.Source)
	}
	if f.State != "" {
		where += " AND state = ?"
		args = append(args, f.State)
	}
	if !f.StatusAfter.IsZero() {
		where += " AND status_time >= ?"
		args = append(args, micros(f.StatusAfter))
	}
	return from, where, args
}

func listTasks(ctx context.Context, q querier, principal string, f store.TaskFilter) ([]store.Task, int, error) {
	from, where, args := taskFilter(principal, f)
	var total int
	if err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+from+` WHERE `+where, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count tasks: %w", err)
	}
	if f.CursorID != "" {
		ct := micros(f.CursorTime)
		where += " AND (status_time < ? OR (status_time = ? AND id < ?))"
		args = append(args, ct, ct, f.CursorID)
	}
	args = append(args, limitArg(f.Limit))
	rows, err := q.QueryContext(ctx, `SELECT `+taskCols+` FROM `+from+` WHERE `+where+
		` ORDER BY status_time DESC, id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("list tasks: %w", err)
	}
	defer rows.Close()
	tasks, err := store.ReadTasks(f, rows.Next, func() (store.Task, error) { return scanTask(rows) })
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list tasks: %w", err)
	}
	return tasks, total, nil
}

func insertTask(ctx context.Context, q querier, t store.Task) error {
	_, err := q.ExecContext(ctx, `INSERT INTO tasks (`+taskCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		t.Principal, t.ID, t.ContextID, t.Source, t.State, micros(t.StatusTime), t.Version, t.LastSeq, t.Body,
		micros(t.CreatedAt), micros(t.UpdatedAt))
	if err != nil {
		return fmt.Errorf("insert task %s: %w", t.ID, err)
	}
	return nil
}

func updateTask(ctx context.Context, q querier, t store.Task, expectVersion int64) error {
	res, err := q.ExecContext(ctx, `UPDATE tasks SET state = ?, status_time = ?, body = ?, updated_at = ?, last_seq = ?,
		version = version + 1 WHERE principal = ? AND id = ? AND version = ?`,
		t.State, micros(t.StatusTime), t.Body, micros(t.UpdatedAt), t.LastSeq, t.Principal, t.ID, expectVersion)
	if err != nil {
		return fmt.Errorf("update task %s: %w", t.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("update task %s: %w", t.ID, err)
	} else if n == 1 {
		return nil
	}
	var stored int64
	err = q.QueryRowContext(ctx, `SELECT version FROM tasks WHERE principal = ? AND id = ?`, t.Principal, t.ID).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound("task", t.ID)
	}
	if err != nil {
		return fmt.Errorf("update task %s: %w", t.ID, err)
	}
	return fmt.Errorf("update task %s: expected version %d, stored version is %d: %w",
		t.ID, expectVersion, stored, store.ErrConcurrentModification)
}

// ---- task events ----

func appendTaskEvent(ctx context.Context, q querier, principal, taskID string, seq int64, kind string, payload []byte, at time.Time) error {
	// The caller allocated seq from the task row it read, and writes the row's new last_seq
	// itself (see store.Tx): one statement per event. A seq already taken means another writer
	// got there first.
	res, err := q.ExecContext(ctx, `INSERT INTO task_events (principal, task_id, seq, kind, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT DO NOTHING`, principal, taskID, seq, kind, payload, micros(at))
	if err != nil {
		return fmt.Errorf("append event %d to task %s: %w", seq, taskID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("append event %d to task %s: %w", seq, taskID, err)
	} else if n == 0 {
		return fmt.Errorf("append event %d to task %s: the log has it already: %w", seq, taskID, store.ErrConcurrentModification)
	}
	return nil
}

func taskEvents(ctx context.Context, q querier, principal, taskID string, after int64, limit int) ([]store.TaskEvent, error) {
	// A missing task is ErrNotFound rather than an empty log, so that a subscriber to another
	// principal's task learns nothing and a resuming client can tell "gone" from "quiet". One
	// statement answers both (one snapshot, no transaction of its own): no row means no task, a
	// row without an event means no event after `after`.
	rows, err := q.QueryContext(ctx, `SELECT e.seq, e.kind, e.payload, e.created_at FROM tasks t
		LEFT JOIN task_events e ON e.principal = t.principal AND e.task_id = t.id AND e.seq > ?
		WHERE t.principal = ? AND t.id = ? ORDER BY e.seq LIMIT ?`, after, principal, taskID, limitArg(limit))
	if err != nil {
		return nil, fmt.Errorf("task events of %s: %w", taskID, err)
	}
	defer rows.Close()
	var (
		events []store.TaskEvent
		found  bool
	)
	for rows.Next() {
		found = true
		var (
			seq, created sql.NullInt64
			kind         sql.NullString
			payload      []byte
		)
		if err := rows.Scan(&seq, &kind, &payload, &created); err != nil {
			return nil, fmt.Errorf("task events of %s: %w", taskID, err)
		}
		if !seq.Valid {
			continue // the task, with no event after `after`
		}
		events = append(events, store.TaskEvent{Principal: principal, TaskID: taskID, Seq: seq.Int64,
			Kind: kind.String, Payload: payload, CreatedAt: fromMicros(created.Int64)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("task events of %s: %w", taskID, err)
	}
	if !found {
		return nil, notFound("task", taskID)
	}
	return events, nil
}

// ---- claims ----

const claimCols = `principal, source, identity, digest, state, outcome_kind, task_id, context_id, message, created_at, updated_at`

func scanClaim(sc scanner) (store.Claim, error) {
	var c store.Claim
	var state string
	var created, updated int64
	err := sc.Scan(&c.Principal, &c.Source, &c.Identity, &c.Digest, &state, &c.OutcomeKind, &c.TaskID, &c.ContextID,
		&c.Message, &created, &updated)
	if err != nil {
		return store.Claim{}, err
	}
	c.State = store.ClaimState(state)
	c.CreatedAt, c.UpdatedAt = fromMicros(created), fromMicros(updated)
	return c, nil
}

func getClaim(ctx context.Context, q querier, principal, source, identity string) (store.Claim, error) {
	c, err := scanClaim(q.QueryRowContext(ctx, `SELECT `+claimCols+` FROM claims WHERE principal = ? AND source = ? AND identity = ?`,
		principal, source, identity))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Claim{}, notFound("claim", source, identity)
	}
	if err != nil {
		return store.Claim{}, fmt.Errorf("get claim %s/%s: %w", source, identity, err)
	}
	return c, nil
}

func insertClaim(ctx context.Context, q querier, c store.Claim) (store.Claim, bool, error) {
	res, err := q.ExecContext(ctx, `INSERT INTO claims (`+claimCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (principal, source, identity) DO NOTHING`,
		c.Principal, c.Source, c.Identity, c.Digest, string(c.State), c.OutcomeKind, c.TaskID, c.ContextID, c.Message,
		micros(c.CreatedAt), micros(c.UpdatedAt))
	if err != nil {
		return store.Claim{}, false, fmt.Errorf("insert claim %s/%s: %w", c.Source, c.Identity, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return store.Claim{}, false, fmt.Errorf("insert claim %s/%s: %w", c.Source, c.Identity, err)
	}
	if n == 1 {
		return c, true, nil
	}
	existing, err := getClaim(ctx, q, c.Principal, c.Source, c.Identity)
	if err != nil {
		return store.Claim{}, false, err
	}
	return existing, false, nil
}

func deleteClaim(ctx context.Context, q querier, principal, source, identity, taskID string) (bool, error) {
	res, err := q.ExecContext(ctx, `DELETE FROM claims WHERE principal = ? AND source = ? AND identity = ? AND task_id = ?`,
		principal, source, identity, taskID)
	if err != nil {
		return false, fmt.Errorf("delete claim %s/%s: %w", source, identity, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("delete claim %s/%s: %w", source, identity, err)
	}
	return n == 1, nil
}

// affectedOne turns an UPDATE's result into nil, ErrNotFound (no row matched) or an error.
func affectedOne(res sql.Result, err error, op, what string, key ...string) error {
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, strings.Join(key, "/"), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, strings.Join(key, "/"), err)
	}
	if n == 0 {
		return notFound(what, key...)
	}
	return nil
}

// ---- contexts ----

const contextCols = `principal, id, source, conversation_key, created_at, last_event_at`

func getContext(ctx context.Context, q querier, principal, id string) (store.Context, error) {
	var c store.Context
	var created, last int64
	err := q.QueryRowContext(ctx, `SELECT `+contextCols+` FROM contexts WHERE principal = ? AND id = ?`, principal, id).
		Scan(&c.Principal, &c.ID, &c.Source, &c.ConversationKey, &created, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Context{}, notFound("context", id)
	}
	if err != nil {
		return store.Context{}, fmt.Errorf("get context %s: %w", id, err)
	}
	c.CreatedAt, c.LastEventAt = fromMicros(created), fromMicros(last)
	return c, nil
}

func ensureContext(ctx context.Context, q querier, principal, source, key, candidateID string, now time.Time) (string, error) {
	if key == "" {
		// Every keyless call would create a context; that is InsertContext's job, said explicitly.
		return "", errors.New("ensure context: empty conversation key")
	}
	// One statement: insert the candidate, or record the event's activity in the existing context
	// (never moving it backwards, as TouchContext), and return the id either way. The conflict
	// target names the partial unique index, so a clash on the candidate's own primary key is
	// still an error rather than an update of someone else's context.
	var id string
	if err := q.QueryRowContext(ctx, `INSERT INTO contexts (`+contextCols+`) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (principal, source, conversation_key) WHERE conversation_key != ''
		DO UPDATE SET last_event_at = MAX(last_event_at, excluded.last_event_at)
		RETURNING id`,
		principal, candidateID, source, key, micros(now), micros(now)).Scan(&id); err != nil {
		return "", fmt.Errorf("ensure context %s/%s: %w", source, key, err)
	}
	return id, nil
}

func insertContext(ctx context.Context, q querier, c store.Context) error {
	res, err := q.ExecContext(ctx, `INSERT INTO contexts (`+contextCols+`) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (principal, id) DO NOTHING`,
		c.Principal, c.ID, c.Source, c.ConversationKey, micros(c.CreatedAt), micros(c.LastEventAt))
	if err != nil {
		return fmt.Errorf("insert context %s: %w", c.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("insert context %s: %w", c.ID, err)
	} else if n == 0 {
		return fmt.Errorf("insert context %s: it exists: %w", c.ID, store.ErrConcurrentModification)
	}
	return nil
}

func touchContext(ctx context.Context, q querier, principal, id string, at time.Time) error {
	// MAX: a late or replayed event must not make a context look older than it is to retention.
	res, err := q.ExecContext(ctx, `UPDATE contexts SET last_event_at = MAX(last_event_at, ?) WHERE principal = ? AND id = ?`,
		micros(at), principal, id)
	return affectedOne(res, err, "touch context", "context", id)
}

// ---- anchors ----

func getAnchor(ctx context.Context, q querier, principal, source, providerID string) (store.Anchor, error) {
	var a store.Anchor
	var created int64
	err := q.QueryRowContext(ctx, `SELECT principal, source, provider_id, task_id, input_seq, created_at FROM anchors
		WHERE principal = ? AND source = ? AND provider_id = ?`, principal, source, providerID).
		Scan(&a.Principal, &a.Source, &a.ProviderID, &a.TaskID, &a.InputSeq, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Anchor{}, notFound("anchor", source, providerID)
	}
	if err != nil {
		return store.Anchor{}, fmt.Errorf("get anchor %s/%s: %w", source, providerID, err)
	}
	a.CreatedAt = fromMicros(created)
	return a, nil
}

// putAnchor writes the anchor only if its task exists (retention deletes anchors only with their
// tasks). The WHERE of the SELECT keeps SQLite from reading ON CONFLICT as a join's.
func putAnchor(ctx context.Context, q querier, a store.Anchor) error {
	res, err := q.ExecContext(ctx, `INSERT INTO anchors (principal, source, provider_id, task_id, input_seq, created_at)
		SELECT principal, ?, ?, id, ?, ? FROM tasks WHERE principal = ? AND id = ?
		ON CONFLICT (principal, source, provider_id) DO UPDATE SET
			task_id = excluded.task_id, input_seq = excluded.input_seq, created_at = excluded.created_at`,
		a.Source, a.ProviderID, a.InputSeq, micros(a.CreatedAt), a.Principal, a.TaskID)
	if err != nil {
		return fmt.Errorf("put anchor %s/%s: %w", a.Source, a.ProviderID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("put anchor %s/%s: %w", a.Source, a.ProviderID, err)
	}
	if n == 0 {
		return fmt.Errorf("put anchor %s/%s: %w", a.Source, a.ProviderID, notFound("task", a.TaskID))
	}
	return nil
}

// ---- checkpoints ----

// getCheckpoint reads the checkpoint of (principal, source, instance), or while instance has none,
// the one kept from before checkpoints were per instance (instance "").
func getCheckpoint(ctx context.Context, q querier, principal, source, instance string) (store.Checkpoint, error) {
	var c store.Checkpoint
	var updated int64
	err := q.QueryRowContext(ctx, `SELECT principal, source, instance, position, seq, version, updated_at FROM checkpoints
		WHERE principal = ? AND source = ? AND instance IN (?, '') ORDER BY instance = '' LIMIT 1`, principal, source, instance).
		Scan(&c.Principal, &c.Source, &c.Instance, &c.Position, &c.Seq, &c.Version, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Checkpoint{}, notFound("checkpoint", source, instance)
	}
	if err != nil {
		return store.Checkpoint{}, fmt.Errorf("get checkpoint %s/%s: %w", source, instance, err)
	}
	c.UpdatedAt = fromMicros(updated)
	return c, nil
}

// adoptCheckpointSQL gives the checkpoint kept from before checkpoints were per instance to the
// instance ($3) that advances first and has none of its own.
const adoptCheckpointSQL = `UPDATE checkpoints SET instance = ?3
	WHERE principal = ?1 AND source = ?2 AND instance = '' AND ?3 <> ''
		AND NOT EXISTS (SELECT 1 FROM checkpoints WHERE principal = ?1 AND source = ?2 AND instance = ?3)`

func advanceCheckpoint(ctx context.Context, q querier, c store.Checkpoint) (store.Checkpoint, error) {
	if _, err := q.ExecContext(ctx, adoptCheckpointSQL, c.Principal, c.Source, c.Instance); err != nil {
		return store.Checkpoint{}, fmt.Errorf("advance checkpoint %s/%s: take over the old checkpoint: %w", c.Source, c.Instance, err)
	}
	// The WHERE on the upsert makes a stale or repeated position a no-op, so a checkpoint never
	// moves backwards however callers interleave.
	if _, err := q.ExecContext(ctx, `INSERT INTO checkpoints (principal, source, instance, position, seq, version, updated_at)
		VALUES (?, ?, ?, ?, ?, 1, ?)
		ON CONFLICT (principal, source, instance) DO UPDATE SET
			position = excluded.position, seq = excluded.seq, version = checkpoints.version + 1,
			updated_at = excluded.updated_at
		WHERE excluded.seq > checkpoints.seq`,
		c.Principal, c.Source, c.Instance, c.Position, c.Seq, micros(c.UpdatedAt)); err != nil {
		return store.Checkpoint{}, fmt.Errorf("advance checkpoint %s/%s: %w", c.Source, c.Instance, err)
	}
	return getCheckpoint(ctx, q, c.Principal, c.Source, c.Instance)
}

// ---- evidence ----

func insertEvidence(ctx context.Context, q querier, e store.Evidence) error {
	if _, err := q.ExecContext(ctx, `INSERT INTO evidence (principal, source, kind, task_id, detail, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		e.Principal, e.Source, e.Kind, e.TaskID, e.Detail, micros(e.CreatedAt)); err != nil {
		return fmt.Errorf("insert evidence %s/%s: %w", e.Source, e.Kind, err)
	}
	return nil
}

func listEvidence(ctx context.Context, q querier, f store.EvidenceFilter) ([]store.Evidence, error) {
	var w filter
	w.eq("principal", f.Principal)
	w.eq("source", f.Source)
	w.eq("kind", f.Kind)
	w.eq("task_id", f.TaskID)
	if !f.Since.IsZero() {
		w.add("created_at >= ?", micros(f.Since))
	}
	if !f.Until.IsZero() {
		// Unary + keeps SQLite off the created_at index here: the read that uses Until (where a
		// follow starts) wants the newest id at or before a time, a backward scan by id that stops
		// at once, not every record up to that time sorted afterwards.
		w.add("+created_at <= ?", micros(f.Until))
	}
	if f.AfterID > 0 {
		w.add("id > ?", f.AfterID)
	}
	where, args := w.where(), append(w.args, limitArg(f.Limit))
	order := ` ORDER BY id DESC`
	if f.Forward {
		order = ` ORDER BY id`
	}
	rows, err := q.QueryContext(ctx, `SELECT id, principal, source, kind, task_id, detail, created_at FROM evidence`+where+
		order+` LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("list evidence: %w", err)
	}
	defer rows.Close()
	var out []store.Evidence
	for rows.Next() {
		var e store.Evidence
		var created int64
		if err := rows.Scan(&e.ID, &e.Principal, &e.Source, &e.Kind, &e.TaskID, &e.Detail, &created); err != nil {
			return nil, fmt.Errorf("list evidence: %w", err)
		}
		e.CreatedAt = fromMicros(created)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list evidence: %w", err)
	}
	return out, nil
}

// ---- wakes ----

func insertWake(ctx context.Context, q querier, w store.Wake) error {
	if _, err := q.ExecContext(ctx, `INSERT INTO wakes (id, principal, task_id, activation, state, attempts, detail,
		lease_owner, lease_until, due_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		w.ID, w.Principal, w.TaskID, w.Activation, string(w.State), w.Attempts, w.Detail,
		w.LeaseOwner, micros(w.LeaseUntil), micros(w.DueAt), micros(w.CreatedAt), micros(w.UpdatedAt)); err != nil {
		return fmt.Errorf("insert wake %s: %w", w.ID, err)
	}
	return nil
}

func updateWake(ctx context.Context, q querier, w store.Wake) error {
	res, err := q.ExecContext(ctx, `UPDATE wakes SET state = ?, attempts = ?, updated_at = ?, detail = ? WHERE principal = ? AND id = ?`,
		string(w.State), w.Attempts, micros(w.UpdatedAt), w.Detail, w.Principal, w.ID)
	return affectedOne(res, err, "update wake", "wake", w.ID)
}

func listWakes(ctx context.Context, q querier, state store.WakeState, limit int) ([]store.Wake, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+wakeCols+`
		FROM wakes WHERE state = ? ORDER BY created_at, seq LIMIT ?`, string(state), limitArg(limit))
	return collectWakes(rows, err, "list wakes")
}

// ---- retention ----

// pruneTasksSQL selects up to ?(n+2) terminal tasks (states ?2..?(n+1)) unchanged since before ?1
// in contexts idle since before ?1, none with a wake still pending or active. Contexts first, by
// age, then their tasks: SQLite's own choice (tasks by state, all the finished ones, then a sort)
// took 10 s per batch on a store of 200,000 tasks, inside the writer's transaction; this order
// takes milliseconds, and nothing when nothing is old (TestRetentionAndListingQueriesUseTheirIndexes).
func pruneTasksSQL(n int) string {
	return `SELECT t.principal, t.id FROM contexts c
		CROSS JOIN tasks t INDEXED BY tasks_context ON c.principal = t.principal AND c.id = t.context_id
		WHERE c.last_event_at < ?1 AND t.updated_at < ?1 AND t.state IN (` + placeholders(n) + `)
		AND NOT EXISTS (SELECT 1 FROM wakes w WHERE w.principal = t.principal AND w.task_id = t.id
			AND w.state IN ('pending', 'active'))
		ORDER BY c.last_event_at, t.principal, t.id LIMIT ?`
}

// pruneTaskClaimsSQL deletes the done claims of one task (?1 principal, ?2 task) by their partial
// index (SQLite's own choice read every claim of the principal).
const pruneTaskClaimsSQL = `DELETE FROM claims INDEXED BY claims_done_task
	WHERE principal = ? AND task_id = ? AND state = 'done' AND task_id != ''`

// pruneUntaskedClaimsSQL deletes up to ?3 done claims of no task (direct Messages) older than ?1
// whose context is not recent (?2, the same cutoff). A task's claims go with the task.
const pruneUntaskedClaimsSQL = `DELETE FROM claims WHERE (principal, source, identity) IN (
	SELECT q.principal, q.source, q.identity FROM claims q INDEXED BY claims_done_untasked
	WHERE q.state = 'done' AND q.task_id = '' AND q.updated_at < ?
		AND NOT EXISTS (SELECT 1 FROM contexts c
			WHERE c.principal = q.principal AND c.id = q.context_id AND c.last_event_at >= ?)
	LIMIT ?)`

func prune(ctx context.Context, q querier, cutoff time.Time, terminal []string, limit int) (store.PruneResult, error) {
	var res store.PruneResult
	c := micros(cutoff)
	lim := limitArg(limit)

	if len(terminal) > 0 {
		args := []any{c}
		for _, s := range terminal {
			args = append(args, s)
		}
		args = append(args, lim)
		rows, err := q.QueryContext(ctx, pruneTasksSQL(len(terminal)), args...)
		if err != nil {
			return res, fmt.Errorf("prune: select tasks: %w", err)
		}
		type key struct{ principal, id string }
		var victims []key
		for rows.Next() {
			var k key
			if err := rows.Scan(&k.principal, &k.id); err != nil {
				rows.Close()
				return res, fmt.Errorf("prune: select tasks: %w", err)
			}
			victims = append(victims, k)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return res, fmt.Errorf("prune: select tasks: %w", err)
		}
		for _, k := range victims {
			for _, d := range []struct {
				sql   string
				count *int
			}{
				{`DELETE FROM task_events WHERE principal = ? AND task_id = ?`, &res.Events},
				{`DELETE FROM anchors WHERE principal = ? AND task_id = ?`, &res.Anchors},
				{pruneTaskClaimsSQL, &res.Claims},
				{`DELETE FROM wakes WHERE principal = ? AND task_id = ?`, &res.Wakes},
				{`DELETE FROM push_configs WHERE principal = ? AND task_id = ?`, &res.PushConfigs},
				{`DELETE FROM tasks WHERE principal = ? AND id = ?`, &res.Tasks},
			} {
				r, err := q.ExecContext(ctx, d.sql, k.principal, k.id)
				if err != nil {
					return res, fmt.Errorf("prune task %s: %w", k.id, err)
				}
				n, err := r.RowsAffected()
				if err != nil {
					return res, fmt.Errorf("prune task %s: %w", k.id, err)
				}
				*d.count += int(n)
			}
		}
	}

	// A done claim lives as long as its task (a redelivered event must find the prior result for
	// as long as the task lives): it went with the task above. A claim of no task (a direct
	// Message) goes once it is older than the cutoff, unless its context is still recent.
	r, err := q.ExecContext(ctx, pruneUntaskedClaimsSQL, c, c, lim)
	if err != nil {
		return res, fmt.Errorf("prune claims: %w", err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return res, fmt.Errorf("prune claims: %w", err)
	}
	res.Claims += int(n)

	r, err = q.ExecContext(ctx, `DELETE FROM contexts WHERE (principal, id) IN (
		SELECT c.principal, c.id FROM contexts c
		WHERE c.last_event_at < ?
			AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.principal = c.principal AND t.context_id = c.id)
			AND NOT EXISTS (SELECT 1 FROM claims q
				WHERE q.principal = c.principal AND q.context_id = c.id AND q.state = 'pending')
		LIMIT ?)`, c, lim)
	if err != nil {
		return res, fmt.Errorf("prune contexts: %w", err)
	}
	n, err = r.RowsAffected()
	if err != nil {
		return res, fmt.Errorf("prune contexts: %w", err)
	}
	res.Contexts = int(n)
	return res, nil
}
