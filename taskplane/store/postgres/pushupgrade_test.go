package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// During a rolling upgrade (docs/operations.md: "the old binary keeps working on the new schema
// while it drains"), a process of a build before the finished flag re-registers a config a new
// process had marked finished. Its upsert names no such column; the config is finished only for
// the registration that finished, so the new one is work again.
func TestAnOlderBuildsReRegistrationOfAFinishedConfigIsLiveAgain(t *testing.T) {
	ctx := context.Background()
	u := newSchema(t)
	s := open(t, u)
	now := t0
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := tx.InsertContext(ctx, store.Context{Principal: "alice", ID: "c1", Source: "a2a", CreatedAt: now, LastEventAt: now}); err != nil {
			return err
		}
		return tx.InsertTask(ctx, store.Task{Principal: "alice", ID: "t1", ContextID: "c1", Source: "a2a", State: "completed",
			StatusTime: now, Version: 1, Body: []byte(`{}`), CreatedAt: now, UpdatedAt: now})
	}); err != nil {
		t.Fatal(err)
	}
	c := store.PushConfig{Principal: "alice", TaskID: "t1", ID: "h1", URL: "https://example.com/h", Registration: "reg-1",
		Cursor: 0, CreatedAt: now, UpdatedAt: now}
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.PutPushConfig(ctx, c, 10); err != nil {
			return err
		}
		next := c
		next.Finished, next.UpdatedAt = true, now.Add(time.Second)
		_, err := tx.AdvancePushConfig(ctx, next, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The older build's PutPushConfig, verbatim.
	conn := connect(t, u)
	if _, err := conn.Exec(ctx, `INSERT INTO push_configs (principal, task_id, id, url, token, auth_scheme, auth_credentials, registration, cursor_seq,
	snapshot, last_delivery, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
		ON CONFLICT (principal, task_id, id) DO UPDATE SET url = excluded.url, token = excluded.token,
			auth_scheme = excluded.auth_scheme, auth_credentials = excluded.auth_credentials,
			registration = excluded.registration, cursor_seq = excluded.cursor_seq, snapshot = excluded.snapshot,
			last_delivery = excluded.last_delivery, created_at = excluded.created_at, updated_at = excluded.updated_at`,
		"alice", "t1", "h1", "https://example.com/new", "", "", "", "reg-2", 0, []byte(`{"id":"t1"}`), "", now.Add(2*time.Second), now.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	work, err := s.ListPushWork(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(work) != 1 {
		got, _ := s.GetPushConfig(ctx, "alice", "t1", "h1")
		t.Fatalf("work after an old build's re-registration = %d configs, want 1 (stored: registration %s, snapshot %d bytes, finished %v)",
			len(work), got.Registration, len(got.Snapshot), got.Finished)
	}
}
