package taskplane

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// The wake queue (invariant 7 of docs/architecture.md). Accept enqueues one body-free wake per accepted or
// continued task, in its own transaction, so a wake exists only once its task is accepted. A
// consumer (the Dispatcher for in-process and remote executors, the worker API for resident
// agents) claims the oldest due wake with ClaimTurn: in one transaction the wake is leased, the
// task moves to WORKING and `woken` evidence is written. That grant is the turn's authority: every
// change a turn makes checks it, so a stale lease, another task or a finished task is refused.
// EndTurn clears it before the task's next wake can be claimed.
//
// The rules, each proven by a test in wakequeue_test.go:
//   - FIFO after acceptance: wakes are claimed oldest first; one turn per task at a time.
//   - Canceled (any terminal) work is skipped: its wakes are retired unclaimed.
//   - Bounded admission: at most MaxWaiting wakes wait behind the active ones; an acceptance
//     beyond that fails its task with durable wake-failed evidence instead of queueing silently.
//   - A task left unsettled (not terminal, not waiting for input) at the end of a turn, or whose
//     holder died (its lease ran out), is re-offered at most MaxReoffers times; then the wake
//     fails, with wake-failed and unhealthy evidence, and so does the task.
//   - Only the newest activation of a task is worked: claiming one wake retires the task's older
//     pending wakes (the turn reads the whole task anyway).
//   - An INPUT_REQUIRED / AUTH_REQUIRED task is not re-offered until a continuation newer than its
//     question arrives.

// Wake-queue limits.
const (
	// DefaultMaxWaiting is how many wakes may wait behind the active ones (WithMaxWaiting).
	DefaultMaxWaiting = 128
	// MaxReoffers is how many times an unsettled task is offered again after its first offer.
	MaxReoffers = 5
	// TransportRetries is how many times the Dispatcher retries an executor call that failed in
	// transport (ErrTransport) before it fails the task.
	TransportRetries = 3
	// DefaultReofferDelay is the first wait before an unsettled task is offered again; it doubles
	// with every re-offer (WithReofferDelay).
	DefaultReofferDelay = time.Second
	// maxClaimRounds bounds how many settled tasks' wakes one ClaimTurn retires before it returns.
	maxClaimRounds = 64
	// maxHandOffRetryDelay bounds the wait before a failed result hand-off is tried again.
	maxHandOffRetryDelay = time.Minute
)

// Evidence kinds of the wake queue and the executors.
const (
	// EvidenceWoken: a task was offered to an executor; its turn began (detail: wake, offer, owner).
	EvidenceWoken = "woken"
	// EvidenceWakeFailed: a wake was given up (detail: reason overflow, reoffer-cap or transport).
	EvidenceWakeFailed = "wake-failed"
	// EvidenceUnhealthy: the executor keeps leaving tasks unsettled.
	EvidenceUnhealthy = "unhealthy"
	// EvidenceTimeout: a task was failed by task_timeout (detail: reason timeout or no-response).
	EvidenceTimeout = "timeout"
	// EvidenceSettled: the dispatcher recorded an outcome on a finished task: by a send (under
	// the source the send came in on, a2a; it is that event's intake disposition) or through the
	// worker API (under the task's source).
	EvidenceSettled = "settled"
	// EvidenceResultFailed: a native task's question or outcome could not be handed to delivery.
	EvidenceResultFailed = "result-failed"
)

// Failure reasons: the "reason" of wake-failed and timeout evidence, and of a FAILED status
// message's metadata (MetaReason).
const (
	ReasonOverflow   = "overflow"
	ReasonReofferCap = "reoffer-cap"
	ReasonTransport  = "transport"
	ReasonExecutor   = "executor-error"
	ReasonTimeout    = "timeout"
	ReasonNoResponse = "no-response"
)

// MetaReason is the metadata key of a failure's reason on the FAILED status message.
const MetaReason = "https://channels.dev/a2a/ext/outfitter-task/v1/reason"

// ErrNoTurn is returned for a change made without the task's active turn: the lease is stale or
// held by someone else, the grant names another task, or the task is finished.
var ErrNoTurn = errors.New("the task does not hold the active turn")

// Results hands a native task's question or outcome to the delivery engine (package results wires
// it). Settled is called at least once after a task whose origin is a provider source (not "a2a")
// reaches INPUT_REQUIRED, AUTH_REQUIRED or a terminal state; it must be idempotent (the delivery ID
// is a hash of the task, operation and payload).
type Results interface {
	Settled(ctx context.Context, t *Task) error
}

// WithMaxWaiting sets how many wakes may wait behind the active ones (default 128).
func WithMaxWaiting(n int) Option { return func(p *Plane) { p.queue.maxWaiting = n } }

// WithReofferDelay sets the first wait before an unsettled task is offered again (default 1s,
// doubling per re-offer; tests use a tiny one).
func WithReofferDelay(d time.Duration) Option { return func(p *Plane) { p.queue.reofferDelay = d } }

// WithResults sets where native tasks' questions and outcomes go (default: nowhere).
func WithResults(r Results) Option { return func(p *Plane) { p.queue.results = r } }

