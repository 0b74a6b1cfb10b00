package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations returns the embedded migrations in version order.
func migrations() ([]store.Migration, error) { return store.ReadMigrations(migrationFiles) }

// migrate applies the embedded migrations that db lacks, each in its own transaction together
// with its schema_migrations row, so a crash leaves the schema at a version boundary. The process
// lock is already held, so nothing else migrates concurrently. It returns the version it found.
func migrate(ctx context.Context, db *sql.DB) (from int, err error) {
	ms, err := migrations()
	if err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return 0, fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	var current int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return 0, fmt.Errorf("migrate: read version: %w", err)
	}
	if n := len(ms); n > 0 && current > ms[n-1].Version {
		// An older binary must not write into a schema it does not know.
		return 0, fmt.Errorf("migrate: database schema version %d is newer than this binary's %d", current, ms[n-1].Version)
	}
	for _, m := range ms {
		if m.Version <= current {
			continue
		}
		if err := applyMigration(ctx, db, m); err != nil {
			return 0, fmt.Errorf("migrate: %04d_%s: %w", m.Version, m.Name, err)
		}
	}
	return current, nil
}

func applyMigration(ctx context.Context, db *sql.DB, m store.Migration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		m.Version, m.Name, time.Now().UnixMicro()); err != nil {
		return err
	}
	return tx.Commit()
}
