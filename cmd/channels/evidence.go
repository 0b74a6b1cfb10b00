package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/taskplane/store"
)

// evidenceReader is where `channels evidence` reads: the store, or a running server's
// /admin/api (--server), which a SQLite store needs while the server holds it.
type evidenceReader interface {
	list(ctx context.Context, f store.EvidenceFilter) ([]operator.EvidenceView, error)
	// now is the time records' ages are measured against: the store's clock (store.Clock), or
	// this host's for a server, which reads a relative until against its own.
	now() time.Time
	summary(ctx context.Context, since time.Time) (operator.Summary, error)
	close()
}

// followSettle is how old a record must be before a follow takes it for one no record with a lower
// id can still be in flight: on Postgres an id is drawn at insert and seen at commit, and the
// acceptance transactions that write evidence last milliseconds. It is where a follow starts only;
// the reads that follow never step over a gap that may still fill (the store's follower horizon).
const followSettle = 30 * time.Second

// followPage is how many records one read of a follow returns at most; it reads again at once
// while a read is full.
const followPage = 1000

// followStart returns where a follow of f starts reading (after last), and the records matching f
// above that already committed (seen), which the follow does not print: the page printed first
// holds the newest of them, and the rest are older than the page (--limit, --since). It is called
// before the page is read, so a record committed meanwhile is printed by the follow if the page
// missed it.
//
// last is the newest record created followSettle or more before r.now(): a record still in flight
// when the page is read cannot have a lower id. (On Postgres, where transactions commit out of id
// order, starting after the page's newest id would skip a record with a lower id that committed
// after the page was read.)
func followStart(ctx context.Context, r evidenceReader, f store.EvidenceFilter) (last int64, seen map[int64]bool, err error) {
	settled, err := r.list(ctx, store.EvidenceFilter{Until: r.now().Add(-followSettle), Limit: 1})
	if err != nil {
		return 0, nil, err
	}
	if len(settled) > 0 {
		last = settled[0].ID
	}
	// Everything committed now above last, past any id still in flight (not a follower's read):
	// what the page and the limit show or leave out is not printed again; what commits later is.
	seen = map[int64]bool{}
	f.Follow = false
	_, err = pageForward(ctx, r, f, last, func(rows []operator.EvidenceView) error {
		for _, e := range rows {
			seen[e.ID] = true
		}
		return nil
	})
	return last, seen, err
}

// pageForward reads the records matching f after the id after, oldest first (f.Forward), a page
// at a time while pages are full, and hands each page to fn. It returns the largest id read.
func pageForward(ctx context.Context, r evidenceReader, f store.EvidenceFilter, after int64, fn func([]operator.EvidenceView) error) (int64, error) {
	f.Since, f.Limit, f.Forward = time.Time{}, followPage, true
	for {
		f.AfterID = after
		rows, err := r.list(ctx, f)
		if err != nil {
			return after, err
		}
		// Oldest first, whatever order a server of an older build answers in.
		slices.SortFunc(rows, func(a, b operator.EvidenceView) int { return cmp.Compare(a.ID, b.ID) })
		for _, e := range rows {
			after = max(after, e.ID)
		}
		if err := fn(rows); err != nil {
			return after, err
		}
		if len(rows) < followPage {
			return after, nil
		}
	}
}

