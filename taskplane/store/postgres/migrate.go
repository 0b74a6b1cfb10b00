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

// migrate applies the embedded migrations that the current schema lacks, all in one transaction.
// Postgres DDL is transactional, so a failure leaves the schema as it was. Several processes
// starting at once serialize on a per-schema lock and only the first one applies anything. It
// returns the schema the store lives in, and records the version it found under the lock in
// s.migratedFrom.
func (s *Store) migrate(ctx context.Context) (schema string, err error) {
	ms, err := migrations()
	if err != nil {
		return "", err
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return "", fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit

	// current_schema() is the first existing schema of the search_path: where unqualified names
	// are created. It is NULL when the search_path names no existing schema.
	var current *string
	if err := tx.QueryRow(ctx, `SELECT current_schema()`).Scan(&current); err != nil {
		return "", fmt.Errorf("current schema: %w", err)
	}
	if current == nil {
		return "", fmt.Errorf("the search_path names no existing schema to create tables in")
	}
	schema = *current
	if err := s.lockMigrations(ctx, tx, schema); err != nil {
		return "", err
	}
	// Created only when missing: even CREATE TABLE IF NOT EXISTS needs CREATE on the schema, which
	// a role that only uses a store another role migrated need not have.
	var table *string
	if err := tx.QueryRow(ctx, `SELECT to_regclass(quote_ident($1) || '.schema_migrations')::text`, schema).Scan(&table); err != nil {
		return "", fmt.Errorf("read schema_migrations: %w", err)
	}
	if table == nil {
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return "", fmt.Errorf("create schema_migrations: %w", err)
		}
	}
	applied := map[int]bool{}
	rows, err := tx.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return "", fmt.Errorf("read schema_migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return "", fmt.Errorf("read schema_migrations: %w", err)
	}
	latest := 0
	for _, v := range versions {
		applied[int(v)] = true
		latest = max(latest, int(v))
	}
	s.migratedFrom = latest
	if known := ms[len(ms)-1].Version; latest > known {
		return "", fmt.Errorf("schema %q is at version %d, newer than this binary knows (%d)", schema, latest, known)
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return "", fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return "", fmt.Errorf("record migration %04d_%s: %w", m.Version, m.Name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return "", fmt.Errorf("commit: %w", err)
	}
	return schema, nil
}

// lockMigrations takes the per-schema migration lock until tx ends. With advisory locks it is a
// transaction-scoped advisory lock; a driver for an engine without them would lock a lease row.
func (s *Store) lockMigrations(ctx context.Context, tx pgx.Tx, schema string) error {
	if !s.features.advisoryLocks {
		return fmt.Errorf("migration lock: %w", errNoLockMechanism)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, int32(migrateLockClass), schema); err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	return nil
}
