package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/channels-dev/channels/internal/outage"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// AnchorRecorder records a question's provider ID as a reply anchor of its task, for the input
// request the question asked (its event sequence, Request.InputSeq; 0 when the request named
// none), inside the transaction that marks the question delivered. taskplane.RecordAnchorTx is
// the default; sources.RecordAnchorTx adds the matrix check that the source continues by reply
// anchor.
type AnchorRecorder func(ctx context.Context, tx store.Tx, principal, source, providerID, taskID string, inputSeq int64, now time.Time) error

// Engine defaults.
const (
	DefaultLease       = time.Minute
	DefaultSendTimeout = 30 * time.Second
	DefaultPoll        = time.Second
	DefaultWorkers     = 16
	// finishTimeout bounds recording an outcome after the provider call; it runs even when the
	// caller's context has ended, because a lost outcome costs a reconciliation.
	finishTimeout = 30 * time.Second
)

// Engine delivers: it keeps every delivery's state in the store, makes at most one provider call
// per delivery at a time across goroutines (a per-ID lock) and processes (a lease row), retries,
// honours lanes, and recovers deliveries left in sending. It is safe for concurrent use.
//
// Prepare, Deliver and Process work without Run; Run adds the loop that retries, snoozes, and
// recovers on its own, continuously.
type Engine struct {
	store   store.Store
	router  Router
	sources []string // claim only these (nil = any)
	noClaim bool     // the router lists no sources: claim nothing

	now    func() time.Time
	log    *slog.Logger
	owner  string
	policy Policy
	lease  time.Duration
	// finishTimeout bounds recording an outcome (finishTimeout; tests shorten it).
	finishTimeout time.Duration
	sendTimeout   time.Duration
	poll          time.Duration
	workers       int
	anchor        AnchorRecorder
	// claims follows Run's failed claims (the store down): it backs the loop off and keeps the
	// log to a line now and then.
	claims outage.Tracker

	locks   keyLocks
	changed signal
	poke    chan struct{}

	mu      sync.Mutex
	running bool
	stop    context.CancelFunc
	done    chan struct{}
	closed  atomic.Bool
}

// Option configures an Engine.
type Option func(*Engine)

// WithClock sets the clock (tests; lanes and retries are measured on it).
func WithClock(now func() time.Time) Option { return func(e *Engine) { e.now = now } }

// WithLogger sets the logger (nil: slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(e *Engine) {
		if l != nil {
			e.log = l
		}
	}
}

// WithOwner names this engine in leases and evidence (default: a random id per engine). Two
// engines must never share an owner name.
func WithOwner(owner string) Option { return func(e *Engine) { e.owner = owner } }

// WithPolicy sets the retry policy; zero fields take DefaultPolicy's values.
func WithPolicy(p Policy) Option { return func(e *Engine) { e.policy = p.withDefaults() } }

// WithLease sets how long a claimed delivery stays leased (default 1m). After a crash, a delivery
// left in sending is recovered once its lease runs out. It must exceed the send timeout.
func WithLease(d time.Duration) Option { return func(e *Engine) { e.lease = d } }

// WithSendTimeout bounds one provider call or lookup (default 30s).
func WithSendTimeout(d time.Duration) Option { return func(e *Engine) { e.sendTimeout = d } }

// WithPoll sets how often Run and Wait look at the store when nothing in this process pokes them
// (default 1s): deliveries prepared or settled by other processes.
func WithPoll(d time.Duration) Option { return func(e *Engine) { e.poll = d } }

// WithWorkers bounds the provider calls Run makes at once (default 16).
func WithWorkers(n int) Option { return func(e *Engine) { e.workers = n } }

// WithAnchorRecorder sets how a delivered question's anchor is recorded (default
// taskplane.RecordAnchorTx).
func WithAnchorRecorder(r AnchorRecorder) Option { return func(e *Engine) { e.anchor = r } }

// New returns an engine over s that reaches sources through router (nil: no routes, enough for
// operator commands). The caller keeps ownership of s.
func New(s store.Store, router Router, opts ...Option) *Engine {
	if router == nil {
		router = Routes{}
	}
	e := &Engine{
		store:         s,
		router:        router,
		now:           store.NowFunc(s),
		log:           slog.Default(),
		owner:         "engine-" + uuid.NewString(),
		policy:        DefaultPolicy.withDefaults(),
		lease:         DefaultLease,
		finishTimeout: finishTimeout,
		sendTimeout:   DefaultSendTimeout,
		poll:          DefaultPoll,
		workers:       DefaultWorkers,
		anchor:        taskplane.RecordAnchorTx,
		poke:          make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(e)
	}
	if lister, ok := router.(interface{ Sources() []string }); ok {
		e.sources = lister.Sources()
		e.noClaim = len(e.sources) == 0
	}
	e.workers = max(e.workers, 1)
	e.lease = max(e.lease, e.sendTimeout+time.Second)
	// Several engines may run in one process (results, push): their outage lines name their
	// sources.
	e.claims.Name, e.claims.Log, e.claims.FirstWait = "delivery: claim", e.log.With("sources", e.sources), e.poll
	return e
}