// queueConfig is the Plane's wake-queue state; its zero value means the defaults.
type queueConfig struct {
	maxWaiting   int
	reofferDelay time.Duration
	results      Results
	questions    func(source string) error

	mu      sync.Mutex
	changed chan struct{}  // closed and replaced when wakes may have become due
	hints   chan struct{}  // one token per poke, for Dispatcher claimers (see wakeHints)
	poked   time.Time      // when this process last committed a change that poked the wakes
	idle    []*idleClaimer // Dispatcher claimers waiting for work (see takeClaimer)
	// inline holds the InlineFuncs of the running Dispatchers whose executors have one, in
	// the order they started; acceptances use the latest (see inlineFor).
	inline []*inlineTurn
}

// idleClaimer is a Dispatcher claimer waiting for work. An acceptance that creates a task may
// take it and grant it that task's first turn in the acceptance transaction itself, saving the
// claim transaction (and its commit) between a new task and its executor.
type idleClaimer struct {
	owner string
	lease time.Duration
	// grant receives exactly one value once an acceptance took the claimer: the grant, or nil
	// when the acceptance made none (a duplicate, a failure).
	grant chan *Grant
}

// parkClaimer makes c available to acceptances.
func (p *Plane) parkClaimer(c *idleClaimer) {
	p.queue.mu.Lock()
	p.queue.idle = append(p.queue.idle, c)
	p.queue.mu.Unlock()
}

// unparkClaimer withdraws c; false means an acceptance took it first and will send on c.grant.
func (p *Plane) unparkClaimer(c *idleClaimer) bool {
	p.queue.mu.Lock()
	defer p.queue.mu.Unlock()
	i := slices.Index(p.queue.idle, c)
	if i < 0 {
		return false
	}
	p.queue.idle = slices.Delete(p.queue.idle, i, i+1)
	return true
}

// takeClaimer takes an idle claimer for a new task's first turn, or returns nil. While a hint is
// waiting, a wake accepted earlier has not been claimed yet: it goes first, as the queue is
// served oldest first.
func (p *Plane) takeClaimer() *idleClaimer {
	p.queue.mu.Lock()
	defer p.queue.mu.Unlock()
	n := len(p.queue.idle)
	if n == 0 || len(p.queue.hints) > 0 {
		return nil
	}
	c := p.queue.idle[n-1]
	p.queue.idle = p.queue.idle[:n-1]
	return c
}

// inlineTurn is a running Dispatcher's offer to run first turns in acceptances: its
// executor's InlineFunc, and what hears of each turn kept (nil: nothing does).
type inlineTurn struct {
	f    InlineFunc
	kept func(elapsed time.Duration)
}

// addInline offers e to acceptances (the first turns of new A2A tasks) until the returned
// function withdraws it.
func (p *Plane) addInline(e *inlineTurn) (remove func()) {
	p.queue.mu.Lock()
	p.queue.inline = append(p.queue.inline, e)
	p.queue.mu.Unlock()
	return func() {
		p.queue.mu.Lock()
		p.queue.inline = slices.DeleteFunc(p.queue.inline, func(x *inlineTurn) bool { return x == e })
		p.queue.mu.Unlock()
	}
}

// inlineFor returns the offer that runs the first turn of the task ev would create in its
// acceptance, or nil: ev is not an A2A send of new work, or no running Dispatcher has one. Of
// several, the most recently started Dispatcher's.
func (p *Plane) inlineFor(ev *Event) *inlineTurn {
	if ev.Source != SourceA2A || ev.TaskID != "" || ev.ReplyTo != "" || ev.Reply != nil {
		return nil
	}
	p.queue.mu.Lock()
	defer p.queue.mu.Unlock()
	if n := len(p.queue.inline); n > 0 {
		return p.queue.inline[n-1]
	}
	return nil
}

