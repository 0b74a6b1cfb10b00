package operator

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// Intake dispositions: the evidence kinds that say what became of one provider event, the
// disposition label of channels_intake_events_total. Each event has exactly one. anchor-miss is
// not among them: it is written beside the accepted record of the same event (the reply became a
// new task), so counting it too would count that event twice; channels_evidence_records_total
// counts it. settled is an event's disposition only when the event's acceptance wrote it (an A2A
// send that settled a finished task, recorded under its messageId's claim); a settlement through
// the worker API is no event taken in.
var Dispositions = []string{
	taskplane.EvidenceAccepted,
	taskplane.EvidenceContinued,
	taskplane.EvidenceDuplicate,
	taskplane.EvidenceDuplicateConflict,
	taskplane.EvidenceSettled,
	sources.EvidenceNonWork,
	sources.EvidenceRejected,
	sources.EvidenceMalformed,
}

// DeliveryStates lists the delivery states in their lifecycle order.
var DeliveryStates = []store.DeliveryState{store.DeliveryPrepared, store.DeliverySending, store.DeliveryDelivered,
	store.DeliveryFailed, store.DeliveryAmbiguous}

// acceptKinds are the evidence kinds written by the acceptance transaction itself.
var acceptKinds = map[string]bool{
	taskplane.EvidenceAccepted: true, taskplane.EvidenceContinued: true,
	taskplane.EvidenceDuplicate: true, taskplane.EvidenceDuplicateConflict: true,
}

// Metrics is the Prometheus surface of one Channels process: counters fed by what this process
// commits (through Store and Executor), and gauges read from the shared store at scrape time.
// Names follow the Prometheus conventions: a channels_ prefix, base units, _total on counters.
type Metrics struct {
	reg *prometheus.Registry

	intake      *prometheus.CounterVec
	evidence    *prometheus.CounterVec
	accept      *prometheus.HistogramVec
	turns       *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
}

// NewMetrics returns metrics on a registry of their own, with the Go runtime and process
// collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		intake: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "channels_intake_events_total",
			Help: "Provider and A2A events taken in by this process, each once, by source and disposition (the evidence kind: accepted, continued, duplicate, duplicate-conflict, settled, non-work, rejected, malformed-envelope; an anchor miss is accepted, and counted in channels_evidence_records_total; settled is an A2A send that settled a finished task).",
		}, []string{"source", "disposition"}),
		evidence: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "channels_evidence_records_total",
			Help: "Evidence records committed by this process, by source and kind.",
		}, []string{"source", "kind"}),
		accept: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "channels_accept_duration_seconds",
			Help:    "Time the acceptance transaction of one event (accepted, continued, duplicate, duplicate-conflict or settled) took to commit durably, by source.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"source"}),
		turns: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "channels_executor_turn_duration_seconds",
			Help:    "Duration of executor turns, by executor and outcome (ok or error).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 18),
		}, []string{"executor", "outcome"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "channels_store_errors_total",
			Help: "Store operations that failed (not-found and cancelled calls excluded), by operation (update, read, scrape).",
		}, []string{"operation"}),
	}
	m.reg.MustRegister(m.intake, m.evidence, m.accept, m.turns, m.storeErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, op := range []string{"update", "read", "scrape"} {
		m.storeErrors.WithLabelValues(op)
	}
	return m
}

// Registry returns the registry, for callers that add collectors of their own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// InitSource makes a source's intake series exist at zero before its first event, so rates and
// alerts work from the start.
func (m *Metrics) InitSource(source string) {
	for _, d := range Dispositions {
		m.intake.WithLabelValues(source, d)
	}
	m.accept.WithLabelValues(source)
}

