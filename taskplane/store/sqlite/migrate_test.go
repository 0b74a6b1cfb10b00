package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/channels-dev/channels/taskplane/store"
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
		DELETE FROM schema_migrations WHERE version = 6`, updated.UnixMicro())
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	s := openAt(t, path)
	old := store.Checkpoint{Principal: "alice", Source: "email", Position: []byte("uid:40"), Seq: 40, Version: 2, UpdatedAt: updated}
	got, err := s.GetCheckpoint(ctx, "alice", "email", "box")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(old, got); d != "" {
		t.Errorf("GetCheckpoint after the migration (-want +got):\n%s", d)
	}
	var after store.Checkpoint
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.AdvanceCheckpoint(ctx, store.Checkpoint{Principal: "alice", Source: "email", Instance: "box",
			Position: []byte("uid:12"), Seq: 12, UpdatedAt: updated.Add(time.Minute)}); err != nil {
			return err
		}
		after, err = tx.AdvanceCheckpoint(ctx, store.Checkpoint{Principal: "alice", Source: "email", Instance: "other",
			Position: []byte("uid:3"), Seq: 3, UpdatedAt: updated.Add(time.Minute)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if after.Version != 1 || after.Seq != 3 {
		t.Errorf("a second instance's first advance = %+v, want its own position at version 1", after)
	}
	all, err := s.ListCheckpoints(ctx, "email")
	if err != nil {
		t.Fatal(err)
	}
	taken := old
	taken.Instance = "box"
	if d := cmp.Diff([]store.Checkpoint{taken, after}, all); d != "" {
		t.Errorf("checkpoints after the first advances (-want +got):\n%s", d)
	}
}