// callInline runs f on t and reports how long it took. A panic in f declines the turn (logged
// with its stack): Execute, which runs it again, then fails the task as any panicking turn.
func (p *Plane) callInline(f InlineFunc, t *Task) (changes []Change, ok bool, elapsed time.Duration) {
	start := time.Now()
	defer func() {
		elapsed = time.Since(start)
		if r := recover(); r != nil {
			p.log.Error("inline turn panicked; the turn runs through Execute", "task", t.ID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			changes, ok = nil, false
		}
	}()
	changes, ok = f(t)
	return
}

// inlineTurnTx runs the first turn of t, a task this acceptance transaction created (its row not
// inserted yet), with f, and writes the task as the turn leaves it: the row, the turn's events
// after t's, and its woken evidence. The turn takes no time, so the task moves from SUBMITTED
// straight to what the turn records (no WORKING between). It returns that task, or nil, having
// written nothing, when f declined (or panicked) or its changes did not settle the task; the
// caller then inserts t's row and queues its wake as for any new task. t itself is left as it
// is. elapsed is how long f took.
func (p *Plane) inlineTurnTx(ctx context.Context, tx store.Tx, f InlineFunc, t *Task, now time.Time) (settled *Task, elapsed time.Duration, err error) {
	changes, ok, elapsed := p.callInline(f, t.clone())
	if !ok {
		return nil, elapsed, nil
	}
	cp := t.clone()
	u := &preparedUpdate{task: cp}
	row, err := applyChanges(ctx, u, cp, now, changes...)
	if err != nil || !settledState(cp) {
		// Set aside: Execute, which records the same changes through a Turn, fails the task
		// with the error, or gives it the turns it needs.
		return nil, elapsed, nil
	}
	if err := u.writeNew(ctx, tx, row); err != nil {
		return nil, elapsed, err
	}
	if err := evidence(ctx, tx, cp.Origin.Principal, cp.Origin.Source, EvidenceWoken, cp.ID, map[string]any{
		"inline": true, "activation": t.LastSeq, "offer": 1,
	}, now); err != nil {
		return nil, elapsed, err
	}
	return cp, elapsed, nil
}

// maxWakeHints bounds the hints waiting for a claimer; a poke beyond it is dropped, and the
// wake it announced is found by a claimer's poll instead.
const maxWakeHints = 1024

func (q *queueConfig) limit() int {
	if q.maxWaiting <= 0 {
		return DefaultMaxWaiting
	}
	return q.maxWaiting
}

func (q *queueConfig) delay(offer int) time.Duration {
	d := q.reofferDelay
	if d <= 0 {
		d = DefaultReofferDelay
	}
	for i := 1; i < offer && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}

// handOffRetryDelay is how long a wake whose result hand-off failed at now waits before it is
// tried again: as long as the task has been settled (its status time), at least the first
// re-offer delay and at most maxHandOffRetryDelay. While delivery keeps refusing, the waits
// double up to the cap; the hand-off is never given up.
func (q *queueConfig) handOffRetryDelay(t *Task, now time.Time) time.Duration {
	return min(max(now.Sub(t.Status.Timestamp), q.delay(1)), maxHandOffRetryDelay)
}

// WakesChanged returns a channel closed the next time this process enqueues or releases a wake.
// Consumers wait on it (and poll, for wakes of other processes).
func (p *Plane) WakesChanged() <-chan struct{} {
	p.queue.mu.Lock()
	defer p.queue.mu.Unlock()
	if p.queue.changed == nil {
		p.queue.changed = make(chan struct{})
	}
	return p.queue.changed
}

func (p *Plane) pokeWakes() {
	p.queue.mu.Lock()
	defer p.queue.mu.Unlock()
	p.queue.poked = time.Now()
	if p.queue.changed != nil {
		close(p.queue.changed)
		p.queue.changed = nil
	}
	p.hintLocked()
}

// pokedSince reports whether this process committed a change that poked the wakes after t: the
// store answered then.
func (p *Plane) pokedSince(t time.Time) bool {
	p.queue.mu.Lock()
	defer p.queue.mu.Unlock()
	return p.queue.poked.After(t)
}

// rehint puts back a hint a claimer took but did not use.
func (p *Plane) rehint() {
	p.queue.mu.Lock()
	defer p.queue.mu.Unlock()
	p.hintLocked()
}

// hintLocked adds one hint, if a Dispatcher keeps them (p.queue.mu held).
func (p *Plane) hintLocked() {
	select {
	case p.queue.hints <- struct{}{}: // a nil channel (no Dispatcher yet) is never ready
	default: // full: the claimers' polls find the wake
	}
}

// wakeHints returns the channel that carries one token each time this process enqueues or
// releases a wake. Unlike WakesChanged, which wakes every waiter, a token wakes one claimer, so a
// wake costs one claim transaction rather than one per idle claimer.
func (p *Plane) wakeHints() <-chan struct{} {
	p.queue.mu.Lock()
	defer p.queue.mu.Unlock()
	if p.queue.hints == nil {
		p.queue.hints = make(chan struct{}, maxWakeHints)
	}
	return p.queue.hints
}

// enqueueWake inserts the wake of an accepted or continued task in the acceptance transaction.
// Past the admission bound the wake is recorded failed, the task FAILED (reason overflow) and
// wake-failed evidence written: the caller sees the refusal, nothing is dropped silently. Once
// admission is decided, and before anything is written, ready (if not nil) gets the wake, the
// decision, and whether no other process's wake may wait (first: on a store several processes
// share, no wake is pending at all, so none accepted elsewhere would be overtaken; this process's
// own are covered by its hints): an admitted wake it changes (grantNewTx leases it) is inserted so.
func (p *Plane) enqueueWake(ctx context.Context, tx store.Tx, source string, t *Task, now time.Time, ready func(w *store.Wake, admitted, first bool) error) (*Task, error) {
	w := store.Wake{ID: p.newID(), Principal: t.Origin.Principal, TaskID: t.ID, Activation: t.LastSeq,
		State: store.WakePending, CreatedAt: now, UpdatedAt: now}
	limit := p.queue.limit()
	waiting, err := tx.CountWakes(ctx, store.WakePending, limit)
	if err != nil {
		return nil, fmt.Errorf("enqueue wake: %w", err)
	}
	if ready != nil {
		// A store of one process has no wake this process's hints do not cover; the count is
		// of every pending wake, leased ones (turns running) included, so it would stop the
		// hand-off whenever any turn runs.
		first := waiting == 0 || !p.store.Capabilities().MultiProcess
		if err := ready(&w, waiting < limit, first); err != nil {
			return nil, err
		}
	}
	if waiting < limit {
		if err := tx.InsertWake(ctx, w); err != nil {
			return nil, fmt.Errorf("enqueue wake: %w", err)
		}
		return t, nil
	}
	w.State, w.Detail = store.WakeFailed, fmt.Sprintf("overflow: %d wakes waiting", waiting)
	if err := tx.InsertWake(ctx, w); err != nil {
		return nil, fmt.Errorf("enqueue wake: %w", err)
	}
	if err := evidence(ctx, tx, t.Origin.Principal, source, EvidenceWakeFailed, t.ID,
		map[string]any{"reason": ReasonOverflow, "wake": w.ID, "waiting": waiting, "limit": limit}, now); err != nil {
		return nil, err
	}
	// The task's owner reads this message: the queue is shared by all principals, so it says how
	// full the queue is only in the operator's evidence above, not here.
	ft, err := applyTx(ctx, tx, t.Origin.Principal, t.ID, AnyVersion, now, failStatus(ReasonOverflow,
		"not started: too many tasks are waiting for the executor; send it again later", p.newID()))
	return ft, err
}

// failStatus is the FAILED status change of a failure with a reason.
func failStatus(reason, text, msgID string) SetStatus {
	return SetStatus{State: StateFailed, Message: &Message{ID: msgID, Role: RoleAgent, Parts: []Part{TextPart(text)},
		Metadata: map[string]any{MetaReason: reason}}}
}

// ClaimRequest asks ClaimTurn for the next turn.
type ClaimRequest struct {
	// Owner names the claimer in the lease and the woken evidence; it must be unique per live
	// consumer (the Dispatcher and the worker API mint one).
	Owner string
	// Lease is how long the authority lasts without RenewTurn.
	Lease time.Duration
	// Principals, when set, restricts the claim to tasks of these principals.
	Principals []string
}

// Grant is the authority of one turn: the claimed wake, leased to Owner until LeaseUntil, and the
// task as it was when the turn began (WORKING).
type Grant struct {
	Principal  string
	TaskID     string
	WakeID     string
	Owner      string
	Activation int64
	// Offer counts the offers of this wake: 1 for the first, up to 1+MaxReoffers.
	Offer      int
	LeaseUntil time.Time
	Task       *Task

	// granted is when the lease was written, on this process's monotonic clock (zero for a
	// Grant made by hand): the turn's watchdog counts from it, not from when the turn started.
	granted time.Time
}

// claimOutcome is what one claim transaction did.
type claimOutcome int

const (
	claimNone    claimOutcome = iota // nothing due
	claimGranted                     // a turn was granted
	claimRetired                     // a wake of a settled or vanished task was retired
	claimSettled                     // a wake of a settled native task is held for its result
	claimFailed                      // a wake ran out of re-offers; its task failed
)

// ClaimTurn claims the oldest due wake and grants its task a turn: WORKING, woken evidence, and
// the lease. It returns nil and no error when nothing is due. Wakes of finished tasks, of tasks
// waiting for an answer, and older wakes of the same task are retired on the way.
func (p *Plane) ClaimTurn(ctx context.Context, req ClaimRequest) (*Grant, error) {
	if req.Owner == "" || req.Lease <= 0 {
		return nil, invalidf("claim needs an owner and a lease")
	}
	for range maxClaimRounds {
		var (
			g       *Grant
			out     claimOutcome
			settled *Task
			held    store.Wake
		)
		err := p.retryConcurrent(ctx, true, func() error {
			return p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
				var err error
				g, out, settled, held, err = p.claimTx(ctx, tx, req)
				return err
			})
		})
		if err != nil {
			return nil, fmt.Errorf("claim turn: %w", err)
		}
		switch out {
		case claimNone:
			return nil, nil
		case claimGranted:
			p.broker.publish(g.Principal, g.TaskID)
			return g, nil
		case claimFailed:
			p.broker.publish(settled.Origin.Principal, settled.ID)
			p.sendHomeHeld(ctx, settled, held)
		case claimSettled:
			// The result goes home before the wake is retired: a crash in between leaves the wake
			// leased, it falls due again, and the (idempotent) hand-off is repeated.
			done := p.sendHome(ctx, settled)
			p.releaseHeld(ctx, held, settled, done)
		}
	}
	return nil, nil
}