// observeCommitted counts the evidence one committed transaction wrote, and the transaction's
// duration as an acceptance latency when it was an acceptance. claimed says the transaction
// recorded an event's claim: its settled evidence, if any, is that event's disposition.
func (m *Metrics) observeCommitted(es []store.Evidence, claimed bool, elapsed time.Duration) {
	accepted := map[string]bool{}
	for _, e := range es {
		m.evidence.WithLabelValues(e.Source, e.Kind).Inc()
		settlement := e.Kind == taskplane.EvidenceSettled && claimed
		if isDisposition(e.Kind) && (e.Kind != taskplane.EvidenceSettled || settlement) {
			m.intake.WithLabelValues(e.Source, e.Kind).Add(float64(eventCount(e.Detail)))
		}
		if (acceptKinds[e.Kind] || settlement) && !accepted[e.Source] {
			accepted[e.Source] = true
			m.accept.WithLabelValues(e.Source).Observe(elapsed.Seconds())
		}
	}
}

func isDisposition(kind string) bool {
	for _, d := range Dispositions {
		if d == kind {
			return true
		}
	}
	return false
}

// eventCount is how many events an evidence row stands for: its "count" detail, else 1.
func eventCount(detail []byte) int64 {
	var d struct {
		Count *float64 `json:"count"`
	}
	if len(detail) == 0 || json.Unmarshal(detail, &d) != nil || d.Count == nil || *d.Count < 1 {
		return 1
	}
	return int64(*d.Count)
}

// storeError counts a failed store call, unless it is an ordinary outcome (not found, a
// cancelled or timed-out caller).
func (m *Metrics) storeError(op string, err error) {
	if isStoreFailure(err) {
		m.storeErrors.WithLabelValues(op).Inc()
	}
}

// storeUnanswered counts a store call that ran out of a time bound this package set itself (the
// readiness check's, a scrape's), its caller still waiting: a store that does not answer at all
// (a partition) is failing, though storeError leaves timed-out callers out.
func (m *Metrics) storeUnanswered(op string, err error) {
	if errors.Is(err, context.DeadlineExceeded) {
		m.storeErrors.WithLabelValues(op).Inc()
	}
}

// isStoreFailure reports whether err is a failure of the store, not an ordinary outcome (nil,
// not found, a concurrent transaction's change, a cancelled or timed-out caller).
func isStoreFailure(err error) bool {
	return err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConcurrentModification) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// Store returns st instrumented: every committed transaction's evidence feeds the intake and
// evidence counters (so a count is never ahead of what is durable), acceptance transactions feed
// the latency histogram, and failed calls the store error counter. Write transactions that fail
// in the store, several in a row, make /readyz answer 503 when a Server reads this store (see
// CheckWrites). The task plane and the sources use the returned store in place of st.
func (m *Metrics) Store(st store.Store) store.Store { return &instrumentedStore{Store: st, m: m} }

type instrumentedStore struct {
	store.Store
	m      *Metrics
	writes writeHealth
}

// Now is the wrapped store's clock (store.Clock: on Postgres, the database's), so the task plane
// and the delivery engine built on the instrumented store measure leases on it.
func (s *instrumentedStore) Now() time.Time { return store.NowFunc(s.Store)() }

// evidenceTx records the evidence a transaction inserts, and whether it recorded an event's
// claim (an acceptance).
type evidenceTx struct {
	store.Tx
	seen    *[]store.Evidence
	claimed *bool
	tasked  *bool // a task was inserted: an acceptance of new work, not a direct reply
}

func (t evidenceTx) InsertTask(ctx context.Context, task store.Task) error {
	err := t.Tx.InsertTask(ctx, task)
	if err == nil {
		*t.tasked = true
	}
	return err
}

func (t evidenceTx) InsertClaim(ctx context.Context, c store.Claim) (store.Claim, bool, error) {
	existing, inserted, err := t.Tx.InsertClaim(ctx, c)
	if err == nil && inserted {
		*t.claimed = true
	}
	return existing, inserted, err
}

func (t evidenceTx) InsertNewClaim(ctx context.Context, c store.Claim) error {
	err := store.InsertNewClaim(ctx, t.Tx, c)
	if err == nil {
		*t.claimed = true // a held-back insert that fails later fails the Update, which then counts nothing
	}
	return err
}

