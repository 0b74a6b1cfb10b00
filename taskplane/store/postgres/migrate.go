package postgres

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/taskplane/store"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations returns the embedded migrations in version order.
func migrations() ([]store.Migration, error) { return store.ReadMigrations(migrationFiles) }

// migrateLockClass is the first key of the two-key advisory lock that serializes migrations; the
// second key is a hash of the schema, so stores in different schemas of one database migrate
// independently.
const migrateLockClass = 0x4348_4e4c // "CHNL"

// migrate applies the embedded migrations that the current schema lacks, each in a transaction of
// its own together with its schema_migrations row; Postgres DDL is transactional, so a failure
// leaves the schema at the last migration applied. Each migration's locks are released before the
// next one takes its own: in one transaction, 0010's lock on claims was held while 0011 waited for
// the writers of wakes, and an acceptance of an older process still running, which writes its
// wake before its claim, waited for the first holding the second, a deadlock that failed the
// start. Several processes starting at once serialize on a per-schema lock held across the
// migrations, and only the first one applies anything. It returns the schema the store lives in,
// and records the version it found under the lock in s.migratedFrom.
func (s *Store) migrate(ctx context.Context) (schema string, err error) {
	ms, err := migrations()
	if err != nil {
		return "", err
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return "", fmt.Errorf("acquire: %w", err)
	}
	defer c.Release()
	conn := c.Conn()

	// current_schema() is the first existing schema of the search_path: where unqualified names
	// are created. It is NULL when the search_path names no existing schema.
	var current *string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&current); err != nil {
		return "", fmt.Errorf("current schema: %w", err)
	}
	if current == nil {
		return "", fmt.Errorf("the search_path names no existing schema to create tables in")
	}
	schema = *current
	unlock, err := s.lockMigrations(ctx, conn, schema)
	if err != nil {
		return "", err
	}
	defer unlock()
	for first := true; ; first = false {
		applied, err := s.migrateNext(ctx, conn, schema, ms, first)
		if err != nil || !applied {
			return schema, err
		}
	}
}

// migrateNext applies, in one transaction on conn, the first of ms that the schema lacks, and
// reports whether there was one; when first, it records the version it found in s.migratedFrom.
func (s *Store) migrateNext(ctx context.Context, conn *pgx.Conn, schema string, ms []store.Migration, first bool) (applied bool, err error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit

	// Created only when missing: even CREATE TABLE IF NOT EXISTS needs CREATE on the schema, which
	// a role that only uses a store another role migrated need not have.
	var table *string
	if err := tx.QueryRow(ctx, `SELECT to_regclass(quote_ident($1) || '.schema_migrations')::text`, schema).Scan(&table); err != nil {
		return false, fmt.Errorf("read schema_migrations: %w", err)
	}
	if table == nil {
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return false, fmt.Errorf("create schema_migrations: %w", err)
		}
	}
	done := map[int]bool{}
	rows, err := tx.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return false, fmt.Errorf("read schema_migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return false, fmt.Errorf("read schema_migrations: %w", err)
	}
	latest := 0
	for _, v := range versions {
		done[int(v)] = true
		latest = max(latest, int(v))
	}
	if first {
		s.migratedFrom = latest
	}
	if known := ms[len(ms)-1].Version; latest > known {
		return false, fmt.Errorf("schema %q is at version %d, newer than this binary knows (%d)", schema, latest, known)
	}
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return false, fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return false, fmt.Errorf("record migration %04d_%s: %w", m.Version, m.Name, err)
		}
		applied = true
		break
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	return applied, nil
}

// lockMigrations takes the per-schema migration lock on conn until unlock runs. With advisory
// locks it is a session-level advisory lock, which the connection's end releases too; a driver
// for an engine without them would lock a lease row.
func (s *Store) lockMigrations(ctx context.Context, conn *pgx.Conn, schema string) (unlock func(), err error) {
	if !s.features.advisoryLocks {
		return nil, fmt.Errorf("migration lock: %w", errNoLockMechanism)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, hashtext($2))`, int32(migrateLockClass), schema); err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	return func() {
		ctx := context.WithoutCancel(ctx)
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, int32(migrateLockClass), schema); err != nil {
			conn.Close(ctx) //nolint:errcheck // closing it releases the lock; the pool drops it
		}
	}, nil
}
