package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/channels-dev/channels/taskplane/store"
)

// tx implements store.Tx on one pgx transaction. Like pgx.Tx it must not be used from several
// goroutines at once, and only while the Update callback runs.
type tx struct {
	reader
	s *Store
	p *pipe // the reader's querier: writes with no result are held back on it (later)
	// hints are the "principal/taskID" payloads of the tasks this transaction appended events to;
	// Update sends them right after the commit (see notifySQL).
	hints []string
	pre   prefetched // what PrefetchAcceptance read, until used
}

// prefetched holds the reads of PrefetchAcceptance for the GetClaim and EnsureContext calls of
// the same keys that follow in the fn; each is used once.
type prefetched struct {
	claimKey, ctxKey [3]string
	claimSet, ctxSet bool
	claim            store.Claim
	claimErr         error     // the claim's read: nil, or wrapping ErrNotFound
	ctxID            string    // "" when the conversation had no context
	ctxLast          time.Time // its last activity
}

// contextByKeySQL reads a conversation's context, locked against a concurrent Prune (see
// EnsureContext).
const contextByKeySQL = `SELECT id, last_event_at FROM contexts WHERE principal = $1 AND source = $2 AND conversation_key = $3
	FOR KEY SHARE`

// PrefetchAcceptance reads the claim and the conversation's context in one round trip (with the
// writes held back so far); the GetClaim and EnsureContext calls that follow for these keys take
// the results.
func (t *tx) PrefetchAcceptance(ctx context.Context, principal, source, identity, conversationKey string) error {
	br, err := t.p.batch(ctx, func(b *pgx.Batch) {
		b.Queue(claimByKeySQL, principal, source, identity)
		b.Queue(contextByKeySQL, principal, source, conversationKey)
	})
	if err != nil {
		return err
	}
	pre := prefetched{claimKey: [3]string{principal, source, identity}, ctxKey: [3]string{principal, source, conversationKey},
		claimSet: true, ctxSet: true}
	rows, _ := br.Query()
	if pre.claim, pre.claimErr = collectClaim(rows); pre.claimErr != nil && !errors.Is(pre.claimErr, store.ErrNotFound) {
		br.Close()
		return pre.claimErr
	}
	err = br.QueryRow().Scan(&pre.ctxID, &pre.ctxLast)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		br.Close()
		return fmt.Errorf("ensure context: %w", err)
	}
	if err := br.Close(); err != nil {
		return err
	}
	t.pre = pre
	return nil
}

// GetClaim takes the claim PrefetchAcceptance read for this key, once; otherwise it reads.
func (t *tx) GetClaim(ctx context.Context, principal, source, identity string) (store.Claim, error) {
	if t.pre.claimSet && t.pre.claimKey == [3]string{principal, source, identity} {
		t.pre.claimSet = false
		return t.pre.claim, t.pre.claimErr
	}
	return t.reader.GetClaim(ctx, principal, source, identity)
}

var _ store.Tx = (*tx)(nil)

// maxLookups bounds the insert-or-read loops below: the row that made an insert conflict can be
// pruned before the read, which only a concurrent Prune does, and rarely.
const maxLookups = 3

