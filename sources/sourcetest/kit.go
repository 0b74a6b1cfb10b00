// Package sourcetest is the kit every source's tests run. A source's test implements Driver — a
// small adapter over a fake of its provider that can inject an event and report how the source
// answered — and calls Run, which proves, on every store driver, that the source:
//
//   - declares what its conformance-matrix row says (and the row names the calling test);
//   - acknowledges an event only after its acceptance committed;
//   - leaves an event unacknowledged when acceptance fails, and accepts the redelivery;
//   - returns the prior Task for a redelivered event, also after a restart;
//   - holds its checkpoint on failure and never moves it backwards (or keeps none, as declared);
//   - keeps a checkpoint per instance: two instances of the source for one principal (two
//     mailboxes) each resume from their own position (the driver of a source that declares a
//     checkpoint implements Instances for this);
//   - records a malformed envelope before settling it;
//   - counts non-work and makes no Task of it;
//   - continues the waiting Task on a reply to its anchor, and makes a new Task in the same
//     context for anything else (or refuses anchors, as declared);
//   - never lets a taskId in a provider body select a Task.
//
// The kit owns the store: a real one (storetest), wrapped so the kit can make Update fail or
// wait. The driver owns the provider fake only.
package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	matrix "github.com/channels-dev/channels/conformance-matrix"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// Ack is how the source answered the provider for one injected event.
type Ack int

// Answers.
const (
	// Unacked: the provider will deliver the event again (an HTTP 5xx, no ack, a held checkpoint).
	Unacked Ack = iota
	// Acked: the event is settled (an HTTP 2xx, an ack, an advanced checkpoint).
	Acked
	// Refused: the event is settled with a permanent refusal the provider does not retry (an
	// HTTP 4xx).
	Refused
)

func (a Ack) String() string {
	switch a {
	case Acked:
		return "acked"
	case Refused:
		return "refused"
	}
	return "unacked"
}

// Kind is what an injected event is.
type Kind int

// Kinds of injected events.
const (
	// Work is an event that carries work.
	Work Kind = iota
	// NonWork is an authentic event the source must classify as non-work (our own bot's message,
	// a ping).
	NonWork
	// Malformed is an authentic envelope (correctly signed, from the provider) whose body cannot
	// be read as an event.
	Malformed
)

// Input describes one provider event; the driver turns it into what its provider sends.
type Input struct {
	Kind Kind
	// ID is the provider's event id. The same ID again is a redelivery of the same event.
	ID string
	// Conversation is the provider's conversation (channel + thread, issue, mail thread).
	Conversation string
	// Text is the event's text.
	Text string
	// ReplyTo is the provider id of a message this event directly replies to: a
	// sources.Receipt.ProviderID the source's Sender returned, or an id the source never sent.
	// Drivers of providers without a reply relation ignore it.
	ReplyTo string
	// BodyTaskID, when set, is put in the provider body as a "taskId" field, as a hostile or
	// confused sender might.
	BodyTaskID string
	// Seq is the provider position of the event, for sources that declare a checkpoint.
	Seq int64
}

// Driver adapts a source's provider fake to the kit.
type Driver interface {
	// Principal is the principal the source instances accept for.
	Principal() string
	// New returns a fresh instance of the source configured against the provider fake. The kit
	// runs it with sources.Run, and calls New again to restart the source. If the instance
	// implements sources.HealthChecker, the kit waits for it to report healthy before injecting.
	New(t *testing.T) sources.Source
	// Inject makes the provider deliver in to the running instance and returns how the source
	// answered. It waits for the answer (for a push source, the response; for a pull source, the
	// ack or a settled timeout).
	Inject(t *testing.T, in Input) Ack
}

// Instances is implemented by the driver of a source that declares a checkpoint, so the kit can
// run two instances of the source side by side, as a server with two mailboxes of one principal
// does, and prove that each keeps its own position.
type Instances interface {
	// NewInstance returns a fresh instance of the source configured under the instance name
	// (sources.Config.Instance), reading a provider stream of its own (another mailbox): events
	// injected with InjectInto for that name reach only it.
	NewInstance(t *testing.T, instance string) sources.Source
	// InjectInto is Inject for the provider stream of the named instance.
	InjectInto(t *testing.T, instance string, in Input) Ack
}

