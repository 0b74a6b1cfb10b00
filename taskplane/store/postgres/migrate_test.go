package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/taskplane/store"
)

// A checkpoint stored while checkpoints were kept per (principal, source) survives migration
// 0006, which keys the table by (principal, source, instance): it stays under instance "", an
// instance without a position of its own reads it, and the first instance that advances takes it
// over and never goes behind it.
func TestCheckpointsFromBeforeInstancesSurviveTheMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := newSchema(t)
	open(t, u).Close()

	// Back to the schema before 0006, with a checkpoint in it.
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `ALTER TABLE checkpoints DROP CONSTRAINT checkpoints_pkey;
		ALTER TABLE checkpoints DROP COLUMN instance;
		ALTER TABLE checkpoints ADD PRIMARY KEY (principal, source);
		DELETE FROM schema_migrations WHERE version = 6`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO checkpoints (principal, source, position, seq, version, updated_at)
		VALUES ('alice', 'email', 'uid:40', 40, 2, $1)`, t0); err != nil {
		t.Fatal(err)
	}

	s := open(t, u)
	old := store.Checkpoint{Principal: "alice", Source: "email", Position: []byte("uid:40"), Seq: 40, Version: 2, UpdatedAt: t0}
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
			Position: []byte("uid:12"), Seq: 12, UpdatedAt: t0.Add(time.Minute)}); err != nil {
			return err
		}
		after, err = tx.AdvanceCheckpoint(ctx, store.Checkpoint{Principal: "alice", Source: "email", Instance: "other",
			Position: []byte("uid:3"), Seq: 3, UpdatedAt: t0.Add(time.Minute)})
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
