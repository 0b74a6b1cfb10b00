// Command sqlite measures the ceiling of SQLite acceptances on a machine: the rows one acceptance
// of `channels bench accept` writes (its task, the task's first event, the evidence, the wake,
// the claim, and the context's activity), written on the store's own schema through the modernc
// driver the store uses, by one writer, in transactions of --group acceptances, and nothing else:
// no plane, no digest, no JSON, no concurrency. Each group also settles the previous group's
// wakes, as the bench's wake drainer does; with --turns, it also writes their tasks' turn results
// (each task COMPLETED, with a second event), the second commit of a blocking A2A send.
//
// Two forms: "rows" runs each acceptance's statements one by one, as any acceptance that decides
// what to write from what it reads must; "multi" writes a whole group with one multi-row INSERT
// per table (and one read of the claims, one of the contexts), the cheapest form those rows can
// take. Each run prints a JSON line with the acceptances per second and an fsync probe of the
// same directory taken before and after it.
//
//	go run ./scripts/writeceiling/sqlite --groups 16,32,64 --forms rows,multi
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/channels-dev/channels/internal/fsyncprobe"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/sqlite" // the store's schema (its migrations) and pragmas
)

type options struct {
	dir                  string
	events               int
	probe                time.Duration
	body, event, details int
	turns                bool
}

type result struct {
	Form          string  `json:"form"`
	Turns         bool    `json:"turns,omitempty"`
	Group         int     `json:"group"`
	Events        int     `json:"events"`
	AcceptsPerSec float64 `json:"accepts_per_sec"`
	FsyncsPerSec  float64 `json:"fsyncs_per_sec"`
	Ratio         float64 `json:"ratio"`
}

func main() {
	var (
		o             options
		groups, forms string
		sizes         []int
		formsWanted   []string
	)
	flag.StringVar(&o.dir, "dir", os.TempDir(), "directory for the databases (the store's filesystem)")
	flag.IntVar(&o.events, "events", 20000, "acceptances per run")
	flag.StringVar(&groups, "groups", "16,32,64", "acceptances per transaction, one run each")
	flag.StringVar(&forms, "forms", "rows,multi", "rows (statement by statement) and/or multi (multi-row inserts)")
	flag.DurationVar(&o.probe, "probe", time.Second, "fsync probe before and after each run")
	flag.IntVar(&o.body, "task-bytes", 678, "bytes of a task's body (a bench accept chat message's task)")
	flag.IntVar(&o.event, "event-bytes", 765, "bytes of the task's first event")
	flag.IntVar(&o.details, "evidence-bytes", 85, "bytes of the evidence detail")
	flag.BoolVar(&o.turns, "turns", false, "also write each task's turn result (its row and a second event) in the next group, as a blocking send's second commit does")
	flag.Parse()
	for g := range strings.SplitSeq(groups, ",") {
		n, err := strconv.Atoi(g)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "writeceiling: bad group %q\n", g)
			os.Exit(2)
		}
		sizes = append(sizes, n)
	}
	for f := range strings.SplitSeq(forms, ",") {
		if f != "rows" && f != "multi" {
			fmt.Fprintf(os.Stderr, "writeceiling: bad form %q (rows or multi)\n", f)
			os.Exit(2)
		}
		formsWanted = append(formsWanted, f)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, g := range sizes {
		for _, f := range formsWanted {
			r, err := run(context.Background(), o, f, g)
			if err != nil {
				fmt.Fprintln(os.Stderr, "writeceiling:", err)
				os.Exit(1)
			}
			_ = enc.Encode(r)
		}
	}
}

// run makes a fresh database with the store's schema and writes o.events acceptances into it.
func run(ctx context.Context, o options, form string, group int) (result, error) {
	dir, err := os.MkdirTemp(o.dir, "writeceiling-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ceiling.db")
	st, err := store.Open(ctx, store.SQLiteURL(path))
	if err != nil {
		return result{}, err
	}
	if err := st.Close(); err != nil {
		return result{}, err
	}
	db, err := sql.Open("sqlite", sqlite.WriterDSN(path)) // the store writer's pragmas
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return result{}, err
	}
	defer conn.Close()

	w := &writer{conn: conn, o: o, run: uuid.NewString()[:8]}
	if err := w.contexts(ctx); err != nil {
		return result{}, err
	}
	before, err := fsyncprobe.Run(dir, o.probe)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	var prev []acceptance
	for base := 0; base < o.events; base += group {
		n := min(group, o.events-base)
		if prev, err = w.group(ctx, form, base, n, prev); err != nil {
			return result{}, err
		}
	}
	elapsed := time.Since(start)
	after, err := fsyncprobe.Run(dir, o.probe)
	if err != nil {
		return result{}, err
	}
	rate := float64(o.events) / elapsed.Seconds()
	fsyncs := (before + after) / 2
	return result{Form: form, Turns: o.turns, Group: group, Events: o.events, AcceptsPerSec: round(rate),
		FsyncsPerSec: round(fsyncs), Ratio: round(rate/fsyncs*100) / 100}, nil
}

