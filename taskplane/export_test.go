package taskplane

import "time"

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
