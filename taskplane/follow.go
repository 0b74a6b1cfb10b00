package taskplane

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/channels-dev/channels/internal/outage"
	"github.com/channels-dev/channels/taskplane/store"
)

// broker wakes in-process subscribers of a task after a commit. It carries no data to them: a
// woken subscriber reads the durable event log after the last sequence it has, so a lost or
// duplicated poke never loses or repeats an event. A waiter (WaitTask) is handed the task's row as
// a turn of this process committed it, so it needs no read; any other commit it hears of, it reads.
type broker struct {
	mu      sync.Mutex
	subs    map[string]map[chan struct{}]struct{}
	waiters map[string]map[*waiter]struct{}
	// streams counts the subscriptions of clients' streams (FollowStream), the only ones the
	// subscriber count reports: a running turn's watch and a blocking send's wait are not streams.
	streams int
}

func newBroker() *broker {
	return &broker{subs: map[string]map[chan struct{}]struct{}{}, waiters: map[string]map[*waiter]struct{}{}}
}

// waiter is a WaitTask's subscription: poked as a subscriber is, and handed the rows commits of
// this process published (publishRow), in the order they were published; read is set when a
// commit was only announced, or more rows came than the waiter keeps.
type waiter struct {
	ch   chan struct{}
	rows []store.Task // guarded by the broker's mu
	read bool
}

// maxWaiterRows bounds the rows a waiter keeps between two wake-ups. Past it, the oldest row whose
// state the next one repeats is dropped, so every change of state is still handed over (a turn
// streaming an artifact in many updates, then asking a question); with none such, the waiter reads.
const maxWaiterRows = 16

// wait subscribes a waiter to (principal, taskID).
func (b *broker) wait(principal, taskID string) (*waiter, func()) {
	w := &waiter{ch: make(chan struct{}, 1)}
	k := brokerKey(principal, taskID)
	b.mu.Lock()
	if b.waiters[k] == nil {
		b.waiters[k] = map[*waiter]struct{}{}
	}
	b.waiters[k][w] = struct{}{}
	b.mu.Unlock()
	return w, func() {
		b.mu.Lock()
		delete(b.waiters[k], w)
		if len(b.waiters[k]) == 0 {
			delete(b.waiters, k)
		}
		b.mu.Unlock()
	}
}

// take returns what w was handed since the last take: the rows published, and whether a commit
// was announced without one (the waiter must then read).
func (b *broker) take(w *waiter) (rows []store.Task, read bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rows, read = w.rows, w.read
	w.rows, w.read = nil, false
	return rows, read
}

// pokeWaiters pokes the waiters of key, handing them row when it is not nil (mu held).
func (b *broker) pokeWaiters(key string, row *store.Task) {
	for w := range b.waiters[key] {
		if row != nil && len(w.rows) == maxWaiterRows {
			w.rows = dropRepeated(w.rows)
		}
		if row == nil || len(w.rows) == maxWaiterRows {
			w.read = true
		} else {
			w.rows = append(w.rows, *row)
		}
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// dropRepeated removes the oldest of rows whose state the next row repeats, if there is one.
func dropRepeated(rows []store.Task) []store.Task {
	for i := 0; i+1 < len(rows); i++ {
		if rows[i].State == rows[i+1].State {
			return slices.Delete(rows, i, i+1)
		}
	}
	return rows
}

func brokerKey(principal, taskID string) string { return principal + "\x00" + taskID }

// subscribe subscribes to (principal, taskID) for a follower that is not a stream.
func (b *broker) subscribe(principal, taskID string) (<-chan struct{}, func()) {
	return b.add(principal, taskID, 0)
}

// subscribeStream is subscribe for a client's stream: counted in b.streams while it lasts.
func (b *broker) subscribeStream(principal, taskID string) (<-chan struct{}, func()) {
	return b.add(principal, taskID, 1)
}

// add subscribes to (principal, taskID), adding stream to b.streams for as long (in the same
// critical sections, so Subscribers never sees one without the other).
func (b *broker) add(principal, taskID string, stream int) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	k := brokerKey(principal, taskID)
	b.mu.Lock()
	if b.subs[k] == nil {
		b.subs[k] = map[chan struct{}]struct{}{}
	}
	b.subs[k][ch] = struct{}{}
	b.streams += stream
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		if _, ok := b.subs[k][ch]; ok {
			delete(b.subs[k], ch)
			b.streams -= stream
		}
		if len(b.subs[k]) == 0 {
			delete(b.subs, k)
		}
		b.mu.Unlock()
	}
}

