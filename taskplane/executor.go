package taskplane

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"

	"github.com/channels-dev/channels/internal/outage"
	"github.com/channels-dev/channels/taskplane/store"
)

// Executor is the agent side of a task: it is woken for one turn of a task and records what it
// produces through the Turn. Channels does no inference itself.
//
// Execute should leave the task terminal or interrupted (INPUT_REQUIRED, AUTH_REQUIRED) through
// the Turn. A message accepted for the task while the turn runs waits for the next turn: an
// update that would complete, reject or ask for input without the turn having read it (see
// Turn.Refresh) fails with ErrUnseenMessage, and returning that error (or any error wrapping it)
// offers the task again at once, uncounted. Returning another error fails the task with the
// error's text; an error wrapping ErrTransport (the executor could not reach its agent) is
// retried TransportRetries times with backoff first. Returning nil with the task still WORKING
// ends the turn unsettled: the task is offered again, at most MaxReoffers times.
//
// ctx ends when the turn is stopped: the dispatcher shutting down, the turn's lease lost, or the
// task canceled or finished from outside. Then return (ctx.Err() is the natural answer): a turn
// stopped by a shutdown or a lost lease is not failed, whatever Execute returns, but goes back to
// the queue and runs again from the task as stored; one whose task was finished from outside
// ends with it.
type Executor interface {
	Execute(ctx context.Context, turn *Turn) error
}

// ExecutorFunc adapts a function to Executor: the in-process executor of library users.
type ExecutorFunc func(ctx context.Context, turn *Turn) error

// Execute calls f.
func (f ExecutorFunc) Execute(ctx context.Context, turn *Turn) error { return f(ctx, turn) }

// Canceler is implemented by executors that must hear about a cancel (a remote agent).
type Canceler interface {
	Cancel(ctx context.Context, task *Task) error
}

// CancelTimeout bounds how long an executor's Cancel is given (TellCanceler): a remote agent that
// never answers must not hold a turn's heartbeat, shutdown, or a cancel request.
const CancelTimeout = 10 * time.Second

// TellCanceler tells c that task was stopped, on a context that outlives ctx's cancellation (the
// cancel is worth delivering after the turn or the request ends) but not timeout (0:
// CancelTimeout).
func TellCanceler(ctx context.Context, c Canceler, task *Task, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = CancelTimeout
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	return c.Cancel(ctx, task)
}

// DirectResponder is implemented by executors that may answer a new message with a direct Message
// and no Task. The A2A bindings ask before accepting; ok=false means "make a Task".
type DirectResponder interface {
	RespondDirectly(ctx context.Context, principal string, msg Message) (reply *Message, ok bool)
}

// InlineExecutor is implemented by executors that can work out a new task's first turn as a
// pure computation on the task: no I/O, no waiting, nothing kept, microseconds (the echo).
// While a Dispatcher runs such an executor (Inline returns a function), the plane runs the first
// turn of each new task an A2A send creates in the transaction that accepts the send: the task
// is committed already settled, with its turn's events and its woken evidence, one commit for
// the send instead of two (the acceptance, then the turn's result), and no wake. Later turns (a
// follow-up to an INPUT_REQUIRED task), and tasks from provider sources, whose results go home
// through a wake, run through Execute as usual.
type InlineExecutor interface {
	// Inline returns the function that works out a first turn's changes, or nil when the
	// executor has none (a wrapper around an executor that may or may not have one).
	Inline() InlineFunc
}

// InlineFunc works out the changes of a task's first turn. task is the task as its send left it
// (SUBMITTED); the function may keep it but must not modify it or anything it refers to (its
// message's parts and metadata are the acceptance's): what the turn does, it returns as changes.
// The turn takes no time, so the task moves from SUBMITTED straight to what the changes record,
// with no WORKING status between. ok=false declines: the turn runs through Execute as any other.
// So do changes that do not apply, or that leave the task neither terminal nor interrupted, and
// a panic (logged): nothing of them is written. It may be called more than once for one task
// (an acceptance transaction that runs again), and from the store's writer, so it must not
// block.
//
// An inline turn takes no dispatcher slot and waits for no wake, so it may settle its task
// before tasks whose wakes were queued earlier: the wake queue's oldest-first order holds for
// the turns that run through it. When several running Dispatchers of one Plane have an
// InlineFunc, acceptances use the most recently started one's.
type InlineFunc func(task *Task) (changes []Change, ok bool)

// InlineObserver is implemented by an InlineExecutor that wants to hear of the inline turns
// that count: InlineKept is called once per turn whose task the acceptance committed settled,
// after the commit, with how long the InlineFunc took. Declined turns, turns set aside, and runs
// of a transaction that did not commit are not reported.
type InlineObserver interface {
	InlineKept(elapsed time.Duration)
}

// ErrTransport marks an executor error as a transport failure (the agent could not be reached, or
// answered with a transient error): the Dispatcher retries the turn TransportRetries times with
// backoff before failing the task.
var ErrTransport = errors.New("executor transport failure")

// Transport wraps err as a transport failure (errors.Is(err, ErrTransport)).
func Transport(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrTransport, err)
}

