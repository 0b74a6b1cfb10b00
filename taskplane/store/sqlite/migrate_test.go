package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// A checkpoint stored while checkpoints were kept per (principal, source) survives migration
// 0006, which rebuilds the table under the key (principal, source, instance): it stays under
// instance "", an instance without a position of its own reads it, and the first instance that
// advances takes it over and never goes behind it.
func TestCheckpointsFromBeforeInstancesSurviveTheMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "channels.db")
	openAt(t, path).Close()

	// Back to the schema before 0006, with a checkpoint in it.
	updated := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.ExecContext(ctx, `DROP TABLE checkpoints;
		CREATE TABLE checkpoints (
			principal  TEXT    NOT NULL,
			source     TEXT    NOT NULL,
			position   BLOB,
			seq        INTEGER NOT NULL,
			version    INTEGER NOT NULL,
			updated_at INTEGER NOT NULL,
			PRIMARY KEY (principal, source)
		) WITHOUT ROWID;
		INSERT INTO checkpoints VALUES ('alice', 'email', CAST('uid:40' AS BLOB), 40, 2, ?);
		DROP INDEX push_configs_live;
		ALTER TABLE push_configs DROP COLUMN finished_registration;
		CREATE INDEX push_configs_updated ON push_configs (updated_at);
		DELETE FROM schema_migrations WHERE version >= 6`, updated.UnixMicro())
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	storetest.CheckCheckpointFromBeforeInstances(t, openAt(t, path), updated)
}