// watch is subscribe for a running turn watching its own task: not a stream, so Subscribers
// leaves it out.
func (b *broker) watch(principal, taskID string) (<-chan struct{}, func()) {
	return b.subscribe(principal, taskID)
}

// publishAll pokes every subscriber: notifications may have been lost (the listener reconnected).
func (b *broker) publishAll() {
	b.mu.Lock()
	for k := range b.waiters {
		b.pokeWaiters(k, nil)
	}
	for _, subs := range b.subs {
		for ch := range subs {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	b.mu.Unlock()
}

func (b *broker) publish(principal, taskID string) { b.publishRow(principal, taskID, nil) }

// publishRow is publish for a commit that wrote row, the task's row as committed (nil: not
// known); waiters get it instead of reading it.
func (b *broker) publishRow(principal, taskID string, row *store.Task) {
	k := brokerKey(principal, taskID)
	b.mu.Lock()
	b.pokeWaiters(k, row)
	for ch := range b.subs[k] {
		select {
		case ch <- struct{}{}:
		default: // already poked; the subscriber will read everything new
		}
	}
	b.mu.Unlock()
}

// Subscribers reports how many clients' streams (FollowStream: A2A SendStreamingMessage and
// SubscribeToTask) follow tasks in this process, for the channels_sse_subscribers gauge. Other
// followers are not streams and are not counted: a blocking send waiting for its task to settle,
// a running turn watching its task.
func (p *Plane) Subscribers() int {
	p.broker.mu.Lock()
	defer p.broker.mu.Unlock()
	return p.broker.streams
}

// followRecheck is how often Follow re-reads the event log of a shared store without a poke.
const followRecheck = 2 * time.Second

// followPage bounds one read of the log while following.
const followPage = 256

// DefaultFollowOutage is how long a follower keeps retrying failed reads of the event log before
// it gives up with the read's error (see WithFollowOutage).
const DefaultFollowOutage = 30 * time.Second

// Retries of a failed read while following wait followRetryFirst, doubling up to followRetryMax.
const (
	followRetryFirst = 50 * time.Millisecond
	followRetryMax   = 2 * time.Second
)

// WithFollowOutage sets how long Follow (a blocking send's wait, a stream, a subscription) keeps
// retrying failed reads of the event log before it returns the read's error (default
// DefaultFollowOutage). A store restart or failover costs each follower a failed read or a few
// (a pooled connection that was cut); a shorter outage than this is invisible to the follower
// but for the delay. The caller's context bounds the retries too: a blocking send stops at its
// blocking timeout.
func WithFollowOutage(d time.Duration) Option { return func(p *Plane) { p.followOutage = d } }

// ErrStopFollowing, returned by a Follow callback, ends Follow with a nil error.
var ErrStopFollowing = errors.New("stop following")

// Follow calls fn for every event of the task with Seq > after, in order, each exactly once,
// waiting for new events until fn returns ErrStopFollowing (Follow returns nil), fn returns another
// error (returned), or ctx ends (ctx.Err()). A failed read of the log is retried, with a backoff,
// for up to the plane's follow outage (WithFollowOutage); a read failing for longer ends Follow
// with its error. Events committed by other processes arrive when the
// store has the Listen capability and RunListener is running.
func (p *Plane) Follow(ctx context.Context, principal, taskID string, after int64, fn func(TaskEvent) error) error {
	// Ownership and the context id are checked once; the log read is itself scoped to the
	// principal, so a wake-up costs one indexed read of the new events and no task decode.
	t, err := p.FollowedTask(ctx, principal, taskID)
	if err != nil {
		return err
	}
	return p.follow(ctx, t, after, false, fn)
}

// FollowTask is Follow of t, a task its owner has from the plane (Accept, GetTask, Apply...): it
// follows t's log after after without reading t again.
func (p *Plane) FollowTask(ctx context.Context, t *Task, after int64, fn func(TaskEvent) error) error {
	return p.follow(ctx, t, after, false, fn)
}

// FollowStream is Follow for a client's stream (an A2A SendStreamingMessage or SubscribeToTask):
// Subscribers counts it while it follows.
func (p *Plane) FollowStream(ctx context.Context, principal, taskID string, after int64, fn func(TaskEvent) error) error {
	t, err := p.FollowedTask(ctx, principal, taskID)
	if err != nil {
		return err
	}
	return p.follow(ctx, t, after, true, fn)
}

func (p *Plane) follow(ctx context.Context, t *Task, after int64, stream bool, fn func(TaskEvent) error) error {
	principal, taskID := t.Origin.Principal, t.ID
	// Subscribe before the first read, so a commit between the read and the wait still pokes us.
	subscribe := p.broker.subscribe
	if stream {
		subscribe = p.broker.subscribeStream
	}
	poke, cancel := subscribe(principal, taskID)
	defer cancel()
	recheck, stop := p.recheck()
	defer stop()
	for {
		var rows []store.TaskEvent
		err := p.retryRead(ctx, func() (err error) {
			rows, err = p.store.TaskEvents(ctx, principal, taskID, after, followPage)
			return err
		})
		if err != nil {
			switch {
			case isNotFound(err):
				return ErrTaskNotFound // pruned while followed
			case ctx.Err() != nil:
				return ctx.Err()
			}
			return fmt.Errorf("read events of task %s: %w", taskID, err)
		}
		for _, r := range rows {
			ev, err := decodeEvent(r, t.ContextID)
			if err != nil {
				return err
			}
			after = ev.Seq
			if err := fn(ev); err != nil {
				if errors.Is(err, ErrStopFollowing) {
					return nil
				}
				return err
			}
		}
		if len(rows) == followPage {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.store.Done():
			// Nothing more can be committed: a follower the store's owner did not stop first
			// (a stream, a blocking send) ends instead of waiting for ever.
			return fmt.Errorf("follow task %s: %w", taskID, store.ErrClosed)
		case <-poke:
		case <-recheck:
		}
	}
}

// WaitTask waits until t, a task its owner has from the plane (Accept, GetTask, Apply...), has a
// committed version for which done returns true, and returns that version; t itself, if done(t).
// A version a turn of this process committed is handed over as committed, without reading the
// store; any other change is read (as FollowedTask reads, a failed read retried). Of many versions
// committed between two of its wake-ups, one whose state the next repeats may be passed over (see
// maxWaiterRows): done is meant to look at the state. It returns ctx.Err() when ctx ends first,
// and ErrTaskNotFound if the task is pruned meanwhile.
func (p *Plane) WaitTask(ctx context.Context, t *Task, done func(*Task) bool) (*Task, error) {
	if done(t) {
		return t, nil
	}
	principal, taskID := t.Origin.Principal, t.ID
	w, cancel := p.broker.wait(principal, taskID)
	defer cancel()
	recheck, stop := p.recheck()
	defer stop()
	cur, read := t, true // a commit between t's and the subscription would not have poked w
	for {
		if read {
			nt, err := p.FollowedTask(ctx, principal, taskID)
			if err != nil {
				return nil, err
			}
			cur, read = nt, false
		}
		if done(cur) {
			return cur, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.store.Done():
			return nil, fmt.Errorf("wait for task %s: %w", taskID, store.ErrClosed)
		case <-recheck:
			read = true
		case <-w.ch:
			// Every version handed over is looked at, so a settled one that a later commit has
			// already moved on from is still the one returned.
			rows, mustRead := p.broker.take(w)
			read = mustRead
			slices.SortFunc(rows, func(a, b store.Task) int { return cmp.Compare(a.LastSeq, b.LastSeq) })
			for _, row := range rows {
				if row.LastSeq <= cur.LastSeq {
					continue // older than what the wait has (published out of order)
				}
				nt, err := decodeTask(row)
				if err != nil {
					read = true // the store's copy is the authority
					break
				}
				if cur = nt; done(cur) {
					return cur, nil
				}
			}
		}
	}
}

// recheck returns the channel that tells a follower to read again though nothing poked it, and
// the function that stops it. Another process's notification is a hint that can be lost (a crash
// between its commit and its NOTIFY), so on a shared store it ticks every followRecheck; on a
// store of one process, whose commits all poke, never.
func (p *Plane) recheck() (<-chan time.Time, func()) {
	if !p.store.Capabilities().MultiProcess {
		return nil, func() {}
	}
	t := time.NewTicker(followRecheck)
	return t.C, t.Stop
}

// FollowedTask is GetTask for a follower (a blocking send's wait, a stream): a failed read is
// retried as Follow retries its reads (retryRead, WithFollowOutage).
func (p *Plane) FollowedTask(ctx context.Context, principal, taskID string) (*Task, error) {
	if !storableKey(principal) || !storableKey(taskID) {
		return nil, ErrTaskNotFound
	}
	var row store.Task
	err := p.retryRead(ctx, func() (err error) {
		row, err = p.store.GetTask(ctx, principal, taskID)
		return err
	})
	if err != nil {
		switch {
		case isNotFound(err):
			return nil, ErrTaskNotFound
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("get task %s: %w", taskID, err)
	}
	return decodeTask(row)
}

// retryRead calls read until it succeeds, finds nothing (store.ErrNotFound), or ctx ends, or
// until it has failed for p.followOutage or the store is closed; it returns read's last error. A store restart or
// failover fails a read or a few (a pooled connection that was cut): a follower carries on
// through that, and gives up only when the store stays unreadable.
func (p *Plane) retryRead(ctx context.Context, read func() error) error {
	var failing time.Time // when the reads began to fail
	retry := followRetryFirst
	for {
		err := read()
		if err == nil || isNotFound(err) || ctx.Err() != nil {
			return err
		}
		if failing.IsZero() {
			failing = time.Now()
		} else if time.Since(failing) >= p.followOutage {
			return fmt.Errorf("failing for %s: %w", time.Since(failing).Round(time.Millisecond), err)
		}
		wait := time.NewTimer(min(retry, max(p.followOutage-time.Since(failing), 0)))
		select {
		case <-ctx.Done():
			wait.Stop()
			return ctx.Err()
		case <-p.store.Done():
			wait.Stop()
			return fmt.Errorf("%w: %w", store.ErrClosed, err) // no retry can succeed
		case <-wait.C:
		}
		retry = min(2*retry, followRetryMax)
	}
}

// RunListener relays task-event notifications from other processes to this process's
// subscribers until ctx ends or the store closes; when its connection was lost and is back, it
// pokes every subscriber, since notifications sent meanwhile are lost. A failure of the
// listener is logged (then now and then while it keeps failing: internal/outage) and it listens
// again a second later, doubling the wait up to 30 s while it keeps failing. On a store without the Listen
// capability it returns nil at once (a single-process store has no other writers).
func (p *Plane) RunListener(ctx context.Context) error {
	if !p.store.Capabilities().Listen {
		return nil
	}
	failures := outage.Tracker{Name: "task event listener", Log: p.log,
		FirstWait: listenRestart, MaxWait: listenRestartMax}
	for {
		began := time.Now()
		err := p.store.Listen(ctx, p.broker.publish, p.broker.publishAll)
		switch {
		case err == nil, errors.Is(err, store.ErrNotSupported), ctx.Err() != nil:
			return nil
		case errors.Is(err, store.ErrClosed):
			return err
		}
		if time.Since(began) > listenRestartMax {
			failures.Succeeded() // it listened a while: a new failure, not the same one
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.store.Done():
			return store.ErrClosed
		case <-time.After(failures.FailedSince(began, err)):
		}
		p.broker.publishAll() // whatever was notified meanwhile is lost: re-read
	}
}

// listenRestart is how long RunListener waits before listening again after a failure; it
// doubles while the listener keeps failing, up to listenRestartMax.
var listenRestart = time.Second

const listenRestartMax = 30 * time.Second

func encodeToken(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("taskplane: encode token: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeToken(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
