package push

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/internal/exactjson"
	"github.com/channels-dev/channels/internal/outage"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
	"github.com/channels-dev/channels/taskplane/store"
)

// Defaults of a Notifier.
const (
	// DefaultTimeout bounds one notification attempt (the spec asks for 10–30 s).
	DefaultTimeout = 15 * time.Second
	// DefaultPoll is how often the notifier looks for task events to notify when nothing pokes it.
	DefaultPoll = 500 * time.Millisecond
	// DefaultWorkers bounds the configs advanced at once.
	DefaultWorkers = 8
	// pruneEvery is how often configs of vanished tasks are deleted (besides once at start).
	pruneEvery = 10 * time.Minute
	// workBatch bounds the configs one pass takes.
	workBatch = 256
	// stepsPerPass bounds the notifications one config gets per pass, so one busy task does not
	// hold a worker.
	stepsPerPass = 64
)

// DefaultPolicy is the retry policy of notifications: at most 15 attempts, waits from 1 s
// doubling to 1 min with jitter, about 10 minutes in all, so a receiver away for a few minutes
// (a deploy) misses nothing. A receiver's Retry-After spends no attempt, but a notification
// waits so at most 60 times (4 × 15), and not once an hour has gone into such waits (the wait
// that crosses the hour is granted whole). A notification whose attempts or waits
// run out is failed (or ambiguous when an earlier outcome was unknown) and the config moves on
// to the next event.
var DefaultPolicy = delivery.Policy{MaxAttempts: 15, InitialInterval: time.Second, MaxInterval: time.Minute,
	MaxRetryAfterTotal: time.Hour}

// Options configure a Notifier.
type Options struct {
	// AllowPrivateNetworks is the operator's opt-in (push_allow_private_networks) that admits http
	// and loopback, private, link-local, unique-local and shared addresses, for development and
	// tests.
	AllowPrivateNetworks bool
	// Resolver resolves webhook hosts (default net.DefaultResolver).
	Resolver Resolver
	// Timeout bounds one attempt (default DefaultTimeout).
	Timeout time.Duration
	// Policy is the retry policy (zero fields from DefaultPolicy).
	Policy delivery.Policy
	// Poll is how often to look for work without a poke (default DefaultPoll); it is also the
	// engine's poll.
	Poll time.Duration
	// Workers bounds the configs advanced at once (default DefaultWorkers).
	Workers int
	// Logger receives failures (default slog.Default()).
	Logger *slog.Logger
	// Clock is the time (default time.Now) signatures carry; when set, the engine measures leases
	// on it too (by default the engine takes the store's clock, store.NowFunc).
	Clock func() time.Time
}

// Notifier follows the event log of every task that has push configs, from each config's
// durable cursor, and turns each status change and artifact update into a notification delivered
// by its own delivery engine. It is safe for concurrent use.
type Notifier struct {
	plane  *taskplane.Plane
	store  store.Store
	guard  *Guard
	engine *delivery.Engine
	poll   time.Duration
	work   int
	log    *slog.Logger
	now    func() time.Time
	poke   chan struct{}
	view   a2awire.View
	// passes follows the passes the store fails (it is down): they back the loop off and keep
	// the log to a line now and then.
	passes outage.Tracker
}

// New returns a notifier over plane's store. Run starts it; Registered and CheckURL serve the
// A2A service (a2aservice.Config.Push).
func New(plane *taskplane.Plane, o Options) *Notifier {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	// The engine measures leases on o.Clock if set, else on the store's (store.Clock); signatures
	// carry the host's time, which the receiver compares with its own.
	engOpts := []delivery.Option{delivery.WithLogger(o.Logger)}
	if o.Clock != nil {
		engOpts = append(engOpts, delivery.WithClock(o.Clock))
	} else {
		o.Clock = time.Now
	}
	pol := DefaultPolicy
	if o.Policy.MaxAttempts > 0 {
		pol.MaxAttempts = o.Policy.MaxAttempts
	}
	if o.Policy.InitialInterval > 0 {
		pol.InitialInterval = o.Policy.InitialInterval
	}
	if o.Policy.MaxInterval > 0 {
		pol.MaxInterval = o.Policy.MaxInterval
	}
	pol.Multiplier, pol.RandomizationFactor = o.Policy.Multiplier, o.Policy.RandomizationFactor
	pol.MinRetryAfter, pol.MaxRetryAfter = o.Policy.MinRetryAfter, o.Policy.MaxRetryAfter
	pol.MaxRetryAfters = o.Policy.MaxRetryAfters // 0: 4 × MaxAttempts
	if o.Policy.MaxRetryAfterTotal > 0 {
		pol.MaxRetryAfterTotal = o.Policy.MaxRetryAfterTotal
	}
	st := plane.Store()
	g := &Guard{AllowPrivateNetworks: o.AllowPrivateNetworks, Resolver: o.Resolver, DialTimeout: o.Timeout}
	sender := NewSender(st, g, o.Timeout, o.Clock)
	engOpts = append(engOpts, delivery.WithPolicy(pol), delivery.WithSendTimeout(o.Timeout), delivery.WithPoll(o.Poll))
	eng := delivery.New(st, delivery.Routes{taskplane.SourcePush: {Sender: sender, Recovery: delivery.Idempotent}}, engOpts...)
	return &Notifier{
		plane: plane, store: st, guard: g, engine: eng, poll: o.Poll, work: o.Workers, log: o.Logger,
		now: o.Clock, poke: make(chan struct{}, 1),
		view:   a2awire.View{History: a2awire.DefaultLimits().MaxHistoryLength, Artifacts: true},
		passes: outage.Tracker{Name: "push: pass failed", Log: o.Logger, FirstWait: o.Poll},
	}
}