// Turn is one executor turn of one task: it holds the authority to change that task, granted when
// the task was offered to the executor and cleared when the turn ends.
type Turn struct {
	plane *Plane
	grant *Grant
	// Task is the task as it was when the turn began; Update refreshes it.
	Task *Task
	// base is the row of the task as this turn last had it from the plane (granted, read or
	// written), encoded then: what Update prepares its changes on, decoded afresh each time, so
	// nothing the executor does to Task or to the values it passed in reaches the store.
	base store.Task
	// endOnFinish: the update that finishes the task also ends the turn, in its transaction
	// (Dispatcher turns; other consumers end their turns themselves). ended records that it did.
	endOnFinish bool
	// endOnSettle: so does the update that leaves the task waiting for an answer (EndWhenSettled).
	endOnSettle bool
	ended       atomic.Bool
	// finishing: the turn has sent an update that finishes its task. Its commit notifies the
	// task's watchers, the turn's own heartbeat among them, which then has nothing to read.
	finishing atomic.Bool
	// seen is the task's last event sequence the turn has read: its grant's activation, or a
	// Refresh. A message accepted after it (its wake's activation is later) is unseen.
	seen int64
	// changed: the task changed under the turn since it was granted (an update found a version it
	// had not prepared on, or the turn was resumed from a lease): a settling update looks for a
	// message the turn has not seen. Without it, every message since the grant would have been
	// in a version the turn prepared on, so there is none.
	changed bool
}

// NewTurn returns the Turn of a grant from ClaimTurn (for consumers other than the Dispatcher,
// such as the worker API).
func (p *Plane) NewTurn(g *Grant) *Turn { return newTurn(p, g, g.Task) }

// newTurn is the turn of g on t, t as the plane has just read or written it.
func newTurn(p *Plane, g *Grant, t *Task) *Turn {
	turn := &Turn{plane: p, grant: g, Task: t, seen: g.Activation}
	turn.base, _ = encodeTask(t) // an encoding failure leaves base empty: updates then read the task
	return turn
}

// ResumeTurn returns the Turn of a grant a consumer keeps outside this process's memory (the
// worker API rebuilds the grant from the lease a worker presents on every call). It fails with
// ErrNoTurn unless g is the task's active turn now, and with ErrTaskTerminal when the task
// finished under it (a cancel, a timeout). g.Task is loaded.
func (p *Plane) ResumeTurn(ctx context.Context, g *Grant) (*Turn, error) {
	var t *Task
	err := p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		w, err := p.checkGrant(ctx, tx, g, p.clock())
		if err != nil {
			return err
		}
		g.Activation, g.Offer, g.LeaseUntil = w.Activation, w.Attempts, w.LeaseUntil
		t, err = getTask(ctx, tx, g.Principal, g.TaskID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("resume turn of task %s: %w", g.TaskID, err)
	}
	g.Task = t
	if t.Status.State.Terminal() {
		return nil, fmt.Errorf("resume turn of task %s: %w", g.TaskID, ErrTaskTerminal)
	}
	turn := newTurn(p, g, t)
	turn.changed = true // t is the task as stored now, not as the turn's grant gave it
	return turn, nil
}

// Principal returns the owner of the turn's task.
func (t *Turn) Principal() string { return t.Task.Origin.Principal }

// Grant returns the turn's authority.
func (t *Turn) Grant() *Grant { return t.grant }

// EndWhenSettled makes the update that settles the task — finishes it, or leaves it waiting for
// an answer — also end the turn, in the same transaction, as a Dispatcher's turns end on a
// finish. A consumer whose calls may be retried (the worker API) then never settles a task twice:
// a settling update that failed changed nothing, and one that committed left no turn to retry
// under. Ended reports whether an update ended the turn so; EndTurn is then not needed (it finds
// no turn). A native task's result, with a Results hook, goes home right after that commit; the
// transaction holds a wake for it (as a cancel's does), so a claimer hands it home again if this
// process dies first.
func (t *Turn) EndWhenSettled() { t.endOnSettle = true }

// Ended reports whether one of the turn's updates ended it (see EndWhenSettled).
func (t *Turn) Ended() bool { return t.ended.Load() }

// Plane returns the plane the turn belongs to.
func (t *Turn) Plane() *Plane { return t.plane }

// Update applies changes to the turn's task and refreshes t.Task. It fails with ErrNoTurn when the
// turn no longer holds the task's authority (its lease ran out and another consumer took the
// task), and with ErrTaskTerminal when the task finished (a cancel, a timeout).
func (t *Turn) Update(ctx context.Context, changes ...Change) error {
	nt, err := t.update(ctx, nil, changes...)
	if err != nil {
		return err
	}
	t.Task = nt
	return nil
}