// Owner returns the name this engine writes into leases.
func (e *Engine) Owner() string { return e.owner }

// clock returns the current time as the store keeps it: UTC, microseconds.
func (e *Engine) clock() time.Time { return e.now().UTC().Truncate(time.Microsecond) }

func (e *Engine) wake() {
	select {
	case e.poke <- struct{}{}:
	default:
	}
}

// Prepare records the delivery of r, once: the same request again returns the same delivery in
// whatever state it has reached. A fixed operation requested with a different payload returns
// the existing record and a *FixedConflictError, and leaves conflict evidence. The delivery is
// sent by Process, Deliver, or Run.
func (e *Engine) Prepare(ctx context.Context, r Request) (Record, error) {
	if err := r.validate(); err != nil {
		return Record{}, err
	}
	route, err := e.router.Route(r.Principal, r.Source)
	if err != nil {
		return Record{}, fmt.Errorf("prepare delivery to %s: %w", r.Source, err)
	}
	route = route.resolved(r.Source)
	body, digest, err := r.encode()
	if err != nil {
		return Record{}, err
	}
	id := deliveryID(r, digest)
	d := Delivery{ID: id, Principal: r.Principal, TaskID: r.TaskID, ContextID: r.ContextID, Operation: r.Operation,
		State: r.State, Locator: r.Locator, Message: r.Message}
	now := e.clock()
	row := store.Delivery{
		Principal: r.Principal, ID: id, TaskID: r.TaskID, Source: r.Source, Operation: r.Operation,
		Recovery: string(route.Recovery), Lane: route.laneKey(r.Source, d), PayloadDigest: digest, Payload: body,
		State: store.DeliveryPrepared, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now,
	}
	var (
		got      store.Delivery
		conflict bool
	)
	err = e.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		existing, inserted, err := tx.InsertDelivery(ctx, row)
		if err != nil {
			return err
		}
		got, conflict = existing, !inserted && existing.PayloadDigest != digest
		if !conflict {
			return nil
		}
		// Kept: the conflict is evidence, the request is refused.
		return e.evidence(ctx, tx, existing, EvidenceConflict, map[string]any{
			"stored_digest": existing.PayloadDigest, "requested_digest": digest,
		}, now)
	})
	if err != nil {
		return Record{}, fmt.Errorf("prepare delivery %s: %w", id, err)
	}
	if conflict {
		return toRecord(got), &FixedConflictError{ID: id, Operation: r.Operation}
	}
	e.wake()
	return toRecord(got), nil
}

// Deliver prepares r and makes one attempt at it now (Process). It returns the record as it
// stands afterwards: delivered, failed or ambiguous, or prepared/sending when it waits for a
// retry, a snooze, its lane, or a worker in another process. Wait waits for it to settle.
func (e *Engine) Deliver(ctx context.Context, r Request) (Record, error) {
	rec, err := e.Prepare(ctx, r)
	if err != nil {
		return rec, err
	}
	if rec.State.Settled() {
		return rec, nil
	}
	return e.Process(ctx, rec.Principal, rec.ID)
}

// Process makes one step of the delivery now if it is due and no one else holds it: the provider
// call of a prepared delivery (after its lane grants a slot), or the recovery of one left in
// sending. Concurrent calls for one ID in this process run one at a time; the second finds the
// first's outcome. It returns the record afterwards.
func (e *Engine) Process(ctx context.Context, principal, id string) (Record, error) {
	if e.closed.Load() {
		return Record{}, ErrClosed
	}
	unlock := e.locks.lock(principal + "\x00" + id)
	defer unlock()
	// A lookup that finds nothing makes the delivery due again at once; so does a lane slot
	// taken in between. Three rounds cover a lookup followed by a send.
	for range 3 {
		st, ok, err := e.claimOne(ctx, principal, id)
		if err != nil {
			return Record{}, err
		}
		if !ok {
			break
		}
		// Claimed: the step runs to its outcome even if ctx ends meanwhile (a shutdown), as the
		// engine's own in Run do; cutting the provider call short would turn a known outcome
		// into an unknown one, and the next process would send again. The send timeout bounds it.
		if again := e.act(context.WithoutCancel(ctx), st); !again {
			break
		}
	}
	return e.Get(ctx, principal, id)
}

// Get returns a delivery.
func (e *Engine) Get(ctx context.Context, principal, id string) (Record, error) {
	row, err := e.store.GetDelivery(ctx, principal, id)
	if errors.Is(err, store.ErrNotFound) {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Record{}, fmt.Errorf("get delivery %s: %w", id, err)
	}
	return toRecord(row), nil
}

