package taskplane

import (
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// ParkClaimer parks an idle claimer as a waiting Dispatcher claimer does. handed reports, without
// waiting, whether an acceptance took it and what it handed over (a grant, or nil).
func (p *Plane) ParkClaimer(owner string, lease time.Duration) (handed func() (g *Grant, taken bool)) {
	c := &idleClaimer{owner: owner, lease: lease, grant: make(chan *Grant, 1)}
	p.parkClaimer(c)
	return func() (*Grant, bool) {
		select {
		case g := <-c.grant:
			return g, true
		default:
			return nil, false
		}
	}
}

// WakeHints makes the plane keep hints, as a running Dispatcher does.
func (p *Plane) WakeHints() <-chan struct{} { return p.wakeHints() }

// TerminalStates are the task states retention may prune, as the store names them.
func TerminalStates() []string { return terminalStates() }

// Subscribe subscribes to the task's notifications as Follow does: the channel is poked after a
// commit of the task in this process, or in another through RunListener.
func (p *Plane) Subscribe(principal, taskID string) (<-chan struct{}, func()) {
	return p.broker.subscribe(principal, taskID)
}

// Watch is a running turn's watch of its task (the broker's watch), for tests.
func (p *Plane) Watch(principal, taskID string) (<-chan struct{}, func()) {
	return p.broker.watch(principal, taskID)
}

// ListenRestartAfter makes RunListener listen again d after a failure, for the rest of t.
func ListenRestartAfter(t interface{ Cleanup(func()) }, d time.Duration) {
	old := listenRestart
	listenRestart = d
	t.Cleanup(func() { listenRestart = old })
}

// Waiting reports whether a WaitTask waits for (principal, taskID).
func (p *Plane) Waiting(principal, taskID string) bool {
	p.broker.mu.Lock()
	defer p.broker.mu.Unlock()
	return len(p.broker.waiters[brokerKey(principal, taskID)]) > 0
}

// HandRows hands the waiters of each task's (principal, id) its committed row, all at once, as
// turns committing in quick succession would before a waiter wakes.
func (p *Plane) HandRows(ts ...*Task) error {
	rows := make([]store.Task, len(ts))
	for i, t := range ts {
		var err error
		if rows[i], err = encodeTask(t); err != nil {
			return err
		}
	}
	p.broker.mu.Lock()
	defer p.broker.mu.Unlock()
	for i, t := range ts {
		p.broker.pokeWaiters(brokerKey(t.Origin.Principal, t.ID), &rows[i])
	}
	return nil
}

// InlineOnOffer reports whether a running Dispatcher offers an inline first turn.
func (p *Plane) InlineOnOffer() bool {
	p.queue.mu.Lock()
	defer p.queue.mu.Unlock()
	return len(p.queue.inline) > 0
}
