package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// EvidenceView is one evidence record as operators see it: in `channels evidence --json`, in
// GET /admin/api/evidence and on the dashboard. Detail is the record's JSON detail, which never
// holds secrets or message bodies.
type EvidenceView struct {
	ID        int64           `json:"id"`
	Time      time.Time       `json:"time"`
	Source    string          `json:"source"`
	Kind      string          `json:"kind"`
	Principal string          `json:"principal"`
	TaskID    string          `json:"taskId,omitempty"`
	Detail    json.RawMessage `json:"detail,omitempty"`
}

// ViewEvidence converts store rows.
func ViewEvidence(es []store.Evidence) []EvidenceView {
	out := make([]EvidenceView, len(es))
	for i, e := range es {
		out[i] = EvidenceView{ID: e.ID, Time: e.CreatedAt, Source: e.Source, Kind: e.Kind, Principal: e.Principal, TaskID: e.TaskID}
		if json.Valid(e.Detail) {
			out[i].Detail = json.RawMessage(e.Detail)
		}
	}
	return out
}

// DetailText renders a detail object on one line: "identity=E1 reason=bot", keys sorted.
func (e EvidenceView) DetailText() string {
	var m map[string]any
	if len(e.Detail) == 0 || json.Unmarshal(e.Detail, &m) != nil {
		return string(e.Detail)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := m[k]
		var s string
		switch v := v.(type) {
		case string:
			s = v
		default:
			b, _ := json.Marshal(v)
			s = string(b)
		}
		parts = append(parts, k+"="+s)
	}
	return strings.Join(parts, " ")
}

// Counts are one source's evidence counts over the summary's window. Counted kinds (non-work,
// rejected) are in events, not rows.
type Counts struct {
	Accepted   int64 `json:"accepted"`
	Continued  int64 `json:"continued"`
	Duplicates int64 `json:"duplicates"`
	NonWork    int64 `json:"nonWork"`
	Rejected   int64 `json:"rejected"`
	Malformed  int64 `json:"malformed"`
	Conflicts  int64 `json:"conflicts"`
	// Settled counts outcomes recorded on finished tasks: settling A2A sends (under a2a) and
	// worker API settlements (under the task's source).
	Settled      int64 `json:"settled"`
	AnchorMisses int64 `json:"anchorMisses"`
	Woken        int64 `json:"woken"`
	WakeFailed   int64 `json:"wakeFailed"`
	Delivered    int64 `json:"delivered"`
	DeliveryFail int64 `json:"deliveryFailed"`
	Ambiguous    int64 `json:"deliveryAmbiguous"`
}

// add counts n events of kind.
func (c *Counts) add(kind string, n int64) {
	switch kind {
	case taskplane.EvidenceAccepted:
		c.Accepted += n
	case taskplane.EvidenceContinued:
		c.Continued += n
	case taskplane.EvidenceDuplicate:
		c.Duplicates += n
	case sources.EvidenceNonWork:
		c.NonWork += n
	case sources.EvidenceRejected:
		c.Rejected += n
	case sources.EvidenceMalformed:
		c.Malformed += n
	case taskplane.EvidenceDuplicateConflict, delivery.EvidenceConflict:
		c.Conflicts += n
	case taskplane.EvidenceSettled:
		c.Settled += n
	case taskplane.EvidenceAnchorMiss:
		c.AnchorMisses += n
	case taskplane.EvidenceWoken:
		c.Woken += n
	case taskplane.EvidenceWakeFailed:
		c.WakeFailed += n
	case delivery.EvidenceDelivered, delivery.EvidenceReconciled:
		c.Delivered += n
	case delivery.EvidenceFailed:
		c.DeliveryFail += n
	case delivery.EvidenceAmbiguous:
		c.Ambiguous += n
	}
}

// CheckpointView is the intake position of one instance of a source that a principal configured.
type CheckpointView struct {
	Principal string `json:"principal"`
	// Instance is the source instance the position is of ("" for a position stored before
	// positions were kept per instance, until an instance takes it over).
	Instance  string    `json:"instance,omitempty"`
	Position  string    `json:"position"`
	Seq       int64     `json:"seq"`
	UpdatedAt time.Time `json:"updatedAt"`
	// Age is how long ago the checkpoint last moved, in seconds.
	Age float64 `json:"ageSeconds"`
}