// update applies changes under the turn's authority, and also(tx, task after the changes, now) in
// the same transaction (evidence of the change).
func (t *Turn) update(ctx context.Context, also func(ctx context.Context, tx store.Tx, t *Task, now time.Time) error,
	changes ...Change) (*Task, error) {
	p, g := t.plane, t.grant
	principal, taskID := t.Task.Origin.Principal, t.Task.ID
	var (
		nt    *Task
		ended bool
		held  store.Wake // the wake held for the result of a native task this update settled and ended
	)
	// The changes are worked out here, off the store's writer, on the task as this turn last had
	// it from the plane (t.base); the transaction writes them if the task is still that version.
	// If it is not (a cancel, another writer), or they do not apply to that copy, the transaction
	// applies them to the task as stored, as it always may.
	var prep *preparedUpdate
	stale := t.base.Body == nil
	settles := false
	for _, c := range changes {
		if st, ok := c.(SetStatus); ok {
			settles = settles || settlesAnswering(st.State)
			if st.State.Terminal() {
				t.finishing.Store(true)
			}
		}
	}
	err := p.retryConcurrent(ctx, true, func() error {
		prep = nil
		if !stale {
			prep = t.prepare(changes)
			stale = prep == nil // applied to the task as stored, which may hold a follow-up
		}
		return p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			held = store.Wake{}
			now := p.clock()
			if g.TaskID != taskID || g.Principal != principal {
				return ErrNoTurn
			}
			w, err := p.checkGrant(ctx, tx, g, now)
			if err != nil {
				return err
			}
			if prep != nil {
				if err := prep.write(ctx, tx); err != nil {
					if errors.Is(err, ErrConcurrentModification) {
						stale = true // run again on the task as stored
					}
					return err
				}
				nt = prep.task
			} else if nt, err = applyTx(ctx, tx, principal, taskID, AnyVersion, now, changes...); err != nil {
				return err
			}
			if settles && (stale || t.changed) {
				// Written, but not to be kept if a message came that the turn has not read (the
				// transaction rolls back). Checked after the write, so a finished task's refusal
				// stays ErrTaskTerminal.
				if err := unseenMessage(ctx, tx, g, t.seen); err != nil {
					return err
				}
			}
			if also != nil {
				if err := also(ctx, tx, nt, now); err != nil {
					return err
				}
			}
			// A finished task needs no more turns: retire the wake now rather than in a
			// transaction of its own (EndTurn). A native task's result goes home first, so a
			// Dispatcher's turn leaves its wake to EndTurn. A turn that ends when settled (its
			// calls may be retried) ends here all the same, or a retry after a failed EndTurn
			// would settle the task again (a second question): a wake held for the result hands
			// it home after the commit, or after a crash before that.
			homeFirst := p.queue.results != nil && native(nt)
			ended = (t.endOnFinish && nt.Status.State.Terminal() && !homeFirst) || (t.endOnSettle && settledState(nt))
			if !ended {
				return nil
			}
			if err := retire(ctx, tx, w, store.WakeDone, "settled: "+string(nt.Status.State), now); err != nil {
				return err
			}
			held, err = p.holdResultTx(ctx, tx, nt, now)
			return err
		})
	})
	t.changed = t.changed || stale
	if err != nil {
		if errors.Is(err, ErrUnseenMessage) {
			t.finishing.Store(false) // refused: the task goes on
		}
		return nil, fmt.Errorf("update task %s: %w", taskID, storeFault(err))
	}
	if ended {
		t.ended.Store(true)
	}
	if held.ID != "" {
		p.sendHomeHeld(ctx, nt, held)
	}
	// The next update starts from this one's row: the prepared one as written, or the task as
	// the transaction read and changed it, encoded before the executor gets it back.
	if prep != nil {
		t.base = prep.row
	} else {
		t.base, _ = encodeTask(nt) // a zero row when it cannot be encoded: the next update reads the task
	}
	var committed *store.Task // the row waiters are handed (publishRow copies it), when there is one
	if t.base.ID != "" {
		committed = &t.base
	}
	p.broker.publishRow(principal, taskID, committed)
	return nt, nil
}

// prepare works changes out on a fresh decoding of t.base, or returns nil if they do not apply
// to it (the transaction then applies them to the task as stored, which gives the real error).
func (t *Turn) prepare(changes []Change) *preparedUpdate {
	base, err := decodeTask(t.base)
	if err != nil {
		return nil
	}
	u, err := prepareUpdate(base, t.plane.clock(), changes...)
	if err != nil {
		return nil
	}
	return u
}

// Refresh re-reads the turn's task. The messages it holds count as read: an update after it may
// settle the task (see ErrUnseenMessage).
func (t *Turn) Refresh(ctx context.Context) error {
	nt, err := t.plane.GetTask(ctx, t.Principal(), t.Task.ID)
	if err != nil {
		return storeFault(err)
	}
	t.Task = nt
	t.base, _ = encodeTask(nt)
	t.seen = max(t.seen, nt.LastSeq)
	return nil
}

// settlesAnswering reports whether a turn's move to s answers the task's messages: completed,
// rejected, or a question back. (A failure or a cancel ends the task whatever it was told.)
func settlesAnswering(s State) bool {
	return s == StateCompleted || s == StateRejected || s == StateInputRequired || s == StateAuthRequired
}

// unseenMessage returns ErrUnseenMessage if a wake of the task other than g's waits for a message
// accepted after seen: a continuation held back by g's turn.
func unseenMessage(ctx context.Context, tx store.Tx, g *Grant, seen int64) error {
	later, err := laterWake(ctx, tx, g.Principal, g.TaskID, g.WakeID, seen)
	if err == nil && later {
		err = ErrUnseenMessage
	}
	return err
}

// Dispatcher defaults.
const (
	// DefaultConcurrency is how many turns a Dispatcher runs at once unless told otherwise.
	DefaultConcurrency = 32
	// DefaultTurnLease is how long a turn's authority lasts without renewal; the Dispatcher
	// renews it every third of that while the executor runs.
	DefaultTurnLease = time.Minute
	// DefaultRetryBackoff is the first wait before a transport failure is retried; it doubles.
	DefaultRetryBackoff = time.Second
)

