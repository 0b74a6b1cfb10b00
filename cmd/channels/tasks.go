package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// notFoundError is a lookup that found nothing (exit code 3), so a script can tell "no such
// task" from "could not look".
type notFoundError struct{ error }

// ExitCode implements exitCoder.
func (notFoundError) ExitCode() int { return 3 }

// taskRow is one task in `channels tasks list`: its state, never its messages.
type taskRow struct {
	ID         string    `json:"id"`
	Principal  string    `json:"principal"`
	ContextID  string    `json:"contextId"`
	Source     string    `json:"source"`
	State      string    `json:"state"`
	StatusTime time.Time `json:"statusTime"`
	Version    int64     `json:"version"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

// taskDetail is `channels tasks get --json`: the task with its history and artifacts, the
// principal that owns it, and optionally its event log and evidence.
type taskDetail struct {
	Principal string                  `json:"principal"`
	Source    string                  `json:"source"`
	Version   int64                   `json:"version"`
	CreatedAt time.Time               `json:"createdAt"`
	UpdatedAt time.Time               `json:"updatedAt"`
	Task      *taskplane.Task         `json:"task"`
	Events    []taskEventRow          `json:"events,omitempty"`
	Evidence  []operator.EvidenceView `json:"evidence,omitempty"`
}

type taskEventRow struct {
	Seq  int64     `json:"seq"`
	Kind string    `json:"kind"`
	Time time.Time `json:"time"`
}

func (a *app) tasksCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List and show tasks, across principals",
		Long: `Read the tasks in the store: "list" shows their states (never their messages), "get"
shows one task with its history, artifacts, event log and evidence.

With the SQLite store these commands need the store to themselves (a running "channels serve"
holds it); with Postgres they run beside the servers.

Exit status: 0 on success, 1 when the store cannot be read, 2 on a usage mistake, 3 when
"get" finds no such task.`,
	}
	cmd.AddCommand(a.tasksListCmd(), a.tasksGetCmd())
	return cmd
}

func (a *app) openStore(ctx context.Context) (store.Store, error) {
	st, err := openStoreURL(ctx, a.cfg.Store)
	if err != nil && errors.Is(err, store.ErrInUse) {
		return nil, fmt.Errorf("%w (stop channels serve, or use Postgres to read beside it)", err)
	}
	return st, err
}

// principalsOf returns every principal with tasks, sorted, or just p when it is set.
func principalsOf(ctx context.Context, st store.Reader, p string) ([]string, error) {
	if p != "" {
		return []string{p}, nil
	}
	counts, err := st.CountTasks(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range counts {
		if len(out) == 0 || out[len(out)-1] != c.Principal {
			out = append(out, c.Principal)
		}
	}
	return out, nil
}

func (a *app) tasksListCmd() *cobra.Command {
	var (
		principal, state, source, contextID, since string
		limit                                      int
		asJSON                                     bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks, most recently changed first",
		Example: `  channels tasks list
  channels tasks list --state input-required --source slack
  channels tasks list --principal ci-team --since 1h --json | jq -r .id`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if limit < 0 {
				return usageError{errors.New("--limit must not be negative")}
			}
			// "input-required", "INPUT_REQUIRED" and "TASK_STATE_INPUT_REQUIRED" all name one state.
			st := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(strings.ToUpper(state), "TASK_STATE_")), "_", "-")
			if st != "" && !taskplane.State(st).Valid() {
				return usageError{fmt.Errorf("--state %q: want a task state such as working, input-required, completed (or TASK_STATE_…)", state)}
			}
			f := store.TaskFilter{ContextID: contextID, Source: source, State: st, Limit: limit}
			if since != "" {
				t, err := parseSinceFlag(since)
				if err != nil {
					return err
				}
				f.StatusAfter = t
			}
			s, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer s.Close()
			principals, err := principalsOf(ctx, s, principal)
			if err != nil {
				return fmt.Errorf("list tasks: %w", err)
			}
			var rows []taskRow
			for _, p := range principals {
				ts, _, err := s.ListTasks(ctx, p, f)
				if err != nil {
					return fmt.Errorf("list tasks of %s: %w", p, err)
				}
				for _, t := range ts {
					rows = append(rows, taskRow{ID: t.ID, Principal: t.Principal, ContextID: t.ContextID, Source: t.Source,
						State: t.State, StatusTime: t.StatusTime, Version: t.Version, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt})
				}
			}
			sort.SliceStable(rows, func(i, j int) bool {
				if !rows[i].StatusTime.Equal(rows[j].StatusTime) {
					return rows[i].StatusTime.After(rows[j].StatusTime)
				}
				return rows[i].ID > rows[j].ID
			})
			if limit > 0 && len(rows) > limit {
				rows = rows[:limit]
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				for _, r := range rows {
					if err := enc.Encode(r); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPRINCIPAL\tSOURCE\tSTATE\tSTATUS TIME\tCONTEXT")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(r.ID), cell(r.Principal), cellOrDash(r.Source),
					cell(string(r.State)), r.StatusTime.UTC().Format(time.RFC3339), cell(r.ContextID))
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&principal, "principal", "", "only tasks of this principal (default: every principal)")
	fl.StringVar(&state, "state", "", "only tasks in this state (working, input-required, completed, … or TASK_STATE_…)")
	fl.StringVar(&source, "source", "", "only tasks that came in through this source")
	fl.StringVar(&contextID, "context", "", "only tasks of this context id")
	fl.StringVar(&since, "since", "", "only tasks whose status changed since then (90m, 24h, 7d, or RFC 3339)")
	fl.IntVar(&limit, "limit", 50, "at most this many (0 = all)")
	fl.BoolVar(&asJSON, "json", false, "print JSON, one task per line")
	return cmd
}

func (a *app) tasksGetCmd() *cobra.Command {
	var (
		principal string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "get TASK_ID",
		Short: "Show one task: state, history, artifacts, event log and evidence",
		Example: `  channels tasks get 0197a3c2-…
  channels tasks get 0197a3c2-… --json | jq .task.status`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer s.Close()
			id := args[0]
			principals, err := principalsOf(ctx, s, principal)
			if err != nil {
				return fmt.Errorf("get task %s: %w", id, err)
			}
			var row store.Task
			found := false
			for _, p := range principals {
				r, err := s.GetTask(ctx, p, id)
				if errors.Is(err, store.ErrNotFound) {
					continue
				}
				if err != nil {
					return fmt.Errorf("get task %s: %w", id, err)
				}
				if found {
					return usageError{fmt.Errorf("task %s exists for several principals: name one with --principal", id)}
				}
				row, found = r, true
			}
			if !found {
				return notFoundError{fmt.Errorf("no task %s", id)}
			}
			plane := taskplane.New(s)
			t, err := plane.GetTask(ctx, row.Principal, id)
			if err != nil {
				return fmt.Errorf("get task %s: %w", id, err)
			}
			d := taskDetail{Principal: row.Principal, Source: row.Source, Version: row.Version, CreatedAt: row.CreatedAt,
				UpdatedAt: row.UpdatedAt, Task: t}
			evs, err := s.TaskEvents(ctx, row.Principal, id, 0, 0)
			if err != nil {
				return fmt.Errorf("task %s events: %w", id, err)
			}
			for _, e := range evs {
				d.Events = append(d.Events, taskEventRow{Seq: e.Seq, Kind: e.Kind, Time: e.CreatedAt})
			}
			evidence, err := s.ListEvidence(ctx, store.EvidenceFilter{Principal: row.Principal, TaskID: id, Limit: 200})
			if err != nil {
				return fmt.Errorf("task %s evidence: %w", id, err)
			}
			slices.Reverse(evidence)
			if asJSON {
				d.Evidence = operator.ViewEvidence(evidence)
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(d)
			}
			return a.printTask(d, evidence)
		},
	}
	cmd.Flags().StringVar(&principal, "principal", "", "the task's principal (needed only if the id exists under several)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) printTask(d taskDetail, evidence []store.Evidence) error {
	t := d.Task
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "task\t%s\n", cell(t.ID))
	fmt.Fprintf(tw, "state\t%s (since %s)\n", cell(string(t.Status.State)), t.Status.Timestamp.UTC().Format(time.RFC3339))
	fmt.Fprintf(tw, "principal\t%s\n", cell(d.Principal))
	fmt.Fprintf(tw, "source\t%s\n", cellOrDash(d.Source))
	fmt.Fprintf(tw, "context\t%s\n", cell(t.ContextID))
	fmt.Fprintf(tw, "created\t%s\n", d.CreatedAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(tw, "version\t%d\n", d.Version)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "\nhistory (%d messages):\n", len(t.History))
	for _, m := range t.History {
		fmt.Fprintf(a.stdout, "  %-6s %s\n", cell(strings.TrimPrefix(string(m.Role), "ROLE_")), cellShort(messageText(m), 100))
	}
	if t.Status.Message != nil {
		fmt.Fprintf(a.stdout, "status message: %s\n", cellShort(messageText(*t.Status.Message), 100))
	}
	if len(t.Artifacts) > 0 {
		fmt.Fprintf(a.stdout, "artifacts: %d\n", len(t.Artifacts))
	}
	fmt.Fprintf(a.stdout, "\nevents:\n")
	for _, e := range d.Events {
		fmt.Fprintf(a.stdout, "  %4d  %s  %s\n", e.Seq, e.Time.UTC().Format(time.RFC3339), cell(e.Kind))
	}
	fmt.Fprintf(a.stdout, "\nevidence:\n")
	for _, e := range operator.ViewEvidence(evidence) {
		fmt.Fprintf(a.stdout, "  %s  %-20s %s\n", e.Time.UTC().Format(time.RFC3339), cell(e.Kind), cellShort(e.DetailText(), 80))
	}
	return nil
}

// messageText joins a message's text parts, and names the other parts.
func messageText(m taskplane.Message) string {
	var parts []string
	for _, p := range m.Parts {
		if p.Text != "" {
			parts = append(parts, p.Text)
		} else {
			parts = append(parts, "[non-text part]")
		}
	}
	return strings.Join(parts, " ")
}

// parseSinceFlag parses a --since value.
func parseSinceFlag(v string) (time.Time, error) {
	t, err := operator.ParseSince(v, time.Now().UTC())
	if err != nil {
		return time.Time{}, usageError{err}
	}
	return t, nil
}