// SourceSummary is what an operator needs to know about one source.
type SourceSummary struct {
	Source string `json:"source"`
	// Instances are the configured instances (none for a source seen only in the evidence).
	Instances []string `json:"instances,omitempty"`
	// Health is the worst status of the source's instances ("" when not tracked: the CLI reads
	// the store, not a running server).
	Health string `json:"health,omitempty"`
	// HealthDetail is each instance's tracked health.
	HealthDetail []SourceHealth `json:"healthDetail,omitempty"`
	Counts       Counts         `json:"counts"`
	// Deliveries counts the source's deliveries by state (all time: a delivery is state, not an
	// event).
	Deliveries  map[string]int64 `json:"deliveries"`
	Checkpoints []CheckpointView `json:"checkpoints,omitempty"`
	// LastEvent is the newest evidence of the source in the window (zero if none).
	LastEvent time.Time `json:"lastEvent,omitzero"`
	// Series are the hourly counts of the source's main dispositions, oldest first, when the
	// summary was asked for buckets.
	Series []Series `json:"series,omitempty"`
}

// Series is one line of a chart: counts per bucket.
type Series struct {
	Name   string  `json:"name"`
	Counts []int64 `json:"counts"`
}

// DeliveryView is a delivery that needs an operator, with the command that settles it.
type DeliveryView struct {
	delivery.Record
	// Why says what is wrong: "ambiguous", "failed", or "stuck in sending".
	Why string `json:"why"`
	// Resolve is the exact command that settles it, with a placeholder for the choice.
	Resolve string `json:"resolve"`
}

// Summary is the per-source operator summary over a window.
type Summary struct {
	GeneratedAt time.Time       `json:"generatedAt"`
	Since       time.Time       `json:"since,omitzero"`
	Sources     []SourceSummary `json:"sources"`
	// WakesPending and WakesActive are the wake queue's depth.
	WakesPending int `json:"wakesPending"`
	WakesActive  int `json:"wakesActive"`
	// Attention lists the deliveries an operator must look at.
	Attention []DeliveryView `json:"attention"`
	// BucketWidth and Buckets describe the chart series (zero without buckets).
	BucketWidth time.Duration `json:"-"`
	Buckets     []time.Time   `json:"buckets,omitempty"`
}

// OfSource returns the summary of one source: its line and the deliveries of it that need
// attention. The wake queue's depth stays the whole queue's (wakes are not counted per source).
func (s Summary) OfSource(source string) Summary {
	s.Sources = slices.DeleteFunc(slices.Clone(s.Sources), func(x SourceSummary) bool { return x.Source != source })
	s.Attention = slices.DeleteFunc(slices.Clone(s.Attention), func(d DeliveryView) bool { return d.Source != source })
	return s
}

// SummaryOptions say what to summarize.
type SummaryOptions struct {
	// Since starts the counting window (zero: all time).
	Since time.Time
	// Now is the clock (zero: time.Now).
	Now time.Time
	// Configured maps each configured source to its instances; such a source is listed even
	// without evidence.
	Configured map[string][]string
	// Health, when set, supplies live health (a running server).
	Health *Health
	// Buckets, when positive, adds per-source series of this many buckets between Since and Now
	// (Since must be set).
	Buckets int
	// StuckAfter is how long past its lease a delivery in sending counts as stuck (default 5m).
	StuckAfter time.Duration
}

// attentionLimit bounds the deliveries listed for attention per state.
const attentionLimit = 50