// Dispatcher takes wakes from the queue and runs the executor for each, at most Concurrency turns
// at a time, oldest first, one turn per task. Several Dispatchers (in several processes sharing a
// Postgres store) may run at once: a wake is claimed by exactly one of them.
type Dispatcher struct {
	Plane    *Plane
	Executor Executor
	// Concurrency is how many turns run at once (default DefaultConcurrency). A claimer with no
	// turn waits parked, at no cost to the store.
	Concurrency int
	// Poll is how often the store is re-read when nothing pokes the dispatcher (wakes left by a
	// previous run, re-offers falling due, wakes accepted by another process). Default 1s.
	Poll time.Duration
	// Lease is how long a turn's authority lasts without renewal (default DefaultTurnLease). A
	// turn whose process died is offered again once its lease runs out.
	Lease time.Duration
	// Owner names this dispatcher in leases and evidence (default: a random id per Run). Each
	// claim leases its wake as Owner + "/" + a number of its own, so a grant of this dispatcher
	// never passes for another of its grants of the same task and offer (a turn given back at
	// shutdown is claimed again at the same offer).
	Owner string
	// RetryBackoff is the first wait before a transport failure is retried (default
	// DefaultRetryBackoff, doubling).
	RetryBackoff time.Duration
	// CancelTimeout bounds the executor's Cancel when a running turn's task is stopped from
	// outside (default CancelTimeout).
	CancelTimeout time.Duration
	// Drain is how long turns running when Run's context ends may go on to finish (their
	// context stays alive, their leases renewed); Run claims nothing more meanwhile, and
	// interrupts what is still running when Drain is over. 0 interrupts them at once. An
	// interrupted turn goes back to the queue and runs again from the task as stored.
	Drain time.Duration

	active atomic.Bool // Run is running
	mu     sync.Mutex
	// running: task id → its turns running in this process. Normally one; a turn that lost its
	// authority (its lease ran out and the wake was offered again, here) runs on until it notices.
	running map[string][]*liveTurn
	early   map[string]time.Time // cancels that came before their turn started here, by task id
	// toldFor: tasks whose finish a turn of this process passed on to the Canceler executor, by
	// task id, kept for a lease after the turn ended: a CancelTurn that comes after the turn ended
	// (its update was refused in the gap between the cancel's commit and CancelTurn) must not
	// have the Canceler told again.
	toldFor map[string]time.Time
	polls   chan struct{} // one poll on offer to the waiting claimers
	claimNo atomic.Uint64 // numbers the claims' owners (see Owner)
	// claims follows failed claims (the store down): the claimers back off, and the log keeps to
	// a line now and then.
	claims outage.Tracker
}

type liveTurn struct {
	cancel   context.CancelFunc
	canceled bool // CancelTurn was called: the cancel came through this process
	// leaseLost: the heartbeat stopped the turn because no renewal succeeded in time (the store
	// was out of reach); the turn is given back, not failed.
	leaseLost atomic.Bool
	// told: a stop from outside was passed on to the Canceler executor (once per turn).
	told atomic.Bool
}

func (d *Dispatcher) lease() time.Duration {
	if d.Lease <= 0 {
		return DefaultTurnLease
	}
	return d.Lease
}

// ErrDispatcherRunning is Run's error when the Dispatcher is already running.
var ErrDispatcherRunning = errors.New("taskplane: dispatcher already running")

// Run dispatches until ctx ends, then waits for running turns to return. Turns interrupted by the
// shutdown (ctx's end cancels every running turn's context, at once or after Drain) go back to
// the queue and run again from durable state. Plane and Executor must be set; a Dispatcher runs
// once at a time (a second Run while one runs returns ErrDispatcherRunning), and several
// Dispatchers may share a Plane.
func (d *Dispatcher) Run(ctx context.Context) error {
	if d.Plane == nil || d.Executor == nil {
		return errors.New("taskplane: dispatcher needs a Plane and an Executor")
	}
	if !d.active.CompareAndSwap(false, true) {
		return ErrDispatcherRunning
	}
	defer d.active.Store(false)
	if ie, ok := d.Executor.(InlineExecutor); ok {
		if f := ie.Inline(); f != nil {
			e := &inlineTurn{f: f}
			if o, ok := d.Executor.(InlineObserver); ok {
				e.kept = o.InlineKept
			}
			defer d.Plane.addInline(e)()
		}
	}
	conc := d.Concurrency
	if conc <= 0 {
		conc = DefaultConcurrency
	}
	poll := d.Poll
	if poll <= 0 {
		poll = time.Second
	}
	owner := d.Owner
	if owner == "" {
		owner = "dispatcher-" + uuid.NewString()
	}
	d.mu.Lock()
	d.running = map[string][]*liveTurn{}
	d.polls = make(chan struct{}, 1)
	d.mu.Unlock()
	d.claims.Name, d.claims.Log, d.claims.FirstWait = "claim wake", d.Plane.log, poll
	hints := d.Plane.wakeHints()
	// conc claimers, each running the turns it claims. They claim concurrently, so their claim
	// transactions share commits (SQLite group commit) or run side by side (Postgres, SKIP
	// LOCKED) instead of queuing one claim behind another.
	// Turns run on turns, which ends with ctx, or Drain after it.
	turns, interrupt := context.WithCancel(context.WithoutCancel(ctx))
	defer interrupt()
	stopDrain := context.AfterFunc(ctx, func() {
		if d.Drain <= 0 {
			interrupt()
			return
		}
		time.AfterFunc(d.Drain, interrupt) // a no-op if Run returned first (deferred interrupt)
	})
	defer stopDrain()
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() { d.claimLoop(ctx, turns, owner, hints, d.polls) })
	}
	wg.Go(func() { d.pollLoop(ctx, poll) })
	wg.Wait()
	return nil
}