// claimTx is one claim transaction.
func (p *Plane) claimTx(ctx context.Context, tx store.Tx, req ClaimRequest) (*Grant, claimOutcome, *Task, store.Wake, error) {
	now := p.clock()
	ws, err := tx.ClaimWakes(ctx, store.WakeClaim{Owner: req.Owner, Now: now, LeaseUntil: now.Add(req.Lease),
		Principals: req.Principals, Limit: 1})
	if err != nil || len(ws) == 0 {
		return nil, claimNone, nil, store.Wake{}, err
	}
	w := ws[0]
	t, err := getTask(ctx, tx, w.Principal, w.TaskID)
	if errors.Is(err, ErrTaskNotFound) {
		return nil, claimRetired, nil, w, retire(ctx, tx, w, store.WakeDone, "task gone", now)
	}
	if err != nil {
		return nil, claimNone, nil, w, err
	}
	switch {
	case t.Status.State.Terminal():
		return p.retireSettled(ctx, tx, w, t, "task "+string(t.Status.State), now)
	case t.Status.State.Interrupted() && t.InputRequest != 0 && w.Activation <= t.InputRequest:
		return p.retireSettled(ctx, tx, w, t, "waiting for input", now)
	}
	if w.Attempts > MaxReoffers {
		// Its last offer ended unsettled too (the holder died, or shut down): give up.
		ft, held, err := p.giveUp(ctx, tx, w, t, now)
		return nil, claimFailed, ft, held, err
	}
	// Retire the task's other due wakes: this turn reads the whole task, so it serves them.
	others, err := tx.ListTaskWakes(ctx, w.Principal, w.TaskID)
	if err != nil {
		return nil, claimNone, nil, w, err
	}
	for _, o := range others {
		if o.ID == w.ID || o.State != store.WakePending || o.LeaseUntil.After(now) {
			continue
		}
		w.Activation = max(w.Activation, o.Activation)
		if err := retire(ctx, tx, o, store.WakeDone, "served by wake "+w.ID, now); err != nil {
			return nil, claimNone, nil, w, err
		}
	}
	// The grant. The versioned update serializes claimers of one task across processes: a second
	// claimer of the same task version gets ErrConcurrentModification and retries, and then sees
	// the first one's live wake below.
	nt, err := applyTx(ctx, tx, t.Origin.Principal, t.ID, t.Version, now, SetStatus{State: StateWorking})
	if err != nil {
		return nil, claimNone, nil, w, err
	}
	// Read again now that the task row is locked: a turn another process granted since the claim
	// statement ran is visible here.
	if others, err = tx.ListTaskWakes(ctx, w.Principal, w.TaskID); err != nil {
		return nil, claimNone, nil, w, err
	}
	for _, o := range others {
		if o.ID != w.ID && (o.State == store.WakeActive || o.State == store.WakePending) && o.LeaseUntil.After(now) {
			return nil, claimNone, nil, w, ErrConcurrentModification // another turn is live
		}
	}
	g, err := p.grantTx(ctx, tx, w, nt, req.Owner, now)
	if err != nil {
		return nil, claimNone, nil, w, err
	}
	return g, claimGranted, nil, w, nil
}