func (t *tx) DeleteClaim(ctx context.Context, principal, source, identity, taskID string) (bool, error) {
	tag, err := t.q.Exec(ctx, `DELETE FROM claims WHERE principal = $1 AND source = $2 AND identity = $3 AND task_id = $4`,
		principal, source, identity, taskID)
	if err != nil {
		return false, fmt.Errorf("delete claim: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

func (t *tx) InsertClaim(ctx context.Context, c store.Claim) (store.Claim, bool, error) {
	for range maxLookups {
		// On a conflict with a concurrent uncommitted claim the insert waits for that transaction,
		// then does nothing if it committed; the read that follows is a new statement, so in READ
		// COMMITTED it sees the committed claim.
		tag, err := t.q.Exec(ctx, insertClaimSQL, claimArgs(c)...)
		if err != nil {
			return store.Claim{}, false, fmt.Errorf("insert claim: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return c, true, nil
		}
		existing, err := t.GetClaim(ctx, c.Principal, c.Source, c.Identity)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return store.Claim{}, false, fmt.Errorf("insert claim: %w", err)
		}
		return existing, false, nil
	}
	return store.Claim{}, false, fmt.Errorf("insert claim: conflicting claim vanished %d times", maxLookups)
}

// InsertNewClaim holds the insert back (see pipe); a claim of the identity that exists by the time
// it runs fails it on the server, so the transaction (or the fn's savepoint) is rolled back.
func (t *tx) InsertNewClaim(ctx context.Context, c store.Claim) error {
	t.p.later("insert claim", mustTouch(insertClaimSQL+` RETURNING 1`),
		func(err error) error {
			if errors.Is(notTouched(err), store.ErrNotFound) {
				return store.ClaimTaken(c)
			}
			return err
		},
		claimArgs(c)...)
	return nil
}

// insertClaimSQL inserts a claim (claimArgs) unless one of its identity exists.
const insertClaimSQL = `INSERT INTO claims (` + claimColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
	ON CONFLICT (principal, source, identity) DO NOTHING`

// claimArgs are c's values in the order of claimColumns.
func claimArgs(c store.Claim) []any {
	return []any{c.Principal, c.Source, c.Identity, c.Digest, string(c.State), c.OutcomeKind, c.TaskID, c.ContextID,
		c.Message, c.CreatedAt, c.UpdatedAt}
}

func (t *tx) EnsureContext(ctx context.Context, principal, source, conversationKey, candidateID string, now time.Time) (string, error) {
	if conversationKey == "" {
		// Every keyless call would create a context; that is InsertContext's job, said explicitly.
		return "", errors.New("ensure context: empty conversation key")
	}
	for range maxLookups {
		// The conversation's context usually exists: read it first, one round trip (none when
		// PrefetchAcceptance read it). FOR KEY SHARE keeps a concurrent Prune from deleting it under
		// this transaction; if a Prune deleted it first, the read waits for it and finds nothing.
		var (
			id   string
			last time.Time
			err  error
		)
		if t.pre.ctxSet && t.pre.ctxKey == [3]string{principal, source, conversationKey} {
			t.pre.ctxSet = false
			id, last = t.pre.ctxID, t.pre.ctxLast
			if id == "" {
				err = pgx.ErrNoRows
			}
		} else {
			err = t.q.QueryRow(ctx, contextByKeySQL, principal, source, conversationKey).Scan(&id, &last)
		}
		if err == nil {
			if !last.Before(now.Add(-store.TouchGranularity)) {
				return id, nil // recent enough: the touch would change nothing (see TouchContext)
			}
			return id, t.TouchContext(ctx, principal, id, now) // the event's activity, as the contract says
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return "", fmt.Errorf("ensure context: %w", err)
		}
		// Same shape as InsertClaim: a concurrent creator of the same conversation makes the insert
		// wait; if it committed, the insert does nothing and the next read, a new statement, sees
		// its id, so every caller gets one id.
		err = t.q.QueryRow(ctx, `INSERT INTO contexts (principal, id, source, conversation_key, created_at, last_event_at)
			VALUES ($1, $2, $3, $4, $5, $5)
			ON CONFLICT (principal, source, conversation_key) WHERE conversation_key <> '' DO NOTHING
			RETURNING id`, principal, candidateID, source, conversationKey, now).Scan(&id)
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return "", fmt.Errorf("ensure context: %w", err)
		}
	}
	return "", fmt.Errorf("ensure context: conflicting context vanished %d times", maxLookups)
}

// GetContext reads a context FOR KEY SHARE: a Prune deleting it (uncommitted) makes the read wait
// and find nothing, and one that comes later skips it (SKIP LOCKED) until this transaction ends,
// so a task put in the context never outlives it.
func (t *tx) GetContext(ctx context.Context, principal, contextID string) (store.Context, error) {
	return t.reader.getContext(ctx, principal, contextID, " FOR KEY SHARE")
}

func (t *tx) InsertContext(ctx context.Context, c store.Context) error {
	t.p.later("insert context", `INSERT INTO contexts (principal, id, source, conversation_key, created_at, last_event_at)
		VALUES ($1, $2, $3, $4, $5, $6)`, takenFirst, c.Principal, c.ID, c.Source, c.ConversationKey, c.CreatedAt, c.LastEventAt)
	return nil
}

func (t *tx) TouchContext(ctx context.Context, principal, contextID string, at time.Time) error {
	// Every event of a conversation touches its context. Updating the row each time would make
	// the acceptances of one conversation queue behind each other's row lock until commit, so the
	// update happens only when the stored time is more than store.TouchGranularity older: the
	// UPDATE's condition is checked on the snapshot first, and a row it skips is never locked.
	// It still never moves activity backwards.
	// The count of the context's rows, 0 or 1, divides: a missing context fails on the server.
	t.p.later("touch context", `WITH touched AS (
			UPDATE contexts SET last_event_at = $3
			WHERE principal = $1 AND id = $2 AND last_event_at < $4
			RETURNING 1)
		SELECT 1 / (SELECT count(*)::int FROM contexts WHERE principal = $1 AND id = $2)`, notTouched,
		principal, contextID, at, at.Add(-store.TouchGranularity))
	return nil
}

func (t *tx) InsertTask(ctx context.Context, task store.Task) error {
	t.p.later("insert task", `INSERT INTO tasks (`+taskColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, nil,
		task.Principal, task.ID, task.ContextID, task.Source, task.State, task.StatusTime, task.Version, task.LastSeq,
		task.Body, task.CreatedAt, task.UpdatedAt)
	return nil
}

func (t *tx) UpdateTask(ctx context.Context, task store.Task, expectVersion int64) error {
	tag, err := t.q.Exec(ctx, `UPDATE tasks SET state = $3, status_time = $4, body = $5, updated_at = $6, last_seq = $8,
		version = version + 1 WHERE principal = $1 AND id = $2 AND version = $7`,
		task.Principal, task.ID, task.State, task.StatusTime, task.Body, task.UpdatedAt, expectVersion, task.LastSeq)
	if err != nil {
		return fmt.Errorf("update task: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var exists bool
	if err := t.q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tasks WHERE principal = $1 AND id = $2)`,
		task.Principal, task.ID).Scan(&exists); err != nil {
		return fmt.Errorf("update task: %w", err)
	}
	if !exists {
		return fmt.Errorf("update task: %w", store.ErrNotFound)
	}
	return fmt.Errorf("update task: %w", store.ErrConcurrentModification)
}

func (t *tx) AppendTaskEvent(ctx context.Context, principal, taskID string, seq int64, kind string, payload []byte, at time.Time) error {
	// The caller allocated seq from the task row it read and writes the row's new last_seq with
	// the version guard (see store.Tx), so the insert needs no answer and is pipelined. An insert
	// that meets another transaction's uncommitted event under the same seq waits for it, and
	// fails if it commits: the seqs of one task commit in order.
	t.p.later("append task event", `INSERT INTO task_events (principal, task_id, seq, kind, payload, created_at)
		VALUES ($1, $2, $3, $4, $5, $6)`, takenFirst, principal, taskID, seq, kind, payload, at)
	if t.s.features.notify {
		// A hint NOTIFY cannot carry (a principal of some 8,000 bytes) is not sent, so that it
		// does not fail the statement that sends every hint of the group: that task's followers
		// in other processes see its events at their periodic re-read, as after a lost hint.
		hint := principal + "/" + taskID
		if len(hint) < maxNotifyPayload && !slices.Contains(t.hints, hint) {
			t.hints = append(t.hints, hint)
		}
	}
	return nil
}

// takenFirst maps the unique violation of a row another writer inserted first (a task event's
// seq, a context's id) to ErrConcurrentModification.
func takenFirst(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		return store.ErrConcurrentModification
	}
	return err
}

// PutAnchor writes the anchor only if its task exists, and holds the task FOR KEY SHARE until the
// transaction ends: retention deletes anchors only with their tasks, so an anchor written for a
// task that a concurrent Prune deletes would stay for good. A Prune that deleted the task and has
// not committed makes the read wait and find nothing (not found); one that comes later skips the
// task (SKIP LOCKED) until this transaction ends.
func (t *tx) PutAnchor(ctx context.Context, a store.Anchor) error {
	rows, _ := t.q.Query(ctx, `WITH task AS (
			SELECT principal, id FROM tasks WHERE principal = $1 AND id = $4 FOR KEY SHARE)
		INSERT INTO anchors (principal, source, provider_id, task_id, input_seq, created_at)
		SELECT principal, $2, $3, id, $5, $6 FROM task
		ON CONFLICT (principal, source, provider_id) DO UPDATE
		SET task_id = excluded.task_id, input_seq = excluded.input_seq, created_at = excluded.created_at
		RETURNING 1`,
		a.Principal, a.Source, a.ProviderID, a.TaskID, a.InputSeq, a.CreatedAt)
	if _, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int32]); err != nil {
		return fmt.Errorf("put anchor: task %s: %w", a.TaskID, notFound(err))
	}
	return nil
}

