package taskplane

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// broker wakes in-process subscribers of a task after a commit. It carries no data: a woken
// subscriber reads the durable event log after the last sequence it has, so a lost or duplicated
// poke never loses or repeats an event.
type broker struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
	// watches counts the subscriptions of running turns (watch), which are not streams.
	watches int
}

func newBroker() *broker { return &broker{subs: map[string]map[chan struct{}]struct{}{}} }

func brokerKey(principal, taskID string) string { return principal + "\x00" + taskID }

func (b *broker) subscribe(principal, taskID string) (<-chan struct{}, func()) {
	return b.add(principal, taskID, 0)
}

// add subscribes to (principal, taskID), adding watch to b.watches for as long (in the same
// critical sections, so Subscribers never sees one without the other).
func (b *broker) add(principal, taskID string, watch int) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	k := brokerKey(principal, taskID)
	b.mu.Lock()
	if b.subs[k] == nil {
		b.subs[k] = map[chan struct{}]struct{}{}
	}
	b.subs[k][ch] = struct{}{}
	b.watches += watch
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		if _, ok := b.subs[k][ch]; ok {
			delete(b.subs[k], ch)
			b.watches -= watch
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
	return b.add(principal, taskID, 1)
}

// publishAll pokes every subscriber: notifications may have been lost (the listener reconnected).
func (b *broker) publishAll() {
	b.mu.Lock()
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

func (b *broker) publish(principal, taskID string) {
	k := brokerKey(principal, taskID)
	b.mu.Lock()
	for ch := range b.subs[k] {
		select {
		case ch <- struct{}{}:
		default: // already poked; the subscriber will read everything new
		}
	}
	b.mu.Unlock()
}

// Subscribers reports how many in-process subscriptions of streams and followers are open (for
// metrics); running turns watching their tasks are not counted.
func (p *Plane) Subscribers() int {
	p.broker.mu.Lock()
	defer p.broker.mu.Unlock()
	n := 0
	for _, s := range p.broker.subs {
		n += len(s)
	}
	return n - p.broker.watches
}

// followRecheck is how often Follow re-reads the event log of a shared store without a poke.
const followRecheck = 2 * time.Second

// followPage bounds one read of the log while following.
const followPage = 256

// ErrStopFollowing, returned by a Follow callback, ends Follow with a nil error.
var ErrStopFollowing = errors.New("stop following")

// Follow calls fn for every event of the task with Seq > after, in order, each exactly once,
// waiting for new events until fn returns ErrStopFollowing (Follow returns nil), fn returns another
// error (returned), or ctx ends (ctx.Err()). Events committed by other processes arrive when the
// store has the Listen capability and RunListener is running.
func (p *Plane) Follow(ctx context.Context, principal, taskID string, after int64, fn func(TaskEvent) error) error {
	// Ownership and the context id are checked once; the log read is itself scoped to the
	// principal, so a wake-up costs one indexed read of the new events and no task decode.
	t, err := getTask(ctx, p.store, principal, taskID)
	if err != nil {
		return err
	}
	return p.follow(ctx, t, after, fn)
}

// FollowTask is Follow of t, a task its owner has from the plane (Accept, GetTask, Apply...): it
// follows t's log after after without reading t again.
func (p *Plane) FollowTask(ctx context.Context, t *Task, after int64, fn func(TaskEvent) error) error {
	return p.follow(ctx, t, after, fn)
}

func (p *Plane) follow(ctx context.Context, t *Task, after int64, fn func(TaskEvent) error) error {
	principal, taskID := t.Origin.Principal, t.ID
	// Subscribe before the first read, so a commit between the read and the wait still pokes us.
	poke, cancel := p.broker.subscribe(principal, taskID)
	defer cancel()
	// Another process's notification is a hint that can be lost (a crash between its commit and
	// its NOTIFY): on a shared store, also re-read the log now and then.
	var recheck <-chan time.Time
	if p.store.Capabilities().MultiProcess {
		t := time.NewTicker(followRecheck)
		defer t.Stop()
		recheck = t.C
	}
	for {
		rows, err := p.store.TaskEvents(ctx, principal, taskID, after, followPage)
		if err != nil {
			if isNotFound(err) {
				return ErrTaskNotFound // pruned while followed
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
		case <-poke:
		case <-recheck:
		}
	}
}

// RunListener relays task-event notifications from other processes to this process's
// subscribers until ctx ends; when its connection was lost and is back, it pokes every
// subscriber, since notifications sent meanwhile are lost. On a store without the Listen
// capability it returns nil at once (a single-process store has no other writers).
func (p *Plane) RunListener(ctx context.Context) error {
	if !p.store.Capabilities().Listen {
		return nil
	}
	err := p.store.Listen(ctx, p.broker.publish, p.broker.publishAll)
	if errors.Is(err, store.ErrNotSupported) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

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