func (a *app) evidenceCmd() *cobra.Command {
	var (
		source, kind, principal, task, since, server string
		limit                                        int
		asJSON, follow, summary                      bool
		interval                                     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "evidence",
		Short: "Read per-source evidence: what was accepted, deduplicated, woken, delivered, and what failed",
		Long: `Read the evidence Channels records for every event it takes in, every wake and every
delivery: accepted, continued, duplicate, duplicate-conflict, anchor-miss, non-work (counted),
rejected (counted), malformed-envelope, checkpoint-resync, woken, wake-failed, unhealthy, timeout,
settled, result-failed, push-registered, delivery-* and retention; --kind takes one of them (another
is a usage error). Records print oldest first; --limit bounds how many of the newest are shown.

--summary prints one line per source instead: accepted, duplicates, non-work, malformed,
conflicts, anchor misses, wakes woken and failed, deliveries by state, checkpoint position and
age, and the last event (over --since, default 24h); --source keeps one source and the deliveries
of it that need attention. --kind, --principal, --task and --limit do not apply to it.

--follow keeps printing new records as they are committed until interrupted.

The store is read directly (--store, or the configured store). A SQLite store belongs to the
running server, so while "channels serve" runs, read through it instead with --server URL
(authenticated with admin_token from the configuration); a --limit of 0 or above the API's page
of 1,000 reads page after page.

Detail fields hold ids, reasons and counts, never message bodies or secrets.

Exit status: 0 on success (also when nothing matches), 1 when the evidence cannot be read,
2 on a usage mistake.`,
		Example: `  channels evidence --since 1h
  channels evidence --source slack --kind duplicate --json
  channels evidence --summary --since 24h
  channels evidence --follow --server http://127.0.0.1:8788
  channels evidence --kind wake-failed --since 7d --json | jq .taskId`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			now := time.Now().UTC()
			f := store.EvidenceFilter{Source: source, Kind: kind, Principal: principal, TaskID: task, Limit: limit}
			if kind != "" {
				if err := operator.CheckEvidenceKind(kind); err != nil {
					return usageError{fmt.Errorf("--kind: %w", err)}
				}
			}
			if limit < 0 {
				return usageError{errors.New("--limit must not be negative")}
			}
			if interval <= 0 {
				return usageError{errors.New("--interval must be positive")}
			}
			if summary && follow {
				return usageError{errors.New("--summary and --follow do not go together")}
			}
			if summary {
				// The summary counts every kind per source, over every principal and task.
				for _, name := range []string{"kind", "principal", "task", "limit"} {
					if cmd.Flags().Changed(name) {
						return usageError{fmt.Errorf("--%s does not apply to --summary (it takes --source and --since)", name)}
					}
				}
			}
			sinceArg := since
			if sinceArg == "" && summary {
				sinceArg = "24h"
			}
			var sinceT time.Time
			if sinceArg != "" {
				t, err := operator.ParseSince(sinceArg, now)
				if err != nil {
					return usageError{err}
				}
				sinceT, f.Since = t, t
			}
			r, err := a.openEvidence(ctx, server)
			if err != nil {
				return err
			}
			defer r.close()
			if summary {
				sum, err := r.summary(ctx, sinceT)
				if err != nil {
					return err
				}
				if source != "" {
					sum = sum.OfSource(source)
				}
				return a.printSummary(sum, sinceArg, asJSON)
			}
			// A follow finds where to start before it reads the page (see followStart).
			var last int64
			var seen map[int64]bool
			if follow {
				if last, seen, err = followStart(ctx, r, f); err != nil {
					return err
				}
			}
			rows, err := r.list(ctx, f)
			if err != nil {
				return err
			}
			slices.Reverse(rows) // oldest first
			p := newEvidencePrinter(a.stdout, asJSON, now)
			if err := p.print(rows); err != nil {
				return err
			}
			if !follow {
				return p.flush()
			}
			if err := p.flush(); err != nil {
				return err
			}
			for _, e := range rows {
				if e.ID > last {
					seen[e.ID] = true
				}
			}
			f.Follow = true // a follower's reads: they stop short of an id still in flight
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
				var err error
				last, err = pageForward(ctx, r, f, last, func(rows []operator.EvidenceView) error {
					rows = slices.DeleteFunc(rows, func(e operator.EvidenceView) bool { return seen[e.ID] })
					p.now = time.Now().UTC()
					if err := p.print(rows); err != nil {
						return err
					}
					return p.flush()
				})
				maps.DeleteFunc(seen, func(id int64, _ bool) bool { return id <= last })
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
			}
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&source, "source", "", "only evidence of this source (slack, webhook, a2a, …)")
	fl.StringVar(&kind, "kind", "", "only evidence of this kind (accepted, duplicate, wake-failed, …)")
	fl.StringVar(&principal, "principal", "", "only evidence of this principal")
	fl.StringVar(&task, "task", "", "only evidence of this task id")
	fl.StringVar(&since, "since", "", "only evidence newer than this: a duration back from now (90m, 24h, 7d) or an RFC 3339 time")
	fl.IntVar(&limit, "limit", 100, "show at most this many of the newest records (0 = all)")
	fl.BoolVar(&asJSON, "json", false, "print JSON: one record per line (with --summary, one object)")
	fl.BoolVar(&follow, "follow", false, "keep printing new records until interrupted")
	fl.DurationVar(&interval, "interval", time.Second, "how often --follow looks for new records")
	fl.BoolVar(&summary, "summary", false, "print the per-source summary instead of records")
	fl.StringVar(&server, "server", "", "read through a running server's /admin/api at this base URL (no user information, query or fragment) instead of the store")
	return cmd
}

// evidencePrinter prints records as a table (aligned per batch) or as JSON lines.
type evidencePrinter struct {
	w      io.Writer
	asJSON bool
	now    time.Time
	tw     *tabwriter.Writer
	header bool
}

func newEvidencePrinter(w io.Writer, asJSON bool, now time.Time) *evidencePrinter {
	return &evidencePrinter{w: w, asJSON: asJSON, now: now}
}