func (t *tx) InsertEvidence(ctx context.Context, e store.Evidence) error {
	t.p.later("insert evidence", `INSERT INTO evidence (principal, source, kind, task_id, detail, created_at)
		VALUES ($1, $2, $3, $4, $5, $6)`, nil, e.Principal, e.Source, e.Kind, e.TaskID, e.Detail, e.CreatedAt)
	return nil
}

func (t *tx) InsertWake(ctx context.Context, w store.Wake) error {
	if w.State == store.WakePending {
		t.p.wakes.Add() // if the held write fails, so does the fn, and undo forgets the count
	}
	t.p.later("insert wake", `INSERT INTO wakes (principal, id, task_id, activation, state, attempts, detail,
		lease_owner, lease_until, due_at, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`, nil,
		w.Principal, w.ID, w.TaskID, w.Activation, string(w.State), w.Attempts, w.Detail,
		w.LeaseOwner, w.LeaseUntil, w.DueAt, w.CreatedAt, w.UpdatedAt)
	return nil
}

func (t *tx) UpdateWake(ctx context.Context, w store.Wake) error {
	t.p.wakes.Forget()
	t.p.later("update wake", mustTouch(`UPDATE wakes SET state = $3, attempts = $4, updated_at = $5, detail = $6
		WHERE principal = $1 AND id = $2 RETURNING 1`), notTouched,
		w.Principal, w.ID, string(w.State), w.Attempts, w.UpdatedAt, w.Detail)
	return nil
}