// claimLoop claims and runs turns one at a time until ctx ends. A waiting claimer is parked
// where an acceptance creating a task can hand it that task's first turn directly (see
// Plane.takeClaimer). It claims when a hint says this process enqueued or released a wake (one
// hint wakes one claimer), and when the dispatcher's poll picks it (wakes of other processes,
// re-offers coming due, hints dropped). A claim that found work nobody hinted at (at start, or by
// polling) is followed at once by another, and passes the poll on to one more claimer, to drain
// a backlog; a hinted one is not, since its hint was for one wake.
//
// Each turn runs on a child of turns (ctx, or ctx with Drain after it).
func (d *Dispatcher) claimLoop(ctx, turns context.Context, owner string, hints, polls <-chan struct{}) {
	claimNow := true // wakes left by a previous run
	for ctx.Err() == nil {
		var g *Grant
		if claimNow {
			g = d.claim(ctx, owner, false)
			claimNow = g != nil
		} else {
			handed, hinted, polled := false, false, false
			g, handed, hinted, polled = d.wait(ctx, owner, hints, polls)
			if !handed && ctx.Err() == nil {
				g = d.claim(ctx, owner, hinted)
				claimNow = polled && g != nil
			}
		}
		if claimNow {
			d.nudge()
		}
		if g == nil {
			continue
		}
		if ctx.Err() != nil && (d.Drain <= 0 || turns.Err() != nil) {
			// Handed a turn while stopping, with no drain to run it in: give it back to the
			// queue at once. (Within a drain it runs like the turns already running: it was
			// granted before the stop.)
			if err := d.Plane.EndTurn(context.WithoutCancel(ctx), g, TurnEnd{Shutdown: true}); err != nil && !errors.Is(err, ErrNoTurn) {
				d.Plane.log.Error("end turn handed over at shutdown", "task", g.TaskID, "err", err)
			}
			return
		}
		turnCtx, cancel := context.WithCancel(turns)
		lt := &liveTurn{cancel: cancel}
		d.mu.Lock()
		d.running[g.TaskID] = append(d.running[g.TaskID], lt)
		if _, ok := d.early[g.TaskID]; ok {
			// Canceled between the grant and now.
			delete(d.early, g.TaskID)
			lt.canceled = true
			cancel()
		}
		d.mu.Unlock()
		d.runTurn(turns, turnCtx, g, lt)
		d.finish(g.TaskID, lt)
	}
}

// pollLoop offers a poll to one waiting claimer every poll interval (with jitter), until ctx
// ends.
func (d *Dispatcher) pollLoop(ctx context.Context, poll time.Duration) {
	for {
		t := time.NewTimer(poll/2 + rand.N(poll))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			d.nudge()
		}
	}
}

// nudge offers one waiting claimer a poll.
func (d *Dispatcher) nudge() {
	select {
	case d.polls <- struct{}{}:
	default: // a poll is already on offer
	}
}

// claim claims a turn for owner, if one is due. While claims fail (the store down) the claimers
// back off together: none claims until the wait the last failure asked for is over, unless
// hinted by a commit made after the last failure: this process enqueued or released a wake, so
// the store answers again, and the wake would otherwise wait for a poll after the back-off. A
// hint of an older commit (hints pile up while every claimer is busy) does not end the wait.
func (d *Dispatcher) claim(ctx context.Context, owner string, hinted bool) *Grant {
	if d.claims.Waiting() && !(hinted && d.Plane.pokedSince(d.claims.LastFailure())) {
		return nil
	}
	start := time.Now()
	g, err := d.Plane.ClaimTurn(ctx, ClaimRequest{Owner: d.claimOwner(owner), Lease: d.lease()})
	switch {
	case err == nil:
		d.claims.Succeeded()
	case ctx.Err() == nil:
		d.claims.FailedSince(start, err)
	}
	return g
}

// claimOwner is the owner one claim leases its wake as: owner and a number of its own.
func (d *Dispatcher) claimOwner(owner string) string {
	return owner + "/" + strconv.FormatUint(d.claimNo.Add(1), 10)
}

// wait parks the claimer until an acceptance hands it a turn (handed: g is that turn, or nil when
// the acceptance made none), a hint arrives (hinted), a poll picks it (polled), or ctx ends.
func (d *Dispatcher) wait(ctx context.Context, owner string, hints, polls <-chan struct{}) (g *Grant, handed, hinted, polled bool) {
	c := &idleClaimer{owner: d.claimOwner(owner), lease: d.lease(), grant: make(chan *Grant, 1)}
	d.Plane.parkClaimer(c)
	select {
	case g = <-c.grant:
		return g, true, false, false
	case <-ctx.Done():
	case <-hints:
		hinted = true
	case <-polls:
		polled = true
	}
	if d.Plane.unparkClaimer(c) {
		return nil, false, hinted, polled
	}
	// An acceptance took the claimer meanwhile: its outcome is on the way. The hint or poll this
	// claimer took is for another wake; pass it on.
	if hinted {
		d.Plane.rehint()
	}
	if polled {
		d.nudge()
	}
	return <-c.grant, true, false, false
}

