package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/internal/wakecount"
)

// pipe is the querier of one Update: a connection in an explicit READ COMMITTED transaction whose
// result-free writes (see later) are held back and sent, pipelined, with the next statement that
// returns something or with the COMMIT. A round trip to the server then carries several
// statements; an acceptance takes about five instead of a dozen. BEGIN itself travels with the
// first statement, and an Update that ran no statement sends nothing at all.
//
// A held-back write's error surfaces from the call that sends it (a later read, or Commit), still
// wrapping the driver's error; a fn returns the errors it gets, so the transaction is rolled back
// either way (see store.Store.Update).
type pipe struct {
	conn *pgx.Conn
	// run, when set, is the context the statements run on, whatever context a caller passes
	// (group commit: one caller's cancellation must not cut a statement of the shared
	// transaction). A caller's context is still checked before its statements are sent.
	run     context.Context
	begun   bool // BEGIN has been sent
	pending []heldWrite
	// The savepoint of the running fn (group commit): its place in pending until sent.
	marked, markSent bool
	mark             int
	// wakes counts the transaction's pending wakes for the admission bound, read once per
	// transaction (a group of acceptances) and followed through its own inserts; forgotten at
	// any other change to the wakes and when a savepoint is rolled back. Other transactions'
	// commits meanwhile are not seen, as a count read inside a READ COMMITTED transaction does not
	// see those still running: the bound is approximate by the wakes of the transactions in
	// flight, at most the committers' groups.
	wakes wakecount.Pending
}

// heldWrite is a write waiting in a pipe.
type heldWrite struct {
	sql  string
	args []any
	// check maps the write's error (nil: the error as it is); what it returns wraps into the
	// error of the call that sent the write. A write that must touch a row checks that on the
	// server (see mustTouch), so a failed check aborts the transaction before any COMMIT that
	// follows it in the pipeline can run.
	check func(error) error
	what  string // names the write in errors
}

var _ querier = (*pipe)(nil)

const beginSQL = "BEGIN ISOLATION LEVEL READ COMMITTED"

// later holds a write back until the next statement that returns something, or Commit.
func (p *pipe) later(what, sql string, check func(error) error, args ...any) {
	p.pending = append(p.pending, heldWrite{sql: sql, args: args, check: check, what: what})
}

// io returns the context to run a caller's statement on, or the caller's error.
func (p *pipe) io(ctx context.Context) (context.Context, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if p.run != nil {
		return p.run, nil
	}
	return ctx, nil
}

// savepoint holds back "SAVEPOINT fn": the start of the next fn's writes.
func (p *pipe) savepoint() {
	p.marked, p.markSent, p.mark = true, false, len(p.pending)
	p.later("savepoint", "SAVEPOINT fn", nil)
}

// undo rolls the transaction back to the savepoint of the running fn, dropping the fn's
// held-back writes; when none of the fn's statements reached the server, there is nothing to
// roll back.
func (p *pipe) undo() error {
	p.wakes.Forget() // the fn's wakes are rolled back with it
	if !p.marked {
		return errors.New("postgres: no savepoint to roll back to")
	}
	p.marked = false
	if !p.markSent {
		p.pending = p.pending[:p.mark]
		return nil
	}
	p.pending = p.pending[:0]
	if _, err := p.conn.Exec(p.run, "ROLLBACK TO SAVEPOINT fn"); err != nil {
		return err
	}
	p.later("release", "RELEASE SAVEPOINT fn", nil)
	return nil
}

// send queues BEGIN (once) and the held-back writes on b, ahead of whatever the caller adds, and
// returns how many results precede the caller's.
func (p *pipe) send(b *pgx.Batch) int {
	n := 0
	if !p.begun {
		b.Queue(beginSQL)
		n++
	}
	for _, w := range p.pending {
		b.Queue(w.sql, w.args...)
	}
	return n + len(p.pending)
}

// settle reads the results of what send queued, in order, and returns the first failure.
func (p *pipe) settle(br pgx.BatchResults) error {
	var first error
	if !p.begun {
		if _, err := br.Exec(); err != nil {
			first = fmt.Errorf("begin: %w", err)
		}
		p.begun = true
	}
	for _, w := range p.pending {
		_, err := br.Exec()
		if err != nil && w.check != nil {
			err = w.check(err)
		}
		if err != nil && first == nil {
			first = fmt.Errorf("%s: %w", w.what, err)
		}
	}
	p.pending = p.pending[:0]
	p.markSent = p.markSent || p.marked
	return first
}

// direct reports whether a statement can go out on its own: the transaction is open and nothing
// is held back.
func (p *pipe) direct() bool { return p.begun && len(p.pending) == 0 }