// adoptCheckpointSQL gives the checkpoint kept from before checkpoints were per instance to the
// instance ($3) that advances first and has none of its own. Of two transactions adopting it at
// once, the second waits for the first's row lock and then finds the row no longer under "".
const adoptCheckpointSQL = `UPDATE checkpoints SET instance = $3
	WHERE principal = $1 AND source = $2 AND instance = '' AND $3 <> ''
		AND NOT EXISTS (SELECT 1 FROM checkpoints WHERE principal = $1 AND source = $2 AND instance = $3)`

func (t *tx) AdvanceCheckpoint(ctx context.Context, c store.Checkpoint) (store.Checkpoint, error) {
	// Held back: it travels with the upsert, in the same round trip and before it.
	t.p.later("take over the old checkpoint", adoptCheckpointSQL, nil, c.Principal, c.Source, c.Instance)
	// The upsert's WHERE keeps a checkpoint from moving backwards; when it holds the stored row
	// back, the row is still locked, so the read below returns what this transaction will keep.
	rows, _ := t.q.Query(ctx, `INSERT INTO checkpoints (`+checkpointColumns+`) VALUES ($1, $2, $3, $4, $5, 1, $6)
		ON CONFLICT (principal, source, instance) DO UPDATE
		SET position = excluded.position, seq = excluded.seq, version = checkpoints.version + 1,
			updated_at = excluded.updated_at
		WHERE excluded.seq > checkpoints.seq
		RETURNING `+checkpointColumns, c.Principal, c.Source, c.Instance, c.Position, c.Seq, c.UpdatedAt)
	stored, err := pgx.CollectOneRow(rows, scanCheckpoint)
	if errors.Is(err, pgx.ErrNoRows) {
		stored, err = t.GetCheckpoint(ctx, c.Principal, c.Source, c.Instance)
	}
	if err != nil {
		return store.Checkpoint{}, fmt.Errorf("advance checkpoint: %w", err)
	}
	return stored, nil
}

// pruneTasksSQL deletes up to $3 terminal tasks unchanged since before $1 in contexts idle since
// before $1, none with a wake still pending or active (a result still to be handed off), and
// returns their keys; pruneDependentsSQL then deletes their events, anchors, wakes
// and push configs. SKIP LOCKED leaves tasks that a live transaction holds for a later run instead
// of waiting for it.
const pruneTasksSQL = `WITH victims AS (
		SELECT t.principal, t.id FROM tasks t
		JOIN contexts c ON c.principal = t.principal AND c.id = t.context_id
		WHERE c.last_event_at < $1 AND t.updated_at < $1 AND t.state = ANY($2)
		AND NOT EXISTS (SELECT 1 FROM wakes w WHERE w.principal = t.principal AND w.task_id = t.id
			AND w.state IN ('pending', 'active'))
		LIMIT $3
		FOR UPDATE OF t SKIP LOCKED
	)
	DELETE FROM tasks t USING victims v WHERE t.principal = v.principal AND t.id = v.id
	RETURNING t.principal, t.id`