// finish ends lt, the turn of taskID this process ran. Once a turn has ended, another claimer may
// already hold the task's next turn: only lt's own entry is removed, never that one.
func (d *Dispatcher) finish(taskID string, lt *liveTurn) {
	lt.cancel()
	d.mu.Lock()
	if rest := slices.DeleteFunc(d.running[taskID], func(x *liveTurn) bool { return x == lt }); len(rest) > 0 {
		d.running[taskID] = rest
	} else {
		delete(d.running, taskID)
	}
	d.mu.Unlock()
}

// CancelTurn stops the running turn of a task in this process, if any (after a cancel). A turn
// granted here but not started yet (its grant is on the way to a claimer) is stopped as it
// starts: the cancel is remembered for a lease.
//
// tell reports whether the caller is to tell a Canceler executor of the cancel (TellCanceler):
// false when a turn of this process has passed the task's finish on already (its update was
// refused, or its heartbeat saw the finish, after the cancel committed and before this call).
// Every running turn of the task is marked told, so none of them tells it afterwards: the
// executor hears of one cancel once.
func (d *Dispatcher) CancelTurn(taskID string) (tell bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	tell = true
	if _, ok := d.toldFor[taskID]; ok {
		delete(d.toldFor, taskID)
		tell = false
	}
	if lts := d.running[taskID]; len(lts) > 0 {
		for _, lt := range lts {
			lt.canceled = true
			if !lt.told.CompareAndSwap(false, true) {
				tell = false
			}
			lt.cancel()
		}
		return tell
	}
	d.early = remember(d.early, taskID, now, d.lease())
	return tell
}

// remember records taskID at now in m, dropping what is older than keep, and returns m (made when
// nil). The dispatcher's memories of cancels last a lease.
func remember(m map[string]time.Time, taskID string, now time.Time, keep time.Duration) map[string]time.Time {
	for id, at := range m {
		if now.Sub(at) > keep {
			delete(m, id)
		}
	}
	if m == nil {
		m = map[string]time.Time{}
	}
	m[taskID] = now
	return m
}

// tellCanceler passes a stop from outside (task finished by a cancel through another process or
// before CancelTurn here, a timeout, an overflow) to a Canceler executor, once per turn: the a2a
// executor then cancels the downstream task. A cancel that came through CancelTurn here first is
// passed on by CancelTurn's caller.
func (d *Dispatcher) tellCanceler(ctx context.Context, lt *liveTurn, task *Task) {
	c, ok := d.Executor.(Canceler)
	if !ok || d.canceledHere(lt) || !stoppedFromOutside(task) || !lt.told.CompareAndSwap(false, true) {
		return
	}
	d.noteTold(task.ID)
	if err := TellCanceler(ctx, c, task, d.CancelTimeout); err != nil {
		d.Plane.log.Warn("executor cancel failed", "task", task.ID, "err", err)
	}
}

// noteTold remembers, for a lease, that a turn of this process told the Canceler of taskID's
// finish, for a CancelTurn that comes after the turn has ended.
func (d *Dispatcher) noteTold(taskID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.toldFor = remember(d.toldFor, taskID, time.Now(), d.lease())
}

// canceledHere reports whether lt was stopped by CancelTurn.
func (d *Dispatcher) canceledHere(lt *liveTurn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return lt.canceled
}

// runTurn runs one granted turn on ctx (a child of the dispatcher's run context).
func (d *Dispatcher) runTurn(run, ctx context.Context, g *Grant, lt *liveTurn) {
	log := d.Plane.log.With("task", g.TaskID, "wake", g.WakeID, "offer", g.Offer)
	turn := d.Plane.NewTurn(g)
	turn.endOnFinish = true
	stopBeat := d.heartbeat(ctx, turn, lt)
	err := d.execute(ctx, turn)
	stopBeat()
	bg := context.WithoutCancel(ctx)
	if errors.Is(err, ErrTaskTerminal) {
		// The executor saw the task finish under it (its update was refused) before a heartbeat
		// did: a stop from outside is passed on from here.
		if t, gerr := d.Plane.GetTask(bg, g.Principal, g.TaskID); gerr == nil {
			d.tellCanceler(bg, lt, t)
		}
	}
	interrupted := run.Err() != nil || lt.leaseLost.Load()
	if interrupted && !turn.ended.Load() && !errors.Is(err, ErrTaskTerminal) && !errors.Is(err, ErrNoTurn) {
		// The dispatcher is stopping (shutdown), or the turn was stopped because its lease could
		// not be renewed in time: the turn was interrupted, not failed, whether the executor
		// said so (ctx.Err()) or returned nil with the task unfinished. Its wake goes back to the
		// queue (or, if the store is still away, waits for its lease to run out), so a turn runs
		// again from durable state.
		// Tried once: the dispatcher is stopping, or the store failing; a wake left leased is
		// offered again when its lease runs out.
		if eerr := d.Plane.EndTurn(bg, g, TurnEnd{Shutdown: true}); eerr != nil && !errors.Is(eerr, ErrNoTurn) {
			log.Error("end interrupted turn", "err", eerr)
		}
		return
	}
	if errors.Is(err, ErrUnseenMessage) && !turn.ended.Load() {
		// A message came during the turn and the turn would have settled the task without it:
		// the task goes back to the queue at once, uncounted, and its next turn reads everything.
		log.Info("a message arrived during the turn; the task is offered again", "err", err)
		if err := d.endTurn(run, g, TurnEnd{Unseen: true}); err != nil && !errors.Is(err, ErrNoTurn) {
			log.Error("end turn", "err", err)
		}
		return
	}
	switch {
	case errors.Is(err, ErrStore):
		// The store failed the turn's write (or read), not its agent: the task is not failed
		// with the store's error; the turn ends unsettled and is offered again after a delay,
		// counted against the re-offer cap, as a turn whose holder died would be.
		log.Warn("the store failed during the turn; it is offered again", "err", err)
	case err != nil && !errors.Is(err, ErrTaskTerminal) && !errors.Is(err, ErrNoTurn):
		d.failTurn(bg, turn, err)
	}
	if turn.ended.Load() {
		return // the update that finished the task ended the turn
	}
	if err := d.endTurn(run, g, TurnEnd{}); err != nil && !errors.Is(err, ErrNoTurn) {
		log.Error("end turn", "err", err)
	}
}

