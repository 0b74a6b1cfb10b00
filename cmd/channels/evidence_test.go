package main

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
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

// evidence --server reads page after page: --limit 0 prints every record and a limit above the
// API's page of 1,000 prints that many, the newest, as reading the store does.
func TestEvidenceFromAServerIsNotCutAtOnePage(t *testing.T) {
	const n = 2345
	url := "sqlite://" + filepath.Join(t.TempDir(), "e.db")
	s, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		for range n {
			if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "webhook", Kind: "checkpoint-resync", CreatedAt: time.Now().UTC()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	base, _ := startServe(t, newCLI(t, map[string]string{"CHANNELS_STORE": url}))
	ids := func(args ...string) []int64 {
		t.Helper()
		c := newCLI(t, nil)
		if code := c.run(context.Background(), append([]string{"evidence", "--server", base, "--kind", "checkpoint-resync", "--json"}, args...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, c.stderr.String())
		}
		var out []int64
		for _, e := range ndjson[operator.EvidenceView](t, c.stdout.String()) {
			out = append(out, e.ID)
		}
		return out
	}
	all := ids("--limit", "0")
	if len(all) != n || !slices.IsSorted(all) || len(slices.Compact(slices.Clone(all))) != n {
		t.Fatalf("--limit 0 printed %d records (sorted %v), want all %d once, oldest first", len(all), slices.IsSorted(all), n)
	}
	for _, limit := range []int{1500, 1000, 7} {
		got := ids("--limit", strconv.Itoa(limit))
		if !slices.Equal(got, all[n-limit:]) {
			t.Errorf("--limit %d printed %d records, from %v, want the newest %d", limit, len(got), got[:min(len(got), 1)], limit)
		}
	}
	if got := ids("--limit", "5000"); !slices.Equal(got, all) {
		t.Errorf("--limit 5000 printed %d records, want all %d", len(got), n)
	}
}