// sendWith sends the held-back writes (and BEGIN, once) with one more statement, reads their
// results, and returns the batch positioned at that statement's result; the caller closes it.
func (p *pipe) sendWith(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	return p.batch(ctx, func(b *pgx.Batch) { b.Queue(sql, args...) })
}

// batch sends the held-back writes (and BEGIN, once) with the statements queue adds, in one round
// trip, reads the writes' results, and returns the batch positioned at the first added statement's
// result; the caller reads one result per statement it added, then closes it.
func (p *pipe) batch(ctx context.Context, queue func(b *pgx.Batch)) (pgx.BatchResults, error) {
	ctx, err := p.io(ctx)
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	p.send(b)
	queue(b)
	br := p.conn.SendBatch(ctx, b)
	if err := p.settle(br); err != nil {
		br.Close()
		return nil, err
	}
	return br, nil
}

func (p *pipe) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	ctx, err := p.io(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if p.direct() {
		return p.conn.Exec(ctx, sql, args...)
	}
	br, err := p.sendWith(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer br.Close()
	return br.Exec()
}

func (p *pipe) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	ctx, err := p.io(ctx)
	if err != nil {
		return errRows{err}, err
	}
	if p.direct() {
		return p.conn.Query(ctx, sql, args...)
	}
	br, err := p.sendWith(ctx, sql, args)
	if err != nil {
		return errRows{err}, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return errRows{err}, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (p *pipe) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := p.Query(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return rowOf{rows}
}

// commit sends the held-back writes, COMMIT, and then, in a transaction of their own, the
// statements of after (the task-event hints), in one round trip. after's errors are returned
// separately: by then the commit has happened.
func (p *pipe) commit(ctx context.Context, after func(b *pgx.Batch) int) (afterErr, err error) {
	if !p.begun && len(p.pending) == 0 {
		return nil, nil // nothing was sent, so there is nothing to commit
	}
	b := &pgx.Batch{}
	p.send(b)
	b.Queue("COMMIT")
	n := 0
	if after != nil {
		n = after(b)
	}
	br := p.conn.SendBatch(ctx, b)
	defer br.Close()
	if err := p.settle(br); err != nil {
		return nil, err
	}
	tag, err := br.Exec()
	if err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	if tag.String() == "ROLLBACK" {
		return nil, fmt.Errorf("commit: %w", pgx.ErrTxCommitRollback)
	}
	p.begun = false
	for range n {
		if _, err := br.Exec(); err != nil && afterErr == nil {
			afterErr = err
		}
	}
	return afterErr, nil
}

// rollbackTimeout bounds a ROLLBACK; a connection that cannot roll back in that time is
// closed by the pool when it comes back (it is still inside a transaction).
const rollbackTimeout = 10 * time.Second

// rollback ends a transaction that was begun; held-back writes are dropped unsent. It runs even
// when the store is closing.
func (p *pipe) rollback() error {
	p.pending = p.pending[:0]
	if !p.begun {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	_, err := p.conn.Exec(ctx, "ROLLBACK")
	if err == nil {
		p.begun = false
	}
	return err
}

// mustTouch wraps a data-modifying statement (it must end in RETURNING 1) so that it fails on the
// server when it touched no row: the division by zero aborts the transaction (or the fn's
// savepoint), and notTouched maps that failure to ErrNotFound. A check made in the client would
// come too late: the COMMIT pipelined behind the write would already have run.
func mustTouch(write string) string {
	return `WITH w AS (` + write + `) SELECT 1 / (SELECT count(*)::int FROM w)`
}

// notTouched maps mustTouch's failure to ErrNotFound.
func notTouched(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "22012" { // division_by_zero
		return store.ErrNotFound
	}
	return err
}

// batchRows closes its batch with the rows.
type batchRows struct {
	pgx.Rows
	br pgx.BatchResults
}

func (r *batchRows) Close() {
	r.Rows.Close()
	r.br.Close() // nothing follows the rows but the batch's end; their errors are the rows'
}

// rowOf is pgx's QueryRow over rows: the first row, or ErrNoRows.
type rowOf struct{ rows pgx.Rows }

func (r rowOf) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// errRows is a pgx.Rows that only reports err.
type errRows struct{ err error }

func (errRows) Close()                                       {}
func (r errRows) Err() error                                 { return r.err }
func (errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (errRows) Next() bool                                   { return false }
func (r errRows) Scan(...any) error                          { return r.err }
func (r errRows) Values() ([]any, error)                     { return nil, r.err }
func (errRows) RawValues() [][]byte                          { return nil }
func (errRows) Conn() *pgx.Conn                              { return nil }
func (errRows) TypeMap() *pgtype.Map                         { return nil }