// endTurn ends g's turn. While the store fails it (a restart or failover cut the connection,
// most likely the same that failed the turn's last write) it tries again, backing off, for as
// long as a lease lasts and the dispatcher runs: a turn left unended is offered again only when
// its lease runs out (a minute by default), as if its holder had died. A retry after an end that
// committed but lost its answer finds the turn over (ErrNoTurn): an unsettled wake keeps its
// offer number, so the next claim of it has another. Not for Shutdown ends (see runTurn).
func (d *Dispatcher) endTurn(run context.Context, g *Grant, end TurnEnd) error {
	stop := time.Now().Add(d.lease())
	wait := endTurnRetry
	for {
		err := d.Plane.EndTurn(context.WithoutCancel(run), g, end)
		if err == nil || !errors.Is(storeFault(err), ErrStore) || time.Now().Add(wait).After(stop) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-run.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// endTurnRetry is the first wait before a turn's end the store failed is tried again.
const endTurnRetry = 100 * time.Millisecond

// execute runs the executor, retrying transport failures with backoff.
func (d *Dispatcher) execute(ctx context.Context, turn *Turn) error {
	first := d.RetryBackoff
	if first <= 0 {
		first = DefaultRetryBackoff
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = first, 30*first, 0
	attempt := 0
	return backoff.RetryNotify(func() error {
		attempt++
		if attempt > 1 {
			if err := turn.Refresh(ctx); err != nil {
				return backoff.Permanent(err)
			}
			if turn.Task.Status.State.Terminal() {
				return backoff.Permanent(ErrTaskTerminal)
			}
		}
		err := d.executeOnce(ctx, turn)
		if err == nil || (errors.Is(err, ErrTransport) && ctx.Err() == nil) {
			return err
		}
		return backoff.Permanent(err)
	}, backoff.WithContext(backoff.WithMaxRetries(b, TransportRetries), ctx), func(err error, wait time.Duration) {
		d.Plane.log.Warn("executor transport failure; retrying", "task", turn.Task.ID, "attempt", attempt,
			"wait", wait.String(), "err", err)
	})
}

var errPanicked = errors.New("the executor panicked")

// executeOnce calls the executor, reading a panic in it as its error (logged with its stack): one
// task's turn, say a reply from a remote agent the executor did not expect, must not take down
// the process and every other turn with it.
func (d *Dispatcher) executeOnce(ctx context.Context, turn *Turn) (err error) {
	defer func() {
		if p := recover(); p != nil {
			d.Plane.log.Error("executor panicked", "task", turn.Task.ID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = errPanicked // the value and stack go to the log only, not into the task's status
		}
	}()
	return d.Executor.Execute(ctx, turn)
}

// failTurn fails the task of a turn whose executor returned an error, unless it already finished.
func (d *Dispatcher) failTurn(ctx context.Context, turn *Turn, cause error) {
	reason := ReasonExecutor
	if errors.Is(cause, ErrTransport) {
		reason = ReasonTransport
	}
	var also func(ctx context.Context, tx store.Tx, t *Task, now time.Time) error
	if reason == ReasonTransport {
		also = func(ctx context.Context, tx store.Tx, t *Task, now time.Time) error {
			return evidence(ctx, tx, t.Origin.Principal, t.Origin.Source, EvidenceWakeFailed, t.ID, map[string]any{
				"reason": ReasonTransport, "wake": turn.grant.WakeID, "attempts": 1 + TransportRetries,
				"error": cause.Error()}, now)
		}
	}
	t, err := turn.update(ctx, also, failStatus(reason, cause.Error(), d.Plane.newID()))
	switch {
	case errors.Is(err, ErrTaskTerminal) || errors.Is(err, ErrNoTurn):
	case err != nil:
		d.Plane.log.Error("fail task after executor error", "task", turn.Task.ID, "err", err)
	default:
		turn.Task = t
	}
}

// turnWatchSpacing is the least time between two reads of a running turn's task on a notification:
// a chatty turn's own updates notify too, and a stop from outside waits at most this long more.
const turnWatchSpacing = 100 * time.Millisecond

// heartbeat renews the turn's lease every third of it until stopped. When the authority is lost,
// or the task finished under the turn (a cancel or timeout in any process), it stops the turn; a
// finish that did not come through CancelTurn here is passed on to a Canceler executor. Between
// renewals it also watches the task's notifications (commits in this process, and in others
// through RunListener): on one it reads the task, so a stop from outside reaches a quiet turn at
// once rather than at the next renewal.
func (d *Dispatcher) heartbeat(ctx context.Context, turn *Turn, lt *liveTurn) (stop func()) {
	g := turn.grant
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	// Subscribed before the executor starts, so a stop committed from then on pokes the turn.
	poke, unsubscribe := d.Plane.broker.watch(g.Principal, g.TaskID)
	go func() {
		defer close(done)
		defer unsubscribe()
		// pokes is poke while the turn watches it; after a read it rests for turnWatchSpacing (a
		// poke meanwhile stays in poke's buffer), and for good once the task finished by the turn's
		// own update.
		pokes := poke
		var rested <-chan time.Time
		t := time.NewTicker(d.lease() / 3)
		defer t.Stop()
		// The watchdog stops the turn two thirds of a lease after the last renewal that succeeded
		// was sent (at first, after the grant's transaction wrote the lease: a commit or a start
		// that took long leaves the turn less of it), whether or not a renewal is still
		// in flight (a store out of reach may hold one for long): past it too little of the lease
		// is left to be sure of renewing before another process may take the task. A renewal that
		// fails is tried again every twelfth of a lease meanwhile, so a short blip of the store
		// does not stop the turn. The watchdog measures durations on this process's monotonic
		// clock, so the store's clock, on which the lease is written, may differ from this host's.
		deadline := d.lease() * 2 / 3
		first := deadline
		if !g.granted.IsZero() {
			first -= time.Since(g.granted)
		}
		watchdog := time.AfterFunc(first, func() {
			d.Plane.log.Warn("turn could not renew its lease in time; stopping it", "task", g.TaskID, "wake", g.WakeID)
			lt.leaseLost.Store(true)
			lt.cancel()
		})
		defer watchdog.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-pokes:
				if turn.finishing.Load() {
					// The turn's own update finishes the task: nothing from outside to see, unless
					// that update is refused (ErrUnseenMessage) and the turn goes on: look again
					// a little later.
					pokes, rested = nil, time.After(turnWatchSpacing)
					continue
				}
				switch task := d.stoppedTask(ctx, g); {
				case task == nil:
					pokes, rested = nil, time.After(turnWatchSpacing)
				case stoppedFromOutside(task):
					lt.cancel() // the executor stops first, whatever the cancel's fate
					d.tellCanceler(ctx, lt, task)
					return
				default:
					pokes = nil // finished by the turn itself: its update ends the turn
				}
				continue
			case <-rested:
				pokes, rested = poke, nil
				continue
			case <-t.C:
			}
			sent := time.Now()
			task, err := d.Plane.RenewTurn(ctx, g, d.lease())
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, ErrNoTurn) && turn.ended.Load():
				return // the executor finished the task, which ended the turn
			case errors.Is(err, ErrNoTurn) && d.finished(ctx, g):
				// The task finished, and its wake was retired (by the turn's own last update,
				// which it has not noted yet, or by a claimer after the lease ran out): no
				// authority was lost to another turn.
				lt.cancel()
				return
			case errors.Is(err, ErrNoTurn):
				d.Plane.log.Warn("turn lost its authority; stopping it", "task", g.TaskID, "wake", g.WakeID)
				lt.cancel()
				return
			case err != nil:
				d.Plane.log.Warn("renew turn; trying again", "task", g.TaskID, "err", err)
				t.Reset(d.lease() / 12)
				continue
			case task.Status.State.Terminal():
				lt.cancel() // the executor stops first, whatever the cancel's fate
				d.tellCanceler(ctx, lt, task)
				return
			}
			t.Reset(d.lease() / 3)
			watchdog.Reset(deadline - time.Since(sent))
		}
	}()
	return func() { cancel(); <-done }
}