func (t evidenceTx) PrefetchAcceptance(ctx context.Context, principal, source, identity, conversationKey string) error {
	return store.PrefetchAcceptance(ctx, t.Tx, principal, source, identity, conversationKey)
}

func (t evidenceTx) InsertEvidence(ctx context.Context, e store.Evidence) error {
	err := t.Tx.InsertEvidence(ctx, e)
	if err == nil {
		*t.seen = append(*t.seen, e)
	}
	return err
}

func (s *instrumentedStore) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	var (
		seen    []store.Evidence
		claimed bool
		tasked  bool
		fnErr   error
	)
	start := time.Now()
	err := s.Store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		// fn may run more than once (a retried transaction): only the last run commits.
		seen, claimed, tasked = seen[:0], false, false
		fnErr = fn(ctx, evidenceTx{Tx: tx, seen: &seen, claimed: &claimed, tasked: &tasked})
		return fnErr
	})
	if err != nil {
		// fn's own error (not found, a conflict, a refusal) is the caller's outcome, not the
		// store's, unless it passes on the database's failure: only those count as failed writes.
		if fnErr == nil || !errors.Is(err, fnErr) {
			s.m.storeError("update", err)
			if isStoreFailure(err) {
				s.writes.record(time.Now(), err)
			}
		} else if store.StorageFault(fnErr) {
			// On Postgres a full disk fails the statement that needs a new page, inside fn; on
			// SQLite a read-only database file fails the first statement that writes.
			s.m.storeError("update", fnErr)
			s.writes.record(time.Now(), fnErr)
		}
		return err
	}
	s.m.observeCommitted(seen, claimed, time.Since(start))
	if claimed && tasked {
		s.writes.wrote() // an acceptance of new work committed: the store takes real writes
	}
	return nil
}

func (s *instrumentedStore) GetTask(ctx context.Context, principal, id string) (store.Task, error) {
	t, err := s.Store.GetTask(ctx, principal, id)
	s.m.storeError("read", err)
	return t, err
}

func (s *instrumentedStore) ListTasks(ctx context.Context, principal string, f store.TaskFilter) ([]store.Task, int, error) {
	ts, n, err := s.Store.ListTasks(ctx, principal, f)
	s.m.storeError("read", err)
	return ts, n, err
}

func (s *instrumentedStore) TaskEvents(ctx context.Context, principal, taskID string, after int64, limit int) ([]store.TaskEvent, error) {
	es, err := s.Store.TaskEvents(ctx, principal, taskID, after, limit)
	s.m.storeError("read", err)
	return es, err
}

func (s *instrumentedStore) ListEvidence(ctx context.Context, f store.EvidenceFilter) ([]store.Evidence, error) {
	es, err := s.Store.ListEvidence(ctx, f)
	s.m.storeError("read", err)
	return es, err
}

// Executor returns ex timed: each turn's duration goes to channels_executor_turn_duration_seconds
// under name. What ex also implements (taskplane.Canceler, taskplane.DirectResponder) stays
// visible on the result.
func (m *Metrics) Executor(ex taskplane.Executor, name string) taskplane.Executor {
	t := &timedExecutor{ex: ex, name: name, m: m}
	c, isC := ex.(taskplane.Canceler)
	d, isD := ex.(taskplane.DirectResponder)
	switch {
	case isC && isD:
		return struct {
			*timedExecutor
			taskplane.Canceler
			taskplane.DirectResponder
		}{t, c, d}
	case isC:
		return struct {
			*timedExecutor
			taskplane.Canceler
		}{t, c}
	case isD:
		return struct {
			*timedExecutor
			taskplane.DirectResponder
		}{t, d}
	}
	return t
}

type timedExecutor struct {
	ex   taskplane.Executor
	name string
	m    *Metrics
}

// Inline returns the inner executor's InlineFunc, or nil when it has none. The turns it runs
// are recorded by InlineKept, once each is committed.
func (t *timedExecutor) Inline() taskplane.InlineFunc {
	if ie, ok := t.ex.(taskplane.InlineExecutor); ok {
		return ie.Inline()
	}
	return nil
}