// pruneDependentsSQL runs as a statement of its own, after pruneTasksSQL: its snapshot sees every
// anchor or push config committed before the tasks were locked, and a writer that comes later
// waits for the deleted task row and finds it gone. (In one statement with the tasks' delete, an
// anchor committed between the statement's snapshot and the task's lock was left behind for good.)
// The tasks' done claims go with them, found by task (claims_done_task).
const pruneDependentsSQL = `WITH dt AS (SELECT unnest($1::text[]) AS principal, unnest($2::text[]) AS id
	), dc AS (
		DELETE FROM claims c USING dt WHERE c.principal = dt.principal AND c.task_id = dt.id
			AND c.state = 'done' AND c.task_id <> '' RETURNING 1
	), de AS (
		DELETE FROM task_events e USING dt WHERE e.principal = dt.principal AND e.task_id = dt.id RETURNING 1
	), da AS (
		DELETE FROM anchors a USING dt WHERE a.principal = dt.principal AND a.task_id = dt.id RETURNING 1
	), dw AS (
		DELETE FROM wakes w USING dt WHERE w.principal = dt.principal AND w.task_id = dt.id RETURNING 1
	), dp AS (
		DELETE FROM push_configs p USING dt WHERE p.principal = dt.principal AND p.task_id = dt.id RETURNING 1
	)
	SELECT (SELECT count(*) FROM de), (SELECT count(*) FROM da), (SELECT count(*) FROM dw), (SELECT count(*) FROM dp),
		(SELECT count(*) FROM dc)`

// pruneClaimsSQL deletes up to $2 done claims of no task (direct Messages) older than $1 whose
// context (if they name one that exists) is idle since before $1. A task's claims go with the task
// (pruneDependentsSQL): this sweep used to look for claims of gone tasks among every old claim,
// hashing every task in each batch (365 ms at 200,000 tasks).
const pruneClaimsSQL = `DELETE FROM claims WHERE (principal, source, identity) IN (
		SELECT c.principal, c.source, c.identity FROM claims c
		WHERE c.state = 'done' AND c.task_id = '' AND c.updated_at < $1
		AND NOT EXISTS (SELECT 1 FROM contexts x
			WHERE x.principal = c.principal AND x.id = c.context_id AND x.last_event_at >= $1)
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	)`

// pruneContextsSQL deletes up to $2 contexts idle since before $1 that no task and no pending
// claim names. A transaction about to put a task in such a context holds its row (EnsureContext
// and GetContext read it FOR KEY SHARE, TouchContext updates it), so SKIP LOCKED leaves it alone.
const pruneContextsSQL = `DELETE FROM contexts WHERE (principal, id) IN (
		SELECT c.principal, c.id FROM contexts c
		WHERE c.last_event_at < $1
		AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.principal = c.principal AND t.context_id = c.id)
		AND NOT EXISTS (SELECT 1 FROM claims cl
			WHERE cl.principal = c.principal AND cl.context_id = c.id AND cl.state = 'pending')
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	) AND last_event_at < $1`

// collectKeys reads rows of (principal, id), as a statement deleting rows returns them, into two
// slices a later statement takes as arrays (unnest).
func collectKeys(rows pgx.Rows) (principals, ids []string, err error) {
	var p, id string
	_, err = pgx.ForEachRow(rows, []any{&p, &id}, func() error {
		principals, ids = append(principals, p), append(ids, id)
		return nil
	})
	return principals, ids, err
}

// Prune deletes old terminal work as store.Tx specifies. limit bounds each kind it deletes (tasks,
// claims, contexts) per call; 0 means no limit.
func (t *tx) Prune(ctx context.Context, cutoff time.Time, terminal []string, limit int) (store.PruneResult, error) {
	t.p.wakes.Forget()
	var res store.PruneResult
	var lim *int // NULL: no limit
	if limit > 0 {
		lim = &limit
	}
	if terminal == nil {
		terminal = []string{}
	}
	rows, _ := t.q.Query(ctx, pruneTasksSQL, cutoff, terminal, lim)
	ps, ids, err := collectKeys(rows)
	if err != nil {
		return store.PruneResult{}, fmt.Errorf("prune tasks: %w", err)
	}
	res.Tasks = len(ids)
	if len(ids) > 0 {
		if err := t.q.QueryRow(ctx, pruneDependentsSQL, ps, ids).
			Scan(&res.Events, &res.Anchors, &res.Wakes, &res.PushConfigs, &res.Claims); err != nil {
			return store.PruneResult{}, fmt.Errorf("prune tasks: %w", err)
		}
	}
	tag, err := t.q.Exec(ctx, pruneClaimsSQL, cutoff, lim)
	if err != nil {
		return store.PruneResult{}, fmt.Errorf("prune claims: %w", err)
	}
	res.Claims += int(tag.RowsAffected())
	tag, err = t.q.Exec(ctx, pruneContextsSQL, cutoff, lim)
	if err != nil {
		return store.PruneResult{}, fmt.Errorf("prune contexts: %w", err)
	}
	res.Contexts = int(tag.RowsAffected())
	return res, nil
}
