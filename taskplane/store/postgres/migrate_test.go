package postgres_test

import (
	"context"
	"testing"

	"github.com/channels-dev/channels/taskplane/store/storetest"
	"github.com/jackc/pgx/v5"
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

	storetest.CheckCheckpointFromBeforeInstances(t, open(t, u), t0)
}