// CheckURL is the SSRF guard's registration check: both arms, with the host resolved now.
func (n *Notifier) CheckURL(ctx context.Context, rawURL string) error {
	return n.guard.CheckURL(ctx, rawURL)
}

// Registered pokes the notifier after a config was stored, so its first notification does not
// wait for the next poll.
func (n *Notifier) Registered(principal, taskID string) { n.wake() }

// wake starts a pass soon (at once if none runs; else right after the one running).
func (n *Notifier) wake() {
	select {
	case n.poke <- struct{}{}:
	default:
	}
}

// Engine returns the delivery engine of notifications (for its records and attempts).
func (n *Notifier) Engine() *delivery.Engine { return n.engine }

// Guard returns the SSRF guard.
func (n *Notifier) Guard() *Guard { return n.guard }

// Run notifies until ctx ends: it runs the delivery engine (retries, recovery after a crash) and
// a loop that prepares each config's next notification once the previous one has settled. It
// returns nil when ctx ends.
func (n *Notifier) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if err := n.engine.Run(ctx); err != nil && ctx.Err() == nil {
			n.log.Error("push: delivery engine stopped", "err", err)
		}
	})
	// A config waits for its pending notification to settle. The engine's own loop often sends
	// it (it claims a prepared delivery as soon as it is prepared, before advance's attempt), so
	// each outcome the engine records starts a pass: the config moves on at once, not at the
	// next poll.
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-n.engine.Changed():
				n.wake()
			}
		}
	})
	// Retention deletes a task's configs with it; this backstop deletes those an older build left
	// behind, at start and then now and again.
	n.prune(ctx)
	prune := time.NewTicker(pruneEvery)
	defer prune.Stop()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-prune.C:
			n.prune(ctx)
			continue
		case <-n.poke:
		case <-t.C:
		}
		_, err := n.RunOnce(ctx)
		switch {
		case err == nil:
			n.passes.Succeeded()
		case ctx.Err() != nil:
		case store.Unavailable(err):
			t.Reset(max(n.poll, n.passes.Failed(err)))
			continue
		default:
			n.log.Error("push: pass failed", "err", err)
		}
		t.Reset(n.poll)
	}
}

// RunOnce makes one pass: for every config with work (a snapshot to send, or events after its
// cursor, and no notification pending) it prepares the next notifications in order and attempts
// each at once, moving on while they are delivered. It reports how many notifications it
// prepared.
func (n *Notifier) RunOnce(ctx context.Context) (int, error) {
	work, err := n.store.ListPushWork(ctx, workBatch)
	if err != nil {
		return 0, fmt.Errorf("push: list work: %w", err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		prepared int
		errs     []error
	)
	sem := make(chan struct{}, n.work)
	for _, c := range work {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			k, err := n.advance(ctx, c)
			mu.Lock()
			defer mu.Unlock()
			prepared += k
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	return prepared, errors.Join(errs...)
}

// advance prepares and attempts c's notifications in order, while each is delivered at once.
func (n *Notifier) advance(ctx context.Context, c store.PushConfig) (int, error) {
	prepared := 0
	for range stepsPerPass {
		next, req, ok, err := n.next(ctx, c)
		if err != nil || !ok {
			return prepared, err
		}
		var rec delivery.Record
		if req != nil {
			rec, err = n.engine.Prepare(ctx, *req)
			if err != nil && !errors.Is(err, delivery.ErrFixedConflict) {
				return prepared, fmt.Errorf("push: prepare %s: %w", req.Operation, err)
			}
			next.LastDelivery = rec.ID
			prepared++
		}
		next.UpdatedAt = n.now().UTC().Truncate(time.Microsecond)
		var advanced bool
		err = n.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			advanced, err = tx.AdvancePushConfig(ctx, next, c.Cursor)
			return err
		})
		if err != nil {
			return prepared, fmt.Errorf("push: advance config %s of task %s: %w", c.ID, c.TaskID, err)
		}
		if !advanced {
			return prepared, nil // replaced, deleted, or advanced by another worker
		}
		c = next
		if req == nil {
			continue
		}
		rec, err = n.engine.Process(ctx, rec.Principal, rec.ID)
		if err != nil {
			return prepared, fmt.Errorf("push: attempt %s: %w", rec.ID, err)
		}
		if !rec.State.Settled() {
			return prepared, nil // the engine retries it; the config waits until it settles
		}
	}
	return prepared, nil
}

