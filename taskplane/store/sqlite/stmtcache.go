package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// maxCachedStmts bounds the statement cache: queries built from filters come in a few shapes,
// and anything beyond the bound is simply prepared per use, as without a cache.
const maxCachedStmts = 256

// stmtCache keeps statements prepared across transactions: parsing SQL was a large share of an
// Update's CPU time, and of a read's. The writer has one connection, which a running transaction
// holds, so a query first seen inside a transaction is only noted there and prepared by warm,
// which the writer calls between transactions. The read pool has one cache too (see cachedDB).
type stmtCache struct {
	db *sql.DB

	mu     sync.Mutex
	stmts  map[string]*sql.Stmt
	missed map[string]struct{}
	closed bool
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, stmts: map[string]*sql.Stmt{}, missed: map[string]struct{}{}}
}

// lookup returns the prepared statement for query, or nil after noting the miss.
func (c *stmtCache) lookup(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stmts[query]
	if st == nil && len(c.stmts)+len(c.missed) < maxCachedStmts {
		c.missed[query] = struct{}{}
	}
	return st
}

// warm prepares the queries missed since the last call. It must run while the caller holds no
// connection the preparation could need (the writer calls it between transactions). A query that
// fails to prepare (it has several statements, say) is left to run unprepared. The lock is not
// held while preparing: on the read pool, preparing waits for a free connection, which a reader
// inside a snapshot may hold while it looks a statement up.
func (c *stmtCache) warm(ctx context.Context) {
	c.mu.Lock()
	if c.closed || len(c.missed) == 0 {
		c.mu.Unlock()
		return
	}
	queries := make([]string, 0, len(c.missed))
	for q := range c.missed {
		queries = append(queries, q)
	}
	clear(c.missed)
	c.mu.Unlock()
	for _, q := range queries {
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			continue
		}
		c.mu.Lock()
		if c.closed || c.stmts[q] != nil {
			st.Close() // closed meanwhile, or another caller prepared it first
		} else {
			c.stmts[q] = st
		}
		c.mu.Unlock()
	}
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for q, st := range c.stmts {
		st.Close()
		delete(c.stmts, q)
	}
}

// cachedTx runs queries on a transaction through the cache.
type cachedTx struct {
	tx *sql.Tx
	c  *stmtCache
}

func (t cachedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := t.c.lookup(query); st != nil {
		return t.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.tx.ExecContext(ctx, query, args...)
}

func (t cachedTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := t.c.lookup(query); st != nil {
		return t.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.tx.QueryContext(ctx, query, args...)
}

func (t cachedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := t.c.lookup(query); st != nil {
		return t.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.tx.QueryRowContext(ctx, query, args...)
}

// cachedDB runs queries on the read pool through a cache. A statement prepared on the pool is
// prepared again by database/sql on each connection that first runs it.
type cachedDB struct {
	db *sql.DB
	c  *stmtCache
}

// stmt returns the prepared statement for query, preparing it now on a miss (the caller holds no
// connection of the pool here, so preparing cannot wait for one the caller holds), or nil.
func (d cachedDB) stmt(ctx context.Context, query string) *sql.Stmt {
	if st := d.c.lookup(query); st != nil {
		return st
	}
	d.c.warm(ctx)
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	return d.c.stmts[query]
}

func (d cachedDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := d.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return d.db.ExecContext(ctx, query, args...)
}

func (d cachedDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := d.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return d.db.QueryContext(ctx, query, args...)
}

func (d cachedDB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := d.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return d.db.QueryRowContext(ctx, query, args...)
}

// snapshot runs fn in one read-only transaction, through the cache. A query first seen inside it
// is prepared after the transaction has given its connection back.
func (d cachedDB) snapshot(ctx context.Context, fn func(q querier) error) error {
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	err = fn(cachedTx{tx: tx, c: d.c})
	tx.Rollback() // read-only: nothing to commit
	d.c.warm(ctx)
	return err
}
