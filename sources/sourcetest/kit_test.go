package sourcetest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/checkpoint"
	matrix "github.com/channels-dev/channels/conformance-matrix"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/sources/sourcetest"
	"github.com/channels-dev/channels/taskplane"
)

// The kit's own tests run it against two small in-memory sources that cover the branches the
// webhook does not: a pull source with a checkpoint and a lookup reconciler, and a source with no
// continuation and no response.

type delivery struct {
	in     sourcetest.Input
	answer chan sourcetest.Ack
}

// core is a provider queue: the driver pushes deliveries, the source answers each after handling.
type core struct {
	name     string
	instance string
	inbox    chan delivery
	careless bool // copies the body's taskId into the message, as a careless source might
}

func (c *core) Name() string { return c.name }

func (c *core) Run(ctx context.Context, sink *sources.Sink) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case d := <-c.inbox:
			d.answer <- c.handle(ctx, sink, d.in)
		}
	}
}

func (c *core) handle(ctx context.Context, sink *sources.Sink, in sourcetest.Input) sourcetest.Ack {
	var pos *checkpoint.Position
	if in.Seq > 0 && sink.Declaration().Checkpoint.Declared() {
		pos = &checkpoint.Position{Instance: c.instance, Bytes: []byte(fmt.Sprint("uid:", in.Seq)), Seq: in.Seq}
	}
	settle := func(err error) sourcetest.Ack {
		switch {
		case err == nil:
			return sourcetest.Acked
		case sources.Permanent(err):
			return sourcetest.Refused
		}
		return sourcetest.Unacked
	}
	switch in.Kind {
	case sourcetest.Malformed:
		return settle(sink.Malformed(ctx, "alice", "garbled", pos, nil))
	case sourcetest.NonWork:
		return settle(sink.NonWork(ctx, "alice", "own-bot", pos))
	}
	msg := taskplane.Message{ID: in.ID, Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart(in.Text)}}
	if c.careless && in.BodyTaskID != "" {
		msg.TaskID, msg.ContextID, msg.ReferenceTaskIDs = in.BodyTaskID, "ctx-from-body", []string{in.BodyTaskID}
	}
	_, err := sink.Accept(ctx, sources.Event{Principal: "alice", Identity: in.ID, ConversationKey: in.Conversation,
		ReplyTo: in.ReplyTo, Message: msg, Checkpoint: pos})
	return settle(err)
}

// queueSource declares a checkpoint, reply anchors and lookup recovery.
type queueSource struct {
	*core
	sent *atomic.Int64
}

func (q queueSource) DescribePosition(p checkpoint.Position) string { return string(p.Bytes) }

func (q queueSource) Send(context.Context, sources.Delivery) (sources.Receipt, error) {
	return sources.Receipt{ProviderID: fmt.Sprint("msg-", q.sent.Add(1))}, nil
}

func (q queueSource) Lookup(context.Context, sources.Delivery) (sources.Receipt, bool, error) {
	return sources.Receipt{}, false, nil
}

// plainSource has no optional capability at all.
type plainSource struct{ *core }

// driver keeps a provider queue per instance name; New and Inject use the instance "main".
type driver struct {
	mu      sync.Mutex
	inboxes map[string]chan delivery
	new     func(c *core) sources.Source
}

func newDriver(new func(c *core) sources.Source) *driver {
	return &driver{inboxes: map[string]chan delivery{}, new: new}
}

func (d *driver) inbox(instance string) chan delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inboxes[instance] == nil {
		d.inboxes[instance] = make(chan delivery)
	}
	return d.inboxes[instance]
}

func (d *driver) Principal() string { return "alice" }

func (d *driver) New(t *testing.T) sources.Source { return d.NewInstance(t, "main") }

func (d *driver) NewInstance(t *testing.T, instance string) sources.Source {
	return d.new(&core{instance: instance, inbox: d.inbox(instance), careless: true})
}

func (d *driver) Inject(t *testing.T, in sourcetest.Input) sourcetest.Ack {
	return d.InjectInto(t, "main", in)
}

func (d *driver) InjectInto(t *testing.T, instance string, in sourcetest.Input) sourcetest.Ack {
	dl := delivery{in: in, answer: make(chan sourcetest.Ack, 1)}
	select {
	case d.inbox(instance) <- dl:
	case <-time.After(10 * time.Second):
		t.Errorf("instance %s of the source did not take %s within 10s", instance, in.ID)
		return sourcetest.Unacked
	}
	return <-dl.answer
}

func row(t *testing.T, yaml string) matrix.Row {
	t.Helper()
	m, err := matrix.Parse([]byte("version: 1\nsources:\n" + yaml))
	if err != nil {
		t.Fatal(err)
	}
	return m.Sources[0]
}

const common = `
    summary: kit self-test
    capability: {work_producing: [message], non_work: [own-bot], follow_on: [reply], audit_pending: []}
    event_identity: [id]
    native_object_identity: [id]
    conversation_key: [thread]
    ack: {operation: ack, point: after the Accept transaction commits}
    receipt: msg id
    terminal_outcomes: {completed: a, failed: b, canceled: c, rejected: d}
`

func TestKitPassesACheckpointingSource(t *testing.T) {
	var sent atomic.Int64
	d := newDriver(func(c *core) sources.Source {
		c.name = "queue"
		return queueSource{core: c, sent: &sent}
	})
	sourcetest.RunWithDeclaration(t, d, row(t, `  - source: queue
    status: built`+common+`
    checkpoint: {position: uid, commit_point: inside the Accept transaction}
    continuation: {method: reply-anchor, relation: in-reply-to}
    response: {operation: post}
    delivery_recovery: lookup
    tests: [sources/sourcetest.TestKitPassesACheckpointingSource]
`))
}

func TestKitPassesASourceWithoutContinuation(t *testing.T) {
	d := newDriver(func(c *core) sources.Source {
		c.name = "plain"
		return plainSource{c}
	})
	sourcetest.RunWithDeclaration(t, d, row(t, `  - source: plain
    status: built`+strings.Replace(common, "follow_on: [reply]", "follow_on: []", 1)+`
    checkpoint: {position: none, commit_point: none}
    continuation: {method: none, relation: none}
    response: {operation: none}
    delivery_recovery: idempotent
    tests: [sources/sourcetest.TestKitPassesASourceWithoutContinuation]
`))
}