func (p *evidencePrinter) print(rows []operator.EvidenceView) error {
	if p.asJSON {
		enc := json.NewEncoder(p.w)
		for _, e := range rows {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	}
	if p.tw == nil {
		p.tw = tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	}
	if !p.header {
		fmt.Fprintln(p.tw, "ID\tTIME\tSOURCE\tKIND\tPRINCIPAL\tTASK\tDETAIL")
		p.header = true
	}
	for _, e := range rows {
		fmt.Fprintf(p.tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Time.UTC().Format(time.RFC3339), cellOrDash(e.Source), cell(e.Kind),
			cellOrDash(e.Principal), cellOrDash(e.TaskID), cellOrDash(cellShort(e.DetailText(), 100)))
	}
	return nil
}

func (p *evidencePrinter) flush() error {
	if p.tw == nil {
		return nil
	}
	return p.tw.Flush()
}

// printSummary prints the per-source summary.
func (a *app) printSummary(sum operator.Summary, window string, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(sum)
	}
	// Two tables, so that neither runs off a terminal: what came in, then what became of it.
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "intake per source over the last %s (non-work and rejected in events)\n", window)
	fmt.Fprintln(tw, "SOURCE\tHEALTH\tACCEPTED\tCONTINUED\tDUPLICATES\tNON-WORK\tREJECTED\tMALFORMED\tCONFLICTS\tANCHOR MISSES\tLAST EVENT")
	for _, s := range sum.Sources {
		c := s.Counts
		last := "-"
		if !s.LastEvent.IsZero() {
			last = s.LastEvent.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", cell(s.Source), cellOrDash(s.Health),
			c.Accepted, c.Continued, c.Duplicates, c.NonWork, c.Rejected, c.Malformed, c.Conflicts, c.AnchorMisses, last)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)
	tw = tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "work and deliveries per source over the last %s; DELIVERIES NOW counts every delivery by its current state, whatever its age\n", window)
	fmt.Fprintln(tw, "SOURCE\tWOKEN\tWAKE FAILED\tSETTLED\tDELIVERED\tDELIVERY FAILED\tAMBIGUOUS\tDELIVERIES NOW\tCHECKPOINT")
	for _, s := range sum.Sources {
		c := s.Counts
		var ds []string
		for _, st := range operator.DeliveryStates {
			if n := s.Deliveries[string(st)]; n > 0 {
				ds = append(ds, fmt.Sprintf("%s=%d", cell(string(st)), n))
			}
		}
		cp := "-"
		if len(s.Checkpoints) > 0 {
			var parts []string
			for _, c := range s.Checkpoints {
				who := c.Principal
				if c.Instance != "" {
					who += "/" + c.Instance
				}
				parts = append(parts, fmt.Sprintf("%s@%s (%s old)", cell(who), cellShort(c.Position, 24),
					time.Duration(c.Age*float64(time.Second)).Round(time.Second)))
			}
			cp = strings.Join(parts, "; ")
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", cell(s.Source), c.Woken, c.WakeFailed, c.Settled,
			c.Delivered, c.DeliveryFail, c.Ambiguous, cellOrDash(strings.Join(ds, " ")), cp)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "wake queue: %d pending, %d active\n", sum.WakesPending, sum.WakesActive)
	if len(sum.Attention) > 0 {
		fmt.Fprintf(a.stdout, "\n%d deliveries need attention:\n", len(sum.Attention))
		for _, d := range sum.Attention {
			fmt.Fprintf(a.stdout, "  %s %s (%s, task %s): %s\n    %s\n", cell(d.Source), cell(d.ID), cell(d.Why), cell(d.TaskID),
				cellOrDash(cellShort(d.LastError, 80)), cell(d.Resolve))
		}
	}
	return nil
}

// openEvidence opens the reader: the server's API when server is set, else the store.
func (a *app) openEvidence(ctx context.Context, server string) (evidenceReader, error) {
	if server != "" {
		// The value is never quoted back: a query or user information may hold a secret.
		u, err := url.Parse(server)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			return nil, usageError{errors.New("--server: want a base URL such as http://127.0.0.1:8788")}
		}
		if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != "" {
			return nil, usageError{errors.New("--server: want a base URL without user information, query or fragment " +
				"(such as http://127.0.0.1:8788; the admin token comes from admin_token in the configuration)")}
		}
		return &apiEvidence{base: u, token: a.cfg.AdminToken, client: &http.Client{Timeout: 30 * time.Second}}, nil
	}
	st, err := openStoreURL(ctx, a.cfg.Store)
	if err != nil {
		if errors.Is(err, store.ErrInUse) {
			return nil, fmt.Errorf("%w (a running server holds this SQLite store: read through it with --server URL)", err)
		}
		return nil, err
	}
	return &storeEvidence{st: st, configured: configuredOf(a.cfg.Sources)}, nil
}

type storeEvidence struct {
	st         store.Store
	configured map[string][]string
}

func (s *storeEvidence) list(ctx context.Context, f store.EvidenceFilter) ([]operator.EvidenceView, error) {
	rows, err := s.st.ListEvidence(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("read evidence: %w", err)
	}
	return operator.ViewEvidence(rows), nil
}

