package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// insertEvidence commits one evidence record of kind to s.
func insertEvidence(t *testing.T, s store.Store, kind string) {
	t.Helper()
	err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "webhook", Kind: kind, CreatedAt: time.Now().UTC()})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// follow runs `channels evidence --follow --json` on url with args until the test ends.
func follow(t *testing.T, url string, args ...string) (c *cli, stop func()) {
	t.Helper()
	c = newCLI(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- c.run(ctx, append([]string{"evidence", "--store", url, "--follow", "--json", "--interval", "20ms"}, args...)...)
	}()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("evidence --follow exit %d: %s", code, c.stderr.String())
		}
	}
	t.Cleanup(stop)
	return c, stop
}

// printedKinds returns the kinds the follower printed, in order.
func printedKinds(t *testing.T, c *cli) []string {
	var kinds []string
	for _, e := range ndjson[operator.EvidenceView](t, c.stdout.String()) {
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

// On Postgres, where transactions commit out of id order, a record committed after the follow's
// first page with a lower id than the page's newest is still printed, once, however many records
// arrived meanwhile.
func TestEvidenceFollowPrintsARecordCommittedLateWithALowerID(t *testing.T) {
	url := storetest.PostgresURL(t)
	ctx := context.Background()
	s, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	insertEvidence(t, s, "first")
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	late, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx) //nolint:errcheck
	if _, err := late.Exec(ctx, `INSERT INTO evidence (principal, source, kind, task_id, created_at) VALUES ('alice', 'webhook', 'late', '', now())`); err != nil {
		t.Fatal(err)
	}
	busy, err := pgx.Connect(ctx, url) // committed meanwhile, after the late record's id
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close(ctx)
	if _, err := busy.Exec(ctx, `INSERT INTO evidence (principal, source, kind, task_id, created_at)
		SELECT 'alice', 'webhook', 'busy', '', now() FROM generate_series(1, 250)`); err != nil {
		t.Fatal(err)
	}
	insertEvidence(t, s, "third")
	c, stop := follow(t, url, "--limit", "2")
	waitFor(t, "the first page", func() bool { return strings.Contains(c.stdout.String(), "third") })
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the late record", func() bool { return strings.Contains(c.stdout.String(), "late") })
	insertEvidence(t, s, "fourth")
	waitFor(t, "the fourth record", func() bool { return strings.Contains(c.stdout.String(), "fourth") })
	stop()
	if got, want := strings.Join(printedKinds(t, c), ","), "busy,third,late,fourth"; got != want {
		t.Errorf("printed %s, want %s", got, want)
	}
}