// grantTx makes w, leased to owner, the active turn of nt (already WORKING): the next offer of
// the wake, with woken evidence.
func (p *Plane) grantTx(ctx context.Context, tx store.Tx, w store.Wake, nt *Task, owner string, now time.Time) (*Grant, error) {
	offer(&w, owner, now)
	if err := tx.SaveWake(ctx, w); err != nil {
		return nil, err
	}
	return p.wokenTx(ctx, tx, w, nt, owner, now)
}

// offer makes w, leased to owner, the wake's next offer: active, one more attempt.
func offer(w *store.Wake, owner string, now time.Time) {
	w.State, w.Attempts, w.UpdatedAt = store.WakeActive, w.Attempts+1, now
	w.Detail = fmt.Sprintf("offer %d to %s", w.Attempts, owner)
}

// wokenTx writes the woken evidence of w's offer to owner and returns the grant of it.
func (p *Plane) wokenTx(ctx context.Context, tx store.Tx, w store.Wake, nt *Task, owner string, now time.Time) (*Grant, error) {
	if err := evidence(ctx, tx, nt.Origin.Principal, nt.Origin.Source, EvidenceWoken, nt.ID, map[string]any{
		"wake": w.ID, "activation": w.Activation, "offer": w.Attempts, "owner": owner,
	}, now); err != nil {
		return nil, err
	}
	return &Grant{Principal: w.Principal, TaskID: w.TaskID, WakeID: w.ID, Owner: owner, Activation: w.Activation,
		Offer: w.Attempts, LeaseUntil: w.LeaseUntil, Task: nt, granted: time.Now()}, nil
}

// grantNewTx grants c the first turn of t, a task this acceptance transaction created with its
// wake w; neither is stored yet. It moves a copy of t to WORKING and leases w to c; the caller
// inserts w and the returned row so (one write each, not an insert and an update). No other wake
// of t can exist, so none is checked. t itself is left as it is.
func (p *Plane) grantNewTx(ctx context.Context, tx store.Tx, c *idleClaimer, w *store.Wake, t *Task, now time.Time) (*Grant, store.Task, error) {
	// A copy: the grant's task goes to the claimer's goroutine, t back to Accept's caller.
	cp := t.clone()
	row, err := applyChanges(ctx, tx, cp, now, SetStatus{State: StateWorking})
	if err != nil {
		return nil, store.Task{}, err
	}
	w.LeaseOwner, w.LeaseUntil = c.owner, now.Add(c.lease)
	offer(w, c.owner, now)
	g, err := p.wokenTx(ctx, tx, *w, cp, c.owner, now)
	return g, row, err
}