func round(f float64) float64 { return float64(int64(f + 0.5)) }

// conversations is the number of conversations the acceptances share, as bench accept's default.
const conversations = 16

type writer struct {
	conn *sql.Conn
	o    options
	run  string
}

func (w *writer) contexts(ctx context.Context) error {
	for c := range conversations {
		if _, err := w.conn.ExecContext(ctx, `INSERT INTO contexts (principal, id, source,
			conversation_key, created_at, last_event_at) VALUES ('bench', ?, 'bench', ?, 0, 0)`,
			uuid.Must(uuid.NewV7()).String(), w.key(c)); err != nil {
			return fmt.Errorf("contexts: %w", err)
		}
	}
	return nil
}

func (w *writer) key(c int) string { return fmt.Sprintf("%s-conv-%d", w.run, c) }

// acceptance is the rows of one acceptance.
type acceptance struct {
	identity, task, wake, conv string
}

func (w *writer) acceptance(i int) acceptance {
	return acceptance{identity: fmt.Sprintf("%s-Ev%08d", w.run, i), task: uuid.Must(uuid.NewV7()).String(),
		wake: uuid.Must(uuid.NewV7()).String(), conv: w.key(i % conversations)}
}

const digest = "v3:efc62ff7dc1bc0f24f27c66e612b8116f6ea3fa02a4e0a6ac2fe6c25fb533072"

// group writes acceptances base..base+n-1 in one transaction, with the wakes of prev marked done
// (and, with --turns, prev's tasks completed), and returns the new acceptances.
func (w *writer) group(ctx context.Context, form string, base, n int, prev []acceptance) ([]acceptance, error) {
	tx, err := w.conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	now := time.Now().UnixMicro()
	body, event, detail := make([]byte, w.o.body), make([]byte, w.o.event), make([]byte, w.o.details)
	accs := make([]acceptance, n)
	for i := range accs {
		accs[i] = w.acceptance(base + i)
	}
	if form == "rows" {
		err = w.rows(ctx, tx, accs, prev, now, body, event, detail)
	} else {
		err = w.multi(ctx, tx, accs, prev, now, body, event, detail)
	}
	if err != nil {
		return nil, err
	}
	return accs, tx.Commit()
}