// Run runs the whole kit against the source of d, with the declaration of its row in the
// embedded conformance matrix. Call it from one top-level test; the row's tests list must name
// that test.
func Run(t *testing.T, d Driver) {
	t.Helper()
	name := d.New(t).Name()
	row, err := sources.Declaration(name)
	if err != nil {
		t.Fatalf("declaration: %v", err)
	}
	RunWithDeclaration(t, d, row)
}

// RunWithDeclaration is Run with a given declaration (a source kept outside this module, with its
// own matrix row, or the kit's own tests).
func RunWithDeclaration(t *testing.T, d Driver, row matrix.Row) {
	t.Helper()
	caller := strings.SplitN(t.Name(), "/", 2)[0]
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		k := &kit{d: d, row: row, open: open, caller: caller}
		for _, tc := range []struct {
			name string
			fn   func(*testing.T, *env)
		}{
			{"DeclarationMatchesTheMatrix", k.declaration},
			{"AckOnlyAfterAcceptance", k.ackAfterAcceptance},
			{"FailedAcceptanceLeavesTheEventUnacked", k.failedAcceptance},
			{"RedeliveryReturnsThePriorTask", k.redelivery},
			{"CheckpointHoldsOnFailureAndNeverRegresses", k.checkpoint},
			{"EachInstanceKeepsItsOwnCheckpoint", k.checkpointPerInstance},
			{"MalformedEnvelopeIsRecordedThenSettled", k.malformed},
			{"NonWorkIsCountedNotTasked", k.nonWork},
			{"ReplyToAnchorContinuesAnythingElseIsNewWork", k.continuation},
			{"TaskIDInProviderBodyNeverSelectsATask", k.bodyTaskID},
		} {
			t.Run(tc.name, func(t *testing.T) { tc.fn(t, k.start(t)) })
		}
	})
}

type kit struct {
	d      Driver
	row    matrix.Row
	open   func(t *testing.T) store.Store
	caller string
}

// gatedStore is the real store with one method overridden: Update can be made to fail, or to
// wait until the kit opens a gate.
type gatedStore struct {
	store.Store

	mu      sync.Mutex
	fail    error
	gate    chan struct{}
	entered chan struct{}
}

func (g *gatedStore) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	g.mu.Lock()
	fail, gate, entered := g.fail, g.gate, g.entered
	g.mu.Unlock()
	if fail != nil {
		return fail
	}
	if gate != nil {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Store.Update(ctx, fn)
}

// errStoreDown is what the failed store answers.
var errStoreDown = errors.New("sourcetest: the store is down")

func (g *gatedStore) setFail(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fail = nil
	if on {
		g.fail = errStoreDown
	}
}

// hold makes Update wait until the returned release is called; entered receives when an Update
// is waiting.
func (g *gatedStore) hold() (entered <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gate, ent := make(chan struct{}), make(chan struct{}, 1)
	g.gate, g.entered = gate, ent
	return ent, func() {
		g.mu.Lock()
		g.gate, g.entered = nil, nil
		g.mu.Unlock()
		close(gate)
	}
}

// observed is one Sink.Accept call.
type observed struct {
	ev  sources.Event
	acc taskplane.Acceptance
	err error
}

// env is one subtest's world: a fresh store, plane and sink, and a running source instance.
type env struct {
	k     *kit
	t     *testing.T
	store *gatedStore
	plane *taskplane.Plane
	sink  *sources.Sink
	src   sources.Source

	mu      sync.Mutex
	seen    []observed
	cancel  context.CancelFunc
	stopped chan error
}

func (k *kit) start(t *testing.T) *env {
	e := &env{k: k, t: t, store: &gatedStore{Store: k.open(t)}}
	e.plane = taskplane.New(e.store)
	// Fixed to the driver's principal, as the server fixes each instance's Sink: a source that
	// took its principal from the provider's payload fails here, not in production.
	sink, err := sources.NewSink(e.plane, k.row.Source, sources.WithDeclaration(k.row), sources.ForPrincipal(k.d.Principal()),
		sources.WithObserver(func(ev sources.Event, acc taskplane.Acceptance, err error) {
			e.mu.Lock()
			e.seen = append(e.seen, observed{ev, acc, err})
			e.mu.Unlock()
		}))
	if err != nil {
		t.Fatalf("sink: %v", err)
	}
	e.sink = sink
	e.run()
	t.Cleanup(e.stop)
	return e
}