// Summarize reads the per-source summary from the store.
func Summarize(ctx context.Context, r store.Reader, o SummaryOptions) (Summary, error) {
	now := o.Now
	if now.IsZero() {
		now = store.NowFunc(r)() // the clock the leases it compares were written on
	}
	now = now.UTC()
	sum := Summary{GeneratedAt: now, Since: o.Since, Sources: []SourceSummary{}} // [] in JSON when empty, not null
	bySource := map[string]*SourceSummary{}
	get := func(name string) *SourceSummary {
		if s := bySource[name]; s != nil {
			return s
		}
		s := &SourceSummary{Source: name, Deliveries: map[string]int64{}}
		bySource[name] = s
		return s
	}
	for name, inst := range o.Configured {
		get(name).Instances = slices.Sorted(slices.Values(inst))
	}
	counts, err := r.CountEvidence(ctx, store.EvidenceCountFilter{Since: o.Since})
	if err != nil {
		return sum, fmt.Errorf("summary: %w", err)
	}
	for _, c := range counts {
		if c.Source == "" {
			continue // retention and other process-wide records
		}
		s := get(c.Source)
		s.Counts.add(c.Kind, c.Events)
		if c.Last.After(s.LastEvent) {
			s.LastEvent = c.Last
		}
	}
	ds, err := r.CountDeliveries(ctx, "")
	if err != nil {
		return sum, fmt.Errorf("summary: %w", err)
	}
	for _, d := range ds {
		get(d.Source).Deliveries[string(d.State)] += d.N
	}
	cps, err := r.ListCheckpoints(ctx, "")
	if err != nil {
		return sum, fmt.Errorf("summary: %w", err)
	}
	for _, c := range cps {
		s := get(c.Source)
		s.Checkpoints = append(s.Checkpoints, CheckpointView{Principal: c.Principal, Instance: c.Instance, Position: printable(c.Position),
			Seq: c.Seq, UpdatedAt: c.UpdatedAt, Age: now.Sub(c.UpdatedAt).Seconds()})
	}
	if o.Buckets > 0 && !o.Since.IsZero() {
		if err := addSeries(ctx, r, &sum, bySource, o, now); err != nil {
			return sum, err
		}
	}
	if o.Health != nil {
		for _, h := range o.Health.Sources() {
			s := get(h.Source)
			s.HealthDetail = append(s.HealthDetail, h)
		}
		for _, s := range bySource {
			s.Health = o.Health.Source(s.Source)
		}
	}
	for _, s := range bySource {
		for _, st := range DeliveryStates {
			if _, ok := s.Deliveries[string(st)]; !ok {
				s.Deliveries[string(st)] = 0
			}
		}
		sum.Sources = append(sum.Sources, *s)
	}
	sort.Slice(sum.Sources, func(i, j int) bool { return sum.Sources[i].Source < sum.Sources[j].Source })

	if sum.WakesPending, err = r.CountWakes(ctx, store.WakePending, 0); err != nil {
		return sum, fmt.Errorf("summary: %w", err)
	}
	if sum.WakesActive, err = r.CountWakes(ctx, store.WakeActive, 0); err != nil {
		return sum, fmt.Errorf("summary: %w", err)
	}
	if sum.Attention, err = Attention(ctx, r, now, o.StuckAfter); err != nil {
		return sum, err
	}
	return sum, nil
}

// chartKinds are the series drawn per source, in order.
var chartKinds = []struct{ name, kind string }{
	{"accepted", taskplane.EvidenceAccepted},
	{"continued", taskplane.EvidenceContinued},
	{"duplicate", taskplane.EvidenceDuplicate},
	{"non-work", sources.EvidenceNonWork},
	{"failed", ""}, // rejected, malformed, conflicts, wake and delivery failures
}

// failureKinds feed the "failed" series.
var failureKinds = map[string]bool{
	sources.EvidenceRejected: true, sources.EvidenceMalformed: true, taskplane.EvidenceDuplicateConflict: true,
	taskplane.EvidenceWakeFailed: true, delivery.EvidenceFailed: true, delivery.EvidenceAmbiguous: true,
}

func addSeries(ctx context.Context, r store.Reader, sum *Summary, bySource map[string]*SourceSummary, o SummaryOptions, now time.Time) error {
	width := now.Sub(o.Since) / time.Duration(o.Buckets)
	if width <= 0 {
		return nil
	}
	width = width.Truncate(time.Microsecond)
	sum.BucketWidth = width
	for i := range o.Buckets {
		sum.Buckets = append(sum.Buckets, o.Since.Add(time.Duration(i)*width))
	}
	rows, err := r.CountEvidence(ctx, store.EvidenceCountFilter{Since: o.Since, Bucket: width})
	if err != nil {
		return fmt.Errorf("summary series: %w", err)
	}
	series := map[string]map[string][]int64{} // source → series name → counts
	for _, s := range bySource {
		m := map[string][]int64{}
		for _, k := range chartKinds {
			m[k.name] = make([]int64, o.Buckets)
		}
		series[s.Source] = m
	}
	for _, c := range rows {
		m := series[c.Source]
		if m == nil {
			continue
		}
		i := int(c.Bucket.Sub(o.Since) / width)
		if i < 0 || i >= o.Buckets {
			continue
		}
		name := ""
		for _, k := range chartKinds {
			if k.kind != "" && k.kind == c.Kind {
				name = k.name
			}
		}
		if name == "" && failureKinds[c.Kind] {
			name = "failed"
		}
		if name != "" {
			m[name][i] += c.Events
		}
	}
	for src, m := range series {
		for _, k := range chartKinds {
			bySource[src].Series = append(bySource[src].Series, Series{Name: k.name, Counts: m[k.name]})
		}
	}
	return nil
}