func (s *storeEvidence) summary(ctx context.Context, since time.Time) (operator.Summary, error) {
	return operator.Summarize(ctx, s.st, operator.SummaryOptions{Since: since, Configured: s.configured})
}

func (s *storeEvidence) close() { _ = s.st.Close() }

func (s *storeEvidence) now() time.Time { return store.NowFunc(s.st)() }

// apiEvidence reads a running server's /admin/api.
type apiEvidence struct {
	base   *url.URL // no user information, query or fragment (openEvidence)
	token  string
	client *http.Client
}

// origin is the server's scheme and host: what an error names of it.
func (s *apiEvidence) origin() string { return s.base.Scheme + "://" + s.base.Host }

func (s *apiEvidence) now() time.Time { return time.Now() }

func (s *apiEvidence) get(ctx context.Context, path string, q url.Values, v any) error {
	u := s.base.JoinPath(path) // under the base's path: a server behind a prefix
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("read %s from %s: %w", path, s.origin(), err)
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		// Not the *url.Error itself, which quotes the whole request URL.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("read %s from %s: %w", path, s.origin(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("read %s from %s: %s: %s", path, s.origin(), resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("read %s from %s: %w", path, s.origin(), err)
	}
	return nil
}

// apiPage is the most records one request to /admin/api/evidence returns.
const apiPage = 1000

// list reads the records matching f in as many requests as it takes: --limit 0 (all) and a limit
// above a page are not cut at one page.
func (s *apiEvidence) list(ctx context.Context, f store.EvidenceFilter) ([]operator.EvidenceView, error) {
	if f.Forward || (f.Limit > 0 && f.Limit <= apiPage) {
		return s.page(ctx, f) // a follower pages forward itself (pageForward)
	}
	rows, err := s.page(ctx, f)
	if err != nil || len(rows) < apiPage {
		return rows, err // everything there is
	}
	return s.newest(ctx, f)
}

// newest returns, newest first, the newest f.Limit records matching f (all when f.Limit is 0).
// The API lists newest first one page only, with no way to ask for the page before it, so newest
// reads oldest first from f.AfterID, page after page (after=, follow=0: what is committed now),
// keeping the newest f.Limit.
func (s *apiEvidence) newest(ctx context.Context, f store.EvidenceFilter) ([]operator.EvidenceView, error) {
	g := f
	g.Forward, g.Follow, g.Limit = true, false, apiPage
	var out []operator.EvidenceView
	for {
		rows, err := s.page(ctx, g)
		if err != nil {
			return nil, err
		}
		// Oldest first, whatever order a server of an older build answers in.
		slices.SortFunc(rows, func(a, b operator.EvidenceView) int { return cmp.Compare(a.ID, b.ID) })
		after := g.AfterID
		for _, e := range rows {
			if e.ID > g.AfterID {
				out = append(out, e)
				g.AfterID = e.ID
			}
		}
		if f.Limit > 0 && len(out) > f.Limit {
			out = append(out[:0], out[len(out)-f.Limit:]...)
		}
		// A short page is the last; a page that did not move on (a server that ignores after=)
		// would be read forever.
		if len(rows) < apiPage || g.AfterID == after {
			break
		}
	}
	slices.Reverse(out)
	return out, nil
}

// page reads one page of the records matching f: at most apiPage.
func (s *apiEvidence) page(ctx context.Context, f store.EvidenceFilter) ([]operator.EvidenceView, error) {
	q := url.Values{}
	for k, v := range map[string]string{"source": f.Source, "kind": f.Kind, "principal": f.Principal, "task": f.TaskID} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		// How long ago, which the server reads against its own clock: this host's may be off.
		q.Set("until", max(time.Since(f.Until), 0).Round(time.Millisecond).String())
	}
	if f.AfterID > 0 || f.Forward {
		q.Set("after", strconv.FormatInt(f.AfterID, 10)) // the API lists oldest first after an id
		if !f.Follow {
			q.Set("follow", "0")
		}
	}
	limit := f.Limit
	if limit <= 0 || limit > apiPage {
		limit = apiPage
	}
	q.Set("limit", strconv.Itoa(limit))
	var page operator.EvidencePage
	if err := s.get(ctx, "/admin/api/evidence", q, &page); err != nil {
		return nil, err
	}
	return page.Evidence, nil
}

func (s *apiEvidence) summary(ctx context.Context, since time.Time) (operator.Summary, error) {
	q := url.Values{}
	if !since.IsZero() {
		q.Set("since", since.UTC().Format(time.RFC3339))
	}
	var sum operator.Summary
	err := s.get(ctx, "/admin/api/summary", q, &sum)
	return sum, err
}

func (s *apiEvidence) close() {}