// retireSettled retires the wake of a task that needs no turn. A native task's result must go home
// first, so with a Results hook the wake stays leased (claimSettled) until that is done.
func (p *Plane) retireSettled(ctx context.Context, tx store.Tx, w store.Wake, t *Task, detail string, now time.Time) (*Grant, claimOutcome, *Task, store.Wake, error) {
	if p.queue.results != nil && native(t) {
		w.Detail = detail
		return nil, claimSettled, t, w, nil
	}
	return nil, claimRetired, nil, w, retire(ctx, tx, w, store.WakeDone, detail, now)
}

// retire moves w to state with its lease cleared.
func retire(ctx context.Context, tx store.Tx, w store.Wake, state store.WakeState, detail string, now time.Time) error {
	w.State, w.Detail, w.LeaseOwner, w.LeaseUntil, w.UpdatedAt = state, detail, "", time.Time{}, now
	return tx.SaveWake(ctx, w)
}

// resultHoldDelay is when a held result wake (holdResultTx) falls due: after the hand-off right
// after its commit has had time to release it, so it fires only after a crash in between.
const resultHoldDelay = time.Minute

// holdResultTx inserts, for a native task this transaction settled outside any turn (a cancel, a
// timeout, the admission bound's refusal, the re-offer cap), a wake held for its result: the
// hand-off right after the commit releases it (sendHomeHeld); if that hand-off fails, or the
// process dies first, the wake falls due, a claimer finds the task settled and hands the result
// off again (it is idempotent), as it does for a turn's own result. It returns the wake, or a
// zero one when the task's result does not go home.
func (p *Plane) holdResultTx(ctx context.Context, tx store.Tx, t *Task, now time.Time) (store.Wake, error) {
	if p.queue.results == nil || !native(t) || !settledState(t) {
		return store.Wake{}, nil
	}
	w := store.Wake{ID: p.newID(), Principal: t.Origin.Principal, TaskID: t.ID, Activation: t.LastSeq,
		State: store.WakePending, Detail: "result to hand off: " + string(t.Status.State),
		DueAt: now.Add(resultHoldDelay), CreatedAt: now, UpdatedAt: now}
	if err := tx.InsertWake(ctx, w); err != nil {
		return store.Wake{}, fmt.Errorf("hold result: %w", err)
	}
	return w, nil
}

// sendHomeHeld hands t's result home and releases the wake holdResultTx held for it: retired once
// handed off, due again soon if the hand-off failed.
func (p *Plane) sendHomeHeld(ctx context.Context, t *Task, held store.Wake) {
	done := p.sendHome(ctx, t)
	if held.ID != "" {
		p.releaseHeld(ctx, held, t, done)
	}
}

// releaseHeld retires a wake held for the result of t, or, when the hand-off failed, makes it
// due again a little later (handOffRetryDelay). w is the wake as this claimer held it; a wake that has changed since
// (claimed again after its lease ran out, perhaps by the same owner for a turn of the continued
// task, or already released) is left alone. A wake of the task it held back that is due now is
// announced.
func (p *Plane) releaseHeld(ctx context.Context, w store.Wake, t *Task, handedOff bool) {
	due := false
	err := p.store.Update(context.WithoutCancel(ctx), func(ctx context.Context, tx store.Tx) error {
		due = false
		cur, err := tx.GetWake(ctx, w.Principal, w.ID)
		if err != nil || !sameHold(cur, w) {
			return err // someone else holds it now, or it was released
		}
		now := p.clock()
		if handedOff {
			err = retire(ctx, tx, cur, store.WakeDone, w.Detail, now)
		} else {
			cur.DueAt = now.Add(p.queue.handOffRetryDelay(t, now))
			err = retire(ctx, tx, cur, store.WakePending, "result hand-off failed; retrying", now)
		}
		if err != nil {
			return err
		}
		others, err := tx.ListTaskWakes(ctx, w.Principal, w.TaskID)
		for _, o := range others {
			due = due || (o.ID != w.ID && o.State == store.WakePending && !o.DueAt.After(now) && !o.LeaseUntil.After(now))
		}
		return err
	})
	if err != nil {
		p.log.Error("release wake", "wake", w.ID, "task", w.TaskID, "err", err)
		return
	}
	if due {
		p.pokeWakes()
	}
}

// sameHold reports whether cur, a wake as stored now, is still the one held as w: in the same
// state, on the same offer, leased to the same owner until the same instant and due at the same
// time. A claim leases only a wake whose lease has run out and leases it until later, so two
// claims of one wake, even by the same owner, never hold the same lease. Instants are compared
// to the microsecond the stores keep.
func sameHold(cur, w store.Wake) bool {
	return cur.State == w.State && cur.Attempts == w.Attempts && cur.LeaseOwner == w.LeaseOwner &&
		sameInstant(cur.LeaseUntil, w.LeaseUntil) && sameInstant(cur.DueAt, w.DueAt)
}