// Attention lists the deliveries an operator must settle: ambiguous ones, failed ones (except
// those an operator abandoned: settled already), and ones left in sending past their lease by
// more than stuckAfter (their engine is gone).
func Attention(ctx context.Context, r store.Reader, now time.Time, stuckAfter time.Duration) ([]DeliveryView, error) {
	if stuckAfter <= 0 {
		stuckAfter = 5 * time.Minute
	}
	out := []DeliveryView{} // [] in JSON when none
	for _, st := range []store.DeliveryState{store.DeliveryAmbiguous, store.DeliverySending, store.DeliveryFailed} {
		// The store leaves the abandoned ones out before the limit, so that they cannot crowd
		// out the failed ones still waiting for an operator; and of the ones in sending it keeps
		// the stuck ones only, so that deliveries in flight cannot crowd them out.
		f := store.DeliveryFilter{State: st, OmitAbandoned: true, Limit: attentionLimit}
		if st == store.DeliverySending {
			f.LeaseRanOutBefore = now.Add(-stuckAfter).Add(time.Microsecond) // stuck from stuckAfter on
		}
		rows, err := r.ListDeliveries(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("deliveries needing attention: %w", err)
		}
		if st == store.DeliverySending {
			// Released after an unknown outcome and then never worked again: no engine routes
			// its source any more (its instance was removed).
			unleased, err := r.ListDeliveries(ctx, store.DeliveryFilter{State: st,
				UnleasedIdleBefore: now.Add(-delivery.UnleasedStuckAfter()), Limit: attentionLimit})
			if err != nil {
				return nil, fmt.Errorf("deliveries needing attention: %w", err)
			}
			rows = append(rows, unleased...)
		}
		for _, d := range rows {
			v := DeliveryView{Record: recordOf(d), Why: string(st)}
			switch st {
			case store.DeliverySending:
				v.Why = "stuck in sending"
				v.Resolve = ResolveCommand(d.Principal, d.ID, "--delivered PROVIDER_ID | --retry | --abandon")
			case store.DeliveryFailed:
				v.Resolve = ResolveCommand(d.Principal, d.ID, "--retry | --abandon")
			default:
				v.Resolve = ResolveCommand(d.Principal, d.ID, "--delivered PROVIDER_ID | --retry | --abandon")
			}
			out = append(out, v)
		}
	}
	return out, nil
}

// recordOf is the operator's view of a delivery row, without its payload (it may hold a
// message body).
func recordOf(d store.Delivery) delivery.Record {
	return delivery.Record{Principal: d.Principal, ID: d.ID, TaskID: d.TaskID, Source: d.Source, Operation: d.Operation,
		Recovery: delivery.Recovery(d.Recovery), Lane: d.Lane, PayloadDigest: d.PayloadDigest, State: delivery.State(d.State),
		Attempts: d.Attempts, Reconciles: d.Reconciles, NextAttemptAt: d.NextAttemptAt, LeaseOwner: d.LeaseOwner,
		LeaseUntil: d.LeaseUntil, ProviderID: d.ProviderID,
		LastError: d.LastError, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
}

// ResolveCommand is the `channels deliveries resolve` command line for a delivery, with choice
// written where the operator picks (--delivered PROVIDER_ID, --retry or --abandon).
func ResolveCommand(principal, id, choice string) string {
	return "channels deliveries resolve " + ShellQuote(id) + " --principal " + ShellQuote(principal) + " " + choice
}

// ShellQuote quotes s for a POSIX shell when it needs quoting.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@+=,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// printable renders an opaque checkpoint position: as text when it is short printable UTF-8,
// else as hex, cut to 64 characters.
func printable(b []byte) string {
	s := string(b)
	ok := utf8.Valid(b) && strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) < 0
	if !ok {
		s = fmt.Sprintf("%x", b)
	}
	if r := []rune(s); len(r) > 64 {
		s = string(r[:63]) + "…"
	}
	return s
}