// next returns c as it is after its next step and the notification of that step: the
// registration's snapshot, or the next event of the task's log. A log entry that is no stream
// event (a message appended to history) moves the cursor without a notification (req nil). ok is
// false when there is nothing to do.
func (n *Notifier) next(ctx context.Context, c store.PushConfig) (next store.PushConfig, req *delivery.Request, ok bool, err error) {
	next = c
	if len(c.Snapshot) > 0 {
		var t taskplane.Task
		if err := exactjson.Unmarshal(c.Snapshot, &t); err != nil {
			return next, nil, false, fmt.Errorf("push: decode snapshot of config %s: %w", c.ID, err)
		}
		body, err := json.Marshal(a2awire.StreamResponse{Task: a2awire.FromTask(&t, n.view)})
		if err != nil {
			return next, nil, false, err
		}
		next.Snapshot = nil
		next.Finished = t.Status.State.Terminal() // a snapshot of a finished task is its last word
		// And a digest of the body: a change that adds no event (a settlement, metadata) changes
		// the snapshot, and one id must carry one body.
		sum := sha256.Sum256(body)
		id := c.TaskID + ":" + strconv.FormatInt(c.Cursor, 10) + ":task:" + hex.EncodeToString(sum[:6])
		r, err := n.request(c, id, c.Cursor, t.ContextID, body)
		return next, r, err == nil, err
	}
	evs, err := n.plane.Events(ctx, c.Principal, c.TaskID, c.Cursor, 1)
	if errors.Is(err, taskplane.ErrTaskNotFound) || (err == nil && len(evs) == 0) {
		return next, nil, false, nil
	}
	if err != nil {
		return next, nil, false, fmt.Errorf("push: read events of task %s: %w", c.TaskID, err)
	}
	ev := evs[0]
	next.Cursor = ev.Seq
	// A terminal status is the last event a task has: the config has nothing more to send.
	next.Finished = ev.Kind == taskplane.EventStatus && ev.Status != nil && ev.Status.Status.State.Terminal()
	resp := a2awire.FromEvent(ev, n.view)
	if resp == nil {
		return next, nil, true, nil
	}
	body, err := json.Marshal(resp)
	if err != nil {
		return next, nil, false, err
	}
	id := c.TaskID + ":" + strconv.FormatInt(ev.Seq, 10)
	r, err := n.request(c, id, ev.Seq, ev.ContextID, body)
	return next, r, err == nil, err
}

// request is the delivery of one notification. Its operation names the config, registration and
// sequence, and it is fixed, so the same notification is always the same delivery.
func (n *Notifier) request(c store.PushConfig, id string, seq int64, contextID string, body []byte) (*delivery.Request, error) {
	loc, err := json.Marshal(notification{Config: c.ID, Registration: c.Registration, ID: id, Seq: seq, Body: body})
	if err != nil {
		return nil, err
	}
	op := "push:" + c.ID + ":" + c.Registration + ":" + strconv.FormatInt(seq, 10)
	if len(c.Snapshot) > 0 {
		op += ":task"
	}
	return &delivery.Request{Principal: c.Principal, TaskID: c.TaskID, ContextID: contextID, Source: taskplane.SourcePush,
		Operation: op, Locator: loc, Fixed: true}, nil
}

func (n *Notifier) prune(ctx context.Context) {
	for {
		var k int
		err := n.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			k, err = tx.PrunePushConfigs(ctx, 1000)
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				n.log.Error("push: prune configs", "err", err)
			}
			return
		}
		if k < 1000 {
			return
		}
	}
}
