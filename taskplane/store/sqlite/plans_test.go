package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// The queries of retention and of A2A listings keep the plans that stay fast on a large store
// (200,000 tasks: a review measured each choice below against SQLite's own): the store runs no
// ANALYZE, so the plans are these whatever the data. want is what the plan must use; refused
// what it must not (a scan or a sort of a whole table).
func TestRetentionAndListingQueriesUseTheirIndexes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "plans.db")
	s, err := Open(ctx, &url.URL{Scheme: "sqlite", Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	now := time.Now()
	from, where, args := taskFilter("alice", store.TaskFilter{State: "input-required"})
	cases := []struct {
		name    string
		sql     string
		args    []any
		want    []string
		refused []string
	}{
		{"retention: tasks", pruneTasksSQL(4), []any{micros(now), "completed", "failed", "canceled", "rejected", 500},
			[]string{"contexts_last_event", "tasks_context"}, []string{"SCAN", "tasks_state", "FOR ORDER BY"}},
		{"retention: claims of no task", pruneUntaskedClaimsSQL, []any{micros(now), micros(now), 500},
			[]string{"claims_done_untasked"}, []string{"SCAN q", "SCAN claims"}},
		{"retention: a task's claims", pruneTaskClaimsSQL, []any{"alice", "t-1"},
			[]string{"claims_done_task"}, []string{"SCAN", "PRIMARY KEY"}},
		{"retention: deliveries", settledDeliveriesSQL(4), []any{micros(now), 500, "completed", "failed", "canceled", "rejected"},
			[]string{"deliveries_settled"}, []string{"SCAN d", "FOR ORDER BY"}},
		{"list tasks by status", `SELECT id FROM ` + from + ` WHERE ` + where + ` ORDER BY status_time DESC, id DESC LIMIT 51`, args,
			[]string{"tasks_state_list"}, []string{"SCAN", "FOR ORDER BY"}},
		{"count tasks by status", `SELECT COUNT(*) FROM ` + from + ` WHERE ` + where, args,
			[]string{"tasks_state_list"}, []string{"SCAN"}},
		{"push work", pushWorkSQL, []any{500}, []string{"push_configs_live"}, []string{"SCAN t", "SCAN tasks"}},
		{"timeout sweep", staleTasksSQL(2), []any{"working", "submitted", micros(now), 100},
			[]string{"tasks_live_state_status_time (state=? AND status_time<?)"}, []string{"SCAN"}},
	}
	// A listing of one context, with any other filter, reads that context's tasks, never the
	// principal's tasks of a state (a review measured 1.5 s against 3 ms).
	for _, tf := range []store.TaskFilter{
		{ContextID: "c-1"},
		{ContextID: "c-1", State: "completed"},
		{ContextID: "c-1", State: "completed", StatusAfter: now.Add(-time.Hour)},
		{ContextID: "c-1", State: "completed", Source: "slack"},
	} {
		from, where, args := taskFilter("alice", tf)
		for _, q := range []string{`SELECT id FROM ` + from + ` WHERE ` + where + ` ORDER BY status_time DESC, id DESC LIMIT 51`,
			`SELECT COUNT(*) FROM ` + from + ` WHERE ` + where} {
			cases = append(cases, struct {
				name    string
				sql     string
				args    []any
				want    []string
				refused []string
			}{fmt.Sprintf("list %+v", tf), q, args, []string{"tasks_context"}, []string{"SCAN", "tasks_state_list", "PRIMARY KEY"}})
		}
	}
	for _, c := range cases {
		plan := explain(t, db, c.sql, c.args...)
		for _, w := range c.want {
			if !strings.Contains(plan, w) {
				t.Errorf("%s: the plan does not use %s:\n%s", c.name, w, plan)
			}
		}
		for _, r := range c.refused {
			if strings.Contains(plan, r) {
				t.Errorf("%s: the plan has %q:\n%s", c.name, r, plan)
			}
		}
	}
}

// explain returns the lines of EXPLAIN QUERY PLAN for query.
func explain(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.Query("EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", query, err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