func sameInstant(a, b time.Time) bool {
	d := a.Sub(b)
	return d > -time.Microsecond && d < time.Microsecond
}

// giveUp fails a wake that ran out of re-offers, and its task, holding a wake for the failure
// notice of a native task (holdResultTx): the caller hands it home with sendHomeHeld.
func (p *Plane) giveUp(ctx context.Context, tx store.Tx, w store.Wake, t *Task, now time.Time) (*Task, store.Wake, error) {
	if err := retire(ctx, tx, w, store.WakeFailed, fmt.Sprintf("unsettled after %d offers", w.Attempts), now); err != nil {
		return nil, store.Wake{}, err
	}
	detail := map[string]any{"reason": ReasonReofferCap, "wake": w.ID, "offers": w.Attempts}
	if err := evidence(ctx, tx, t.Origin.Principal, t.Origin.Source, EvidenceWakeFailed, t.ID, detail, now); err != nil {
		return nil, store.Wake{}, err
	}
	if err := evidence(ctx, tx, t.Origin.Principal, t.Origin.Source, EvidenceUnhealthy, t.ID, detail, now); err != nil {
		return nil, store.Wake{}, err
	}
	ft, err := applyTx(ctx, tx, t.Origin.Principal, t.ID, AnyVersion, now, failStatus(ReasonReofferCap,
		fmt.Sprintf("the executor left the task unfinished %d times", w.Attempts), p.newID()))
	if err != nil {
		return nil, store.Wake{}, err
	}
	held, err := p.holdResultTx(ctx, tx, ft, now)
	return ft, held, err
}

// RenewTurn extends the grant's lease by lease and returns the task as it is now. It returns
// ErrNoTurn when the grant is no longer the task's active turn (its lease ran out and another
// consumer took the wake, or the turn ended). A finished task is returned without error: the
// caller stops its turn.
func (p *Plane) RenewTurn(ctx context.Context, g *Grant, lease time.Duration) (*Task, error) {
	var t *Task
	err := p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		now := p.clock()
		w, err := p.checkGrant(ctx, tx, g, now)
		if err != nil {
			return err
		}
		w.LeaseUntil, w.UpdatedAt = now.Add(lease), now
		if err := tx.SaveWake(ctx, w); err != nil {
			return err
		}
		g.LeaseUntil = w.LeaseUntil
		t, err = getTask(ctx, tx, g.Principal, g.TaskID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("renew turn of task %s: %w", g.TaskID, err)
	}
	return t, nil
}

// checkGrant returns the grant's wake if it is still the active turn at now: the wake is active,
// leased to the grant's owner until after now, and on the grant's offer. The offer tells two
// turns of one owner apart: one whose lease ran out and the next offer of the same wake, claimed
// by a claimer that reuses its owner (a Dispatcher's claims each have their own; a test's may
// not). A grant rebuilt without its offer (ResumeTurn, whose owners are unique per claim) is
// checked without it.
func (p *Plane) checkGrant(ctx context.Context, tx store.Tx, g *Grant, now time.Time) (store.Wake, error) {
	w, err := tx.GetWake(ctx, g.Principal, g.WakeID)
	if errors.Is(err, store.ErrNotFound) {
		return w, ErrNoTurn
	}
	if err != nil {
		return w, err
	}
	if w.State != store.WakeActive || w.LeaseOwner != g.Owner || !w.LeaseUntil.After(now) || w.TaskID != g.TaskID ||
		(g.Offer != 0 && w.Attempts != g.Offer) {
		return w, ErrNoTurn
	}
	return w, nil
}

// TurnEnd says how a turn ended, for EndTurn.
type TurnEnd struct {
	// Shutdown: the consumer is stopping and interrupted the turn (or its worker left, or its
	// lease could not be renewed); the wake goes back to the queue at once, and the offer does not
	// count against MaxReoffers: a task is not failed for the restarts of a healthy executor. A
	// holder that dies without ending its turn still spends the offer (the lease runs out).
	Shutdown bool
	// Unseen: the turn's settling update was refused with ErrUnseenMessage. The wake goes back
	// to the queue at once and the offer does not count against MaxReoffers: the next turn
	// answers the new message with the rest. Unless a message did come after the turn's wake
	// (an executor returning ErrUnseenMessage of its own), the end is an ordinary unsettled one.
	Unseen bool
}