func (e *env) run() {
	e.t.Helper()
	e.src = e.k.d.New(e.t)
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.stopped = cancel, make(chan error, 1)
	src, stopped := e.src, e.stopped
	go func() { stopped <- sources.Run(ctx, src, e.sink) }()
	if h, ok := e.src.(sources.HealthChecker); ok {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := h.Health(ctx)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("source never reported healthy: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	e.cancel = nil
	select {
	case err := <-e.stopped:
		if err != nil {
			e.t.Errorf("source Run returned %v after its context ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		e.t.Errorf("source Run did not return within 10s of its context ending")
	}
}

func (e *env) restart() { e.stop(); e.run() }

// inject injects in, checks the answer is want, and returns the acceptance the source made of it
// (zero when it made none).
func (e *env) inject(in Input, want Ack) (taskplane.Acceptance, bool) {
	e.t.Helper()
	return e.injectWith(func() Ack { return e.k.d.Inject(e.t, in) }, in, want)
}

// injectWith is inject through send, which makes the provider deliver in.
func (e *env) injectWith(send func() Ack, in Input, want Ack) (taskplane.Acceptance, bool) {
	e.t.Helper()
	e.mu.Lock()
	before := len(e.seen)
	e.mu.Unlock()
	got := send()
	if got != want {
		e.t.Fatalf("inject %+v: source answered %s, want %s", in, got, want)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.seen) - 1; i >= before; i-- {
		if got == Acked && in.Kind == Work && e.seen[i].err != nil {
			e.t.Fatalf("inject %s: acknowledged although Accept failed: %v", in.ID, e.seen[i].err)
		}
		if e.seen[i].err == nil {
			return e.seen[i].acc, true
		}
	}
	return taskplane.Acceptance{}, false
}

// instanceOfLastAcceptance returns the instance named by the position on the event the source
// last accepted, or fails: a source that declares a checkpoint puts the position of the instance
// that read the event on every event it accepts.
func (e *env) instanceOfLastAcceptance() string {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.seen) - 1; i >= 0; i-- {
		o := e.seen[i]
		if o.err != nil {
			continue
		}
		switch {
		case o.ev.Checkpoint == nil:
			e.t.Fatalf("the row declares a checkpoint, but the source accepted %s without a position", o.ev.Identity)
		case o.ev.Checkpoint.Instance == "":
			e.t.Fatalf("the source accepted %s with a position that names no instance", o.ev.Identity)
		}
		return o.ev.Checkpoint.Instance
	}
	e.t.Fatal("the source accepted nothing")
	return ""
}

// work injects a work event that must be acked and accepted, and returns its acceptance.
func (e *env) work(in Input) taskplane.Acceptance {
	e.t.Helper()
	in.Kind = Work
	acc, ok := e.inject(in, Acked)
	if !ok {
		e.t.Fatalf("inject %s: acked, but the source accepted nothing", in.ID)
	}
	if acc.Task == nil {
		e.t.Fatalf("inject %s: acceptance has no task: %+v", in.ID, acc)
	}
	return acc
}

func (e *env) principal() string { return e.k.d.Principal() }

func (e *env) tasks() int {
	e.t.Helper()
	page, err := e.plane.ListTasks(context.Background(), e.principal(), taskplane.ListQuery{PageSize: 100})
	if err != nil {
		e.t.Fatal(err)
	}
	return page.TotalSize
}

func (e *env) evidence(kind string) []store.Evidence {
	e.t.Helper()
	ev, err := e.store.ListEvidence(context.Background(), store.EvidenceFilter{Principal: e.principal(), Source: e.k.row.Source, Kind: kind})
	if err != nil {
		e.t.Fatal(err)
	}
	return ev
}

func (e *env) task(id string) *taskplane.Task {
	e.t.Helper()
	task, err := e.plane.GetTask(context.Background(), e.principal(), id)
	if err != nil {
		e.t.Fatalf("get task %s: %v", id, err)
	}
	return task
}

// ask moves a task to INPUT_REQUIRED with a question, as an executor does.
func (e *env) ask(id string) (*taskplane.Task, *taskplane.Message) {
	e.t.Helper()
	q := &taskplane.Message{ID: "question-" + id, Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("which one?")}}
	task, err := e.plane.Apply(context.Background(), e.principal(), id, taskplane.AnyVersion,
		taskplane.SetStatus{State: taskplane.StateInputRequired, Message: q})
	if err != nil {
		e.t.Fatalf("ask: %v", err)
	}
	return task, q
}

func fmtList(items []string) string { return fmt.Sprintf("%q", items) }