// Attempts returns a delivery's per-attempt evidence, oldest first.
func (e *Engine) Attempts(ctx context.Context, principal, id string) ([]Attempt, error) {
	rows, err := e.store.ListDeliveryAttempts(ctx, principal, id)
	if err != nil {
		return nil, err
	}
	out := make([]Attempt, len(rows))
	for i, a := range rows {
		out[i] = Attempt{Attempt: a.Attempt, Kind: a.Kind, Outcome: a.Outcome, Error: a.Error,
			ProviderStatus: a.ProviderStatus, RetryAfter: a.RetryAfter, Owner: a.Owner, Time: a.CreatedAt}
	}
	return out, nil
}

// Changed returns a channel closed the next time this engine records an outcome of one of its
// deliveries (in Run, Process or an operator's resolution): a caller that moves on when a
// delivery settles waits on it rather than polling. Call it again after each close.
func (e *Engine) Changed() <-chan struct{} { return e.changed.wait() }

// Wait returns once the delivery is settled (delivered, failed or ambiguous), or when ctx ends.
// Progress comes from Run (in this or another process) or from Process calls.
func (e *Engine) Wait(ctx context.Context, principal, id string) (Record, error) {
	for {
		changed := e.changed.wait()
		rec, err := e.Get(ctx, principal, id)
		if err != nil || rec.State.Settled() {
			return rec, err
		}
		t := time.NewTimer(e.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return rec, ctx.Err()
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// RunOnce claims the due deliveries (as many as there are workers, one per lane), takes one step
// of each concurrently, and returns how many it claimed. Run calls it in a loop; tests with an
// injected clock call it directly.
func (e *Engine) RunOnce(ctx context.Context) (int, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	steps, err := e.claimBatch(ctx, e.workers)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, st := range steps {
		wg.Go(func() { e.actLocked(ctx, st) })
	}
	wg.Wait()
	return len(steps), nil
}

// Run delivers until ctx ends or Close is called: at start it recovers what a previous process
// left (deliveries in sending whose lease ran out are looked up, repeated, or failed closed), and
// from then on it claims due deliveries, retries, honours snoozes and lanes, and recovers
// continuously. Provider calls in flight when it stops run to their outcome (bounded by the send
// timeout) before Run returns. Only one Run may be active per engine.
func (e *Engine) Run(ctx context.Context) error {
	e.mu.Lock()
	if e.closed.Load() {
		e.mu.Unlock()
		return ErrClosed
	}
	if e.running {
		e.mu.Unlock()
		return errors.New("delivery engine: Run is already active")
	}
	ctx, cancel := context.WithCancel(ctx)
	e.running, e.stop, e.done = true, cancel, make(chan struct{})
	done := e.done
	e.mu.Unlock()
	defer func() {
		cancel()
		e.mu.Lock()
		e.running = false
		e.mu.Unlock()
		close(done)
	}()

	sem := make(chan struct{}, e.workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	// In-flight calls outlive a stop: cutting one short would turn a known outcome into an
	// unknown one. Each is bounded by the send timeout.
	work := context.WithoutCancel(ctx)
	for {
		free := e.workers - len(sem)
		var steps []step
		var backoff time.Duration // the store failing: wait this long, whatever is due
		if free > 0 {
			var err error
			steps, err = e.claimBatch(ctx, free)
			switch {
			case err == nil:
				e.claims.Succeeded()
			case ctx.Err() == nil:
				backoff = e.claims.Failed(err)
			}
		}
		for _, st := range steps {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() {
					<-sem
					e.wake()
				}()
				e.actLocked(work, st)
			})
		}
		if free > 0 && len(steps) == free {
			continue // more may be due right now
		}
		wait := max(e.poll, backoff)
		// With every worker busy a due row cannot be claimed before a worker finishes, and a
		// finishing worker pokes: waiting for the due time would re-read the store every
		// millisecond while the workers are busy. Only with a free worker does the next due
		// time matter, and only rows this engine can claim: another engine's due row must not
		// make it spin.
		if free > 0 && !e.noClaim && backoff == 0 { // with no sources, nil would ask for any source's due rows
			if due, ok, err := e.store.NextDeliveryDue(ctx, e.sources); err == nil && ok {
				wait = min(wait, max(due.Sub(e.clock()), time.Millisecond))
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-e.poke:
		case <-t.C:
		}
		t.Stop()
	}
}

// Close stops Run, waits for the calls it has in flight, and makes later calls fail with
// ErrClosed. It does not close the store.
func (e *Engine) Close() error {
	e.closed.Store(true)
	e.mu.Lock()
	stop, done := e.stop, e.done
	e.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	return nil
}

// keyLocks is a lock per key, created on demand and dropped when unused.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

func (k *keyLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyLock{}
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

// signal is a broadcast: wait returns a channel closed at the next notify.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