func (w *writer) rows(ctx context.Context, tx *sql.Tx, accs, prev []acceptance, now int64, body, event, detail []byte) error {
	for _, a := range accs {
		var d, ctxID string
		if err := tx.QueryRowContext(ctx, `SELECT digest FROM claims WHERE principal = 'bench'
			AND source = 'bench' AND identity = ?`, a.identity).Scan(&d); !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("claim read: want no claim, got %v", err)
		}
		if err := tx.QueryRowContext(ctx, `SELECT id FROM contexts WHERE principal = 'bench'
			AND source = 'bench' AND conversation_key = ?`, a.conv).Scan(&ctxID); err != nil {
			return fmt.Errorf("context read: %w", err)
		}
		for _, s := range []struct {
			sql  string
			args []any
		}{
			{`UPDATE contexts SET last_event_at = ? WHERE principal = 'bench' AND id = ?`, []any{now, ctxID}},
			{`INSERT INTO tasks (principal, id, context_id, source, state, status_time, version, last_seq,
				body, created_at, updated_at) VALUES ('bench', ?, ?, 'bench', 'submitted', ?, 1, 1, ?, ?, ?)`,
				[]any{a.task, ctxID, now, body, now, now}},
			{`INSERT INTO task_events (principal, task_id, seq, kind, payload, created_at)
				VALUES ('bench', ?, 1, 'task', ?, ?)`, []any{a.task, event, now}},
			{`INSERT INTO evidence (principal, source, kind, task_id, detail, created_at)
				VALUES ('bench', 'bench', 'accepted', ?, ?, ?)`, []any{a.task, detail, now}},
			{`INSERT INTO wakes (id, principal, task_id, activation, state, created_at, updated_at)
				VALUES (?, 'bench', ?, 1, 'pending', ?, ?)`, []any{a.wake, a.task, now, now}},
			{`INSERT INTO claims (principal, source, identity, digest, state, outcome_kind, task_id,
				context_id, created_at, updated_at) VALUES ('bench', 'bench', ?, ?, 'done', 'task', ?, ?, ?, ?)`,
				[]any{a.identity, digest, a.task, ctxID, now, now}},
		} {
			if _, err := tx.ExecContext(ctx, s.sql, s.args...); err != nil {
				return err
			}
		}
	}
	for _, a := range prev {
		if _, err := tx.ExecContext(ctx, `UPDATE wakes SET state = 'done', updated_at = ?
			WHERE principal = 'bench' AND id = ?`, now, a.wake); err != nil {
			return err
		}
		if !w.o.turns {
			continue
		}
		if _, err := tx.ExecContext(ctx, `UPDATE tasks SET state = 'completed', status_time = ?,
			version = 2, last_seq = 2, body = ?, updated_at = ? WHERE principal = 'bench' AND id = ?`,
			now, body, now, a.task); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO task_events (principal, task_id, seq, kind,
			payload, created_at) VALUES ('bench', ?, 2, 'status', ?, ?)`, a.task, event, now); err != nil {
			return err
		}
	}
	return nil
}

func (w *writer) multi(ctx context.Context, tx *sql.Tx, accs, prev []acceptance, now int64, body, event, detail []byte) error {
	n := len(accs)
	ids := make([]any, n)
	for i, a := range accs {
		ids[i] = a.identity
	}
	rows, err := tx.QueryContext(ctx, `SELECT digest FROM claims WHERE principal = 'bench'
		AND source = 'bench' AND identity IN `+tuple(n), ids...)
	if err != nil {
		return err
	}
	rows.Close()
	contexts := map[string]string{}
	rows, err = tx.QueryContext(ctx, `SELECT conversation_key, id FROM contexts
		WHERE principal = 'bench' AND source = 'bench'`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var k, id string
		if err := rows.Scan(&k, &id); err != nil {
			return err
		}
		contexts[k] = id
	}
	rows.Close()
	if _, err := tx.ExecContext(ctx, `UPDATE contexts SET last_event_at = ? WHERE principal = 'bench'`, now); err != nil {
		return err
	}
	var tasks, events, evidence, wakes, claims []any
	for _, a := range accs {
		c := contexts[a.conv]
		tasks = append(tasks, "bench", a.task, c, "bench", "submitted", now, 1, 1, body, now, now)
		events = append(events, "bench", a.task, 1, "task", event, now)
		evidence = append(evidence, "bench", "bench", "accepted", a.task, detail, now)
		wakes = append(wakes, a.wake, "bench", a.task, 1, "pending", now, now)
		claims = append(claims, "bench", "bench", a.identity, digest, "done", "task", a.task, c, now, now)
	}
	for _, s := range []struct {
		head string
		cols int
		args []any
	}{
		{"INSERT INTO tasks (principal, id, context_id, source, state, status_time, version, last_seq, body, created_at, updated_at)", 11, tasks},
		{"INSERT INTO task_events (principal, task_id, seq, kind, payload, created_at)", 6, events},
		{"INSERT INTO evidence (principal, source, kind, task_id, detail, created_at)", 6, evidence},
		{"INSERT INTO wakes (id, principal, task_id, activation, state, created_at, updated_at)", 7, wakes},
		{"INSERT INTO claims (principal, source, identity, digest, state, outcome_kind, task_id, context_id, created_at, updated_at)", 10, claims},
	} {
		values := make([]string, n)
		for i := range values {
			values[i] = tuple(s.cols)
		}
		if _, err := tx.ExecContext(ctx, s.head+" VALUES "+strings.Join(values, ", "), s.args...); err != nil {
			return err
		}
	}
	if len(prev) == 0 {
		return nil
	}
	wakeArgs, taskArgs, eventArgs := []any{now}, []any{now, body, now}, []any{}
	for _, a := range prev {
		wakeArgs = append(wakeArgs, a.wake)
		taskArgs = append(taskArgs, a.task)
		eventArgs = append(eventArgs, "bench", a.task, 2, "status", event, now)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE wakes SET state = 'done', updated_at = ?
		WHERE principal = 'bench' AND id IN `+tuple(len(prev)), wakeArgs...); err != nil {
		return err
	}
	if !w.o.turns {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE tasks SET state = 'completed', status_time = ?, version = 2,
		last_seq = 2, body = ?, updated_at = ? WHERE principal = 'bench' AND id IN `+tuple(len(prev)), taskArgs...); err != nil {
		return err
	}
	values := make([]string, len(prev))
	for i := range values {
		values[i] = tuple(6)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO task_events (principal, task_id, seq, kind, payload, created_at)
		VALUES `+strings.Join(values, ", "), eventArgs...)
	return err
}

// tuple is "(?, ?, …)" with n placeholders.
func tuple(n int) string { return "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")" }
