package postgres

import (
	"context"
	"log/slog"
	"net/url"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TxID returns the id of the Postgres transaction tx runs in.
func TxID(ctx context.Context, stx store.Tx) (int64, error) {
	var id int64
	err := stx.(*tx).q.QueryRow(ctx, "SELECT txid_current()").Scan(&id)
	return id, err
}

// OpenOnHost opens a Store as Open does, on a host whose clock is local.
func OpenOnHost(ctx context.Context, u *url.URL, local func() time.Time) (*Store, error) {
	return open(ctx, u, local, newElapsed)
}

// Committers returns how many groups s commits at once.
func (s *Store) Committers() int { return committers(s.pool.Config().MaxConns) }

// Queued returns how many Updates wait for a committer.
func (s *Store) Queued() int { return s.queue.Len() }

// SetEvidenceWait sets how long an evidence follower's read waits for the transactions that may
// own a gap to end, until the test ends.
func SetEvidenceWait(tb interface {
	Cleanup(func())
}, d time.Duration) {
	old := evidenceWait
	evidenceWait = d
	tb.Cleanup(func() { evidenceWait = old })
}

// hookQ calls before with each statement's SQL just before the statement is sent.
type hookQ struct {
	querier
	before func(sql string)
}

func (h hookQ) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	h.before(sql)
	return h.querier.Query(ctx, sql, args...)
}

func (h hookQ) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	h.before(sql)
	return h.querier.QueryRow(ctx, sql, args...)
}

// HookedReader returns a Reader on s's pool that calls before with each statement's SQL just
// before the statement is sent.
func (s *Store) HookedReader(before func(sql string)) store.Reader {
	return reader{q: hookQ{querier: s.pool, before: before}}
}

// SetLogger sets the logger of s.
func (s *Store) SetLogger(l *slog.Logger) { s.log.Store(l) }

// Pool returns s's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// SetSessionDefault sets one of the run-time parameters every connection gets unless its URL sets
// it, until the test ends. Not for parallel tests: stores opened meanwhile read it.
func SetSessionDefault(tb interface{ Cleanup(func()) }, name, value string) {
	was, had := sessionDefaults[name]
	sessionDefaults[name] = value
	tb.Cleanup(func() {
		if had {
			sessionDefaults[name] = was
		} else {
			delete(sessionDefaults, name)
		}
	})
}

// MeasureClock measures the database's clock again now, as keepClock does every clockRefresh.
func (s *Store) MeasureClock(ctx context.Context) error { return s.measureClock(ctx) }