// EndTurn clears the grant's authority. A settled task's wake is done (a native task's result
// goes home first); an unsettled one is offered again after a delay, or, past MaxReoffers, fails
// with wake-failed and unhealthy evidence and fails its task. A grant that is no longer the
// active turn is left alone (ErrNoTurn).
func (p *Plane) EndTurn(ctx context.Context, g *Grant, end TurnEnd) error {
	ctx = context.WithoutCancel(ctx)
	handedOff := true
	if p.queue.results != nil {
		t, err := p.GetTask(ctx, g.Principal, g.TaskID)
		if err != nil && !errors.Is(err, ErrTaskNotFound) {
			return fmt.Errorf("end turn of task %s: %w", g.TaskID, err)
		}
		if t != nil && settledState(t) {
			handedOff = p.sendHome(ctx, t)
		}
	}
	var (
		failed *Task      // failed by the re-offer cap
		held   store.Wake // the wake held for its failure notice
		due    bool       // a wake of the task is due now: the turn's own (shutdown) or one it held back
	)
	err := p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		failed, held, due = nil, store.Wake{}, false
		now := p.clock()
		w, err := p.checkGrant(ctx, tx, g, now)
		if err != nil {
			return err
		}
		if err := p.endTurnTx(ctx, tx, g, w, end, handedOff, now, &failed, &held); err != nil {
			return err
		}
		// A wake accepted for the task during the turn (a continuation) was held back by it and
		// is due now.
		others, err := tx.ListTaskWakes(ctx, g.Principal, g.TaskID)
		for _, o := range others {
			due = due || (o.State == store.WakePending && !o.DueAt.After(now) && !o.LeaseUntil.After(now))
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("end turn of task %s: %w", g.TaskID, err)
	}
	if due {
		p.pokeWakes()
	}
	if failed != nil {
		p.broker.publish(g.Principal, g.TaskID)
		p.sendHomeHeld(ctx, failed, held)
	}
	return nil
}

// endTurnTx retires w, the wake of the turn g that ended as end says. A task it fails (the re-offer
// cap) is set in failed, and the wake held for its notice in held.
func (p *Plane) endTurnTx(ctx context.Context, tx store.Tx, g *Grant, w store.Wake, end TurnEnd, handedOff bool,
	now time.Time, failed **Task, held *store.Wake) error {
	cur, err := getTask(ctx, tx, g.Principal, g.TaskID)
	newer := false // an Unseen end is uncounted only if a message did come after the turn's wake
	if err == nil && end.Unseen {
		newer, err = laterWake(ctx, tx, w.Principal, w.TaskID, w.ID, w.Activation)
	}
	switch {
	case errors.Is(err, ErrTaskNotFound):
		return retire(ctx, tx, w, store.WakeDone, "task gone", now)
	case err != nil:
		return err
	case end.Shutdown && !settledState(cur):
		w.DueAt, w.Attempts = now, max(w.Attempts-1, 0)
		return retire(ctx, tx, w, store.WakePending, "turn interrupted by shutdown", now)
	case end.Unseen && !settledState(cur) && newer:
		w.DueAt, w.Attempts = now, max(w.Attempts-1, 0)
		return retire(ctx, tx, w, store.WakePending, "a message arrived during the turn; offered again", now)
	case settledState(cur) && handedOff:
		return retire(ctx, tx, w, store.WakeDone, "settled: "+string(cur.Status.State), now)
	case settledState(cur):
		w.DueAt = now.Add(p.queue.handOffRetryDelay(cur, now))
		return retire(ctx, tx, w, store.WakePending, "result hand-off failed; retrying", now)
	case w.Attempts > MaxReoffers:
		*failed, *held, err = p.giveUp(ctx, tx, w, cur, now)
		return err
	default:
		w.DueAt = now.Add(p.queue.delay(w.Attempts))
		return retire(ctx, tx, w, store.WakePending, fmt.Sprintf("unsettled after offer %d; re-offered", w.Attempts), now)
	}
}

// laterWake reports whether a pending wake of the task other than except waits for a message
// accepted after the event sequence after: a continuation held back by a running turn. It is what
// refuses a turn's settling update (unseenMessage) and what makes an Unseen end true.
func laterWake(ctx context.Context, tx store.Tx, principal, taskID, except string, after int64) (bool, error) {
	ws, err := tx.ListTaskWakes(ctx, principal, taskID)
	if err != nil {
		return false, err
	}
	for _, o := range ws {
		if o.ID != except && o.State == store.WakePending && o.Activation > after {
			return true, nil
		}
	}
	return false, nil
}

// settledState reports whether a task needs no turn now: terminal, or waiting for an answer.
func settledState(t *Task) bool { return t.Status.State.Terminal() || t.Status.State.Interrupted() }

// native reports whether a task came from a provider source, whose answers go back through a
// delivery (A2A callers read their tasks themselves).
func native(t *Task) bool { return t.Origin.Source != "" && t.Origin.Source != SourceA2A }

// sendHome hands a settled native task to the Results hook and reports whether that succeeded
// (true when there is nothing to do). A failure is logged and recorded as evidence.
func (p *Plane) sendHome(ctx context.Context, t *Task) bool {
	if p.queue.results == nil || t == nil || !native(t) || !settledState(t) {
		return true
	}
	err := p.queue.results.Settled(context.WithoutCancel(ctx), t)
	if err == nil {
		return true
	}
	p.log.Error("hand task result to delivery", "task", t.ID, "source", t.Origin.Source, "err", err)
	_ = p.store.Update(context.WithoutCancel(ctx), func(ctx context.Context, tx store.Tx) error {
		return evidence(ctx, tx, t.Origin.Principal, t.Origin.Source, EvidenceResultFailed, t.ID,
			map[string]any{"state": t.Status.State, "error": err.Error()}, p.clock())
	})
	return false
}