// stoppedTask returns g's task when it has finished, nil while it has not (or cannot be read: the
// next renewal will tell). The task is decoded only when its row says it finished.
func (d *Dispatcher) stoppedTask(ctx context.Context, g *Grant) *Task {
	row, err := d.Plane.store.GetTask(ctx, g.Principal, g.TaskID)
	if err != nil || !State(row.State).Terminal() {
		return nil
	}
	t, err := decodeTask(row)
	if err != nil {
		return nil
	}
	return t
}

// finished reports whether g's task is terminal: a turn that lost its authority because its own
// update finished the task (the renewal ran between that commit and the turn noting it).
func (d *Dispatcher) finished(ctx context.Context, g *Grant) bool {
	t, err := d.Plane.GetTask(ctx, g.Principal, g.TaskID)
	return err == nil && t.Status.State.Terminal()
}

// stoppedFromOutside reports whether a finished task was stopped by someone other than its
// executor: canceled, failed by the task timeout, or failed by the admission bound (a follow-up
// refused while the turn ran).
func stoppedFromOutside(t *Task) bool {
	if t.Status.State == StateCanceled {
		return true
	}
	if t.Status.State != StateFailed || t.Status.Message == nil {
		return false
	}
	r, _ := t.Status.Message.Metadata[MetaReason].(string)
	return r == ReasonTimeout || r == ReasonNoResponse || r == ReasonOverflow
}