// InlineKept records an inline turn the plane committed as a turn of the executor.
func (t *timedExecutor) InlineKept(elapsed time.Duration) {
	t.m.ObserveTurn(t.name, nil, elapsed)
}

func (t *timedExecutor) Execute(ctx context.Context, turn *taskplane.Turn) error {
	start := time.Now()
	err := t.ex.Execute(ctx, turn)
	t.m.ObserveTurn(t.name, err, time.Since(start))
	return err
}

// ObserveTurn records a turn of executor that took elapsed in
// channels_executor_turn_duration_seconds, with outcome error when err is set, else ok. Executor
// (the wrapper) does so for the executors Channels calls; the worker API, whose turns are run by
// resident agents, reports its own (worker.Config.TurnEnded).
func (m *Metrics) ObserveTurn(executor string, err error, elapsed time.Duration) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.turns.WithLabelValues(executor, outcome).Observe(elapsed.Seconds())
}

// scrapeCache is how long the store gauges are reused between scrapes, so an eager scraper
// cannot turn into a load on the store.
const scrapeCache = 5 * time.Second

// scrapeTimeout bounds the store reads of one scrape.
const scrapeTimeout = 3 * time.Second

// storeGaugesStale bounds the age of the store gauges a scrape serves when it cannot read the
// store: within it the last values are served (one failed read does not break the series), past
// it they are left out rather than repeated as if current. channels_store_up says which.
const storeGaugesStale = 30 * time.Second

// WatchStore registers the gauges read from the store at scrape time: the wake queue's depth,
// deliveries by source, lane and state, and tasks by source and state, with channels_store_up,
// whether the store answered the last read. They describe the shared store, so every process
// sharing a Postgres store reports the same values.
func (m *Metrics) WatchStore(r store.Reader) {
	m.reg.MustRegister(&storeCollector{r: r, m: m})
}

// WatchPlane registers the SSE subscriber gauge of p: its streams (Plane.Subscribers).
func (m *Metrics) WatchPlane(p *taskplane.Plane) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "channels_sse_subscribers",
		Help: "A2A streams (SendStreamingMessage, SubscribeToTask) following a task in this process; blocking sends are not counted.",
	}, func() float64 { return float64(p.Subscribers()) }))
}

// WatchStreams registers the gauge of the A2A streams holding a slot (a2aservice's OpenStreams):
// unlike channels_sse_subscribers it counts a stream from its admission, also one stalled on its
// first write or answering a direct Message.
func (m *Metrics) WatchStreams(open func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "channels_a2a_streams_open",
		Help: "A2A streams holding one of max_streams' slots in this process, from their admission to their end.",
	}, func() float64 { return float64(open()) }))
}

// WatchBlockingSends registers the gauge of the blocking A2A sends waiting for their task
// (a2aservice's BlockingSends), each holding one of max_blocking_sends' slots, and the counter of
// those answered at once because a bound was full (BlockingSendsUnwaited).
func (m *Metrics) WatchBlockingSends(waiting func() int, unwaited func() (principal, server int64)) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "channels_a2a_blocking_sends_waiting",
		Help: "Blocking A2A sends waiting for their task in this process, each holding one of max_blocking_sends' slots.",
	}, func() float64 { return float64(waiting()) }))
	const name, help = "channels_a2a_blocking_sends_unwaited_total",
		"Blocking A2A sends answered at once with the task as accepted, without waiting, because a bound was full: max_blocking_sends_per_principal (bound=principal) or max_blocking_sends (bound=server)."
	for _, b := range []struct {
		label string
		value func() int64
	}{
		{"principal", func() int64 { p, _ := unwaited(); return p }},
		{"server", func() int64 { _, s := unwaited(); return s }},
	} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: name, Help: help, ConstLabels: prometheus.Labels{"bound": b.label},
		}, func() float64 { return float64(b.value()) }))
	}
}

// WatchHealth registers channels_source_up (1 healthy, 0 not) per configured instance.
func (m *Metrics) WatchHealth(h *Health) {
	m.reg.MustRegister(&healthCollector{h: h})
}

var (
	wakeDesc = prometheus.NewDesc("channels_wake_queue_depth",
		"Wakes in the queue, by state (pending: waiting for an executor; active: a turn holds it).", []string{"state"}, nil)
	deliveriesDesc = prometheus.NewDesc("channels_deliveries",
		"Outbound deliveries in the store, by source and state.", []string{"source", "state"}, nil)
	tasksDesc = prometheus.NewDesc("channels_tasks",
		"Tasks in the store, by source and state.", []string{"source", "state"}, nil)
	storeUpDesc = prometheus.NewDesc("channels_store_up",
		"Whether the store answered the last read of the store gauges (1) or not (0).", nil, nil)
	sourceUpDesc = prometheus.NewDesc("channels_source_up",
		"Whether a configured source instance passes its health check (1) or not (0).", []string{"source", "instance"}, nil)
)

type storeCollector struct {
	r   store.Reader
	m   *Metrics
	now func() time.Time // nil: time.Now

	mu      sync.Mutex
	at      time.Time // when metrics were read
	up      bool      // whether the last read succeeded
	metrics []prometheus.Metric
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- storeUpDesc
	ch <- wakeDesc
	ch <- deliveriesDesc
	ch <- tasksDesc
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	if now().Sub(c.at) > scrapeCache {
		ms, err := c.read()
		if err != nil {
			// The scrape's reads run under its own time bound, not a caller's: one that ran out
			// is a store that did not answer (a partition, a blackholed failover address).
			c.m.storeError("scrape", err)
			c.m.storeUnanswered("scrape", err)
			c.up = false
		} else {
			c.metrics, c.at, c.up = ms, now(), true
		}
	}
	up := 0.0
	if c.up {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, up)
	if now().Sub(c.at) > storeGaugesStale {
		return // the store has not answered for a while: no values rather than frozen ones
	}
	for _, m := range c.metrics {
		ch <- m
	}
}

func (c *storeCollector) read() ([]prometheus.Metric, error) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	var out []prometheus.Metric
	for _, st := range []store.WakeState{store.WakePending, store.WakeActive} {
		n, err := c.r.CountWakes(ctx, st, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, prometheus.MustNewConstMetric(wakeDesc, prometheus.GaugeValue, float64(n), string(st)))
	}
	ds, err := c.r.CountDeliveries(ctx, "")
	if err != nil {
		return nil, err
	}
	// By source and state, not lane: a lane is a conversation (a Slack channel, a DM), as many as
	// the people the bot answered, too many for series (`channels deliveries` lists lanes). Every
	// state of a source that has deliveries is there, zeros included, so "ambiguous > 0" alerts
	// see the series before the first ambiguous delivery.
	bySourceState := map[string]map[store.DeliveryState]int64{}
	for _, d := range ds {
		if bySourceState[d.Source] == nil {
			bySourceState[d.Source] = map[store.DeliveryState]int64{}
		}
		bySourceState[d.Source][d.State] += d.N
	}
	for source, states := range bySourceState {
		for _, st := range DeliveryStates {
			out = append(out, prometheus.MustNewConstMetric(deliveriesDesc, prometheus.GaugeValue, float64(states[st]), source, string(st)))
		}
	}
	ts, err := c.r.CountTasks(ctx)
	if err != nil {
		return nil, err
	}
	bySource := map[[2]string]int64{}
	for _, t := range ts {
		bySource[[2]string{t.Source, t.State}] += t.N
	}
	for k, n := range bySource {
		out = append(out, prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(n), k[0], k[1]))
	}
	return out, nil
}

type healthCollector struct{ h *Health }

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sourceUpDesc }

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.h.Sources() {
		v := 0.0
		if s.Healthy() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(sourceUpDesc, prometheus.GaugeValue, v, s.Source, s.Instance)
	}
}
