package sourcetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	matrix "github.com/channels-dev/channels/conformance-matrix"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// declaration: the source is the row's, implements what the row implies, and the row names the
// test that runs the kit.
func (k *kit) declaration(t *testing.T, e *env) {
	row := k.row
	if e.src.Name() != row.Source {
		t.Fatalf("source Name() = %q, want the row's %q", e.src.Name(), row.Source)
	}
	if row.Status != matrix.Built {
		t.Errorf("row %s has status %q; a source that passes the kit is %q", row.Source, row.Status, matrix.Built)
	}
	_, isCheckpointer := e.src.(sources.Checkpointer)
	if row.Checkpoint.Declared() != isCheckpointer {
		t.Errorf("row declares checkpoint %q but the source implements sources.Checkpointer = %v", row.Checkpoint.Position, isCheckpointer)
	}
	_, isSender := e.src.(sources.Sender)
	if (row.Response.Operation != matrix.None) != isSender {
		t.Errorf("row declares response %q but the source implements sources.Sender = %v", row.Response.Operation, isSender)
	}
	if row.Continuation.Method == matrix.ReplyAnchor && !isSender {
		t.Errorf("row declares reply-anchor continuation, but anchors are responses the source sent and it has no Sender")
	}
	if _, isReconciler := e.src.(sources.Reconciler); (row.DeliveryRecovery == matrix.Lookup) != isReconciler {
		t.Errorf("row declares delivery recovery %q but the source implements sources.Reconciler = %v", row.DeliveryRecovery, isReconciler)
	}
	named := false
	for _, entry := range row.Tests.Items {
		if _, name, err := matrix.SplitTest(entry); err == nil && name == k.caller {
			named = true
		}
	}
	if !named {
		t.Errorf("row %s tests %s do not name %s, the test that runs the kit", row.Source, fmtList(row.Tests.Items), k.caller)
	}
	if got := e.sink.Declaration(); got.Source != row.Source {
		t.Errorf("sink declaration is %q", got.Source)
	}
}

// ackAfterAcceptance: while the store holds the acceptance, the provider sees no ack.
func (k *kit) ackAfterAcceptance(t *testing.T, e *env) {
	entered, release := e.store.hold()
	answered := make(chan Ack, 1)
	go func() { answered <- k.d.Inject(t, Input{Kind: Work, ID: "ev-held", Conversation: "c1", Text: "hello"}) }()
	select {
	case <-entered:
	case a := <-answered:
		release()
		t.Fatalf("the source answered %s without calling the store", a)
	case <-time.After(10 * time.Second):
		release()
		t.Fatal("the source did not try to accept the event within 10s")
	}
	// The acceptance cannot commit until release; any answer now came before it.
	select {
	case a := <-answered:
		release()
		t.Fatalf("the source answered %s while its acceptance was not yet committed", a)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	if a := <-answered; a != Acked {
		t.Fatalf("after the acceptance committed the source answered %s, want acked", a)
	}
	if n := e.tasks(); n != 1 {
		t.Fatalf("tasks = %d, want 1", n)
	}
	if n := len(e.evidence(sources.EvidenceAccepted)); n != 1 {
		t.Fatalf("accepted evidence = %d, want 1", n)
	}
}

// failedAcceptance: a store failure leaves the event unacked and accepts nothing; the provider's
// redelivery is accepted once.
func (k *kit) failedAcceptance(t *testing.T, e *env) {
	in := Input{Kind: Work, ID: "ev-1", Conversation: "c1", Text: "hello"}
	e.store.setFail(true)
	e.inject(in, Unacked)
	e.store.setFail(false)
	if n := e.tasks(); n != 0 {
		t.Fatalf("tasks after a failed acceptance = %d, want 0", n)
	}
	if n := len(e.evidence(sources.EvidenceAccepted)); n != 0 {
		t.Fatalf("accepted evidence after a failed acceptance = %d, want 0", n)
	}
	acc := e.work(in)
	if acc.Outcome != taskplane.Created {
		t.Fatalf("redelivery after the failure: outcome %s, want created", acc.Outcome)
	}
	if n := e.tasks(); n != 1 {
		t.Fatalf("tasks = %d, want 1", n)
	}
}

// redelivery: the same event again returns the prior Task as it is now, also after a restart.
func (k *kit) redelivery(t *testing.T, e *env) {
	in := Input{Kind: Work, ID: "ev-1", Conversation: "c1", Text: "hello"}
	first := e.work(in)
	if _, err := e.plane.Apply(context.Background(), e.principal(), first.Task.ID, taskplane.AnyVersion,
		taskplane.SetStatus{State: taskplane.StateWorking}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		acc := e.work(in)
		if acc.Outcome != taskplane.Duplicate || acc.Task.ID != first.Task.ID {
			t.Fatalf("%s: outcome %s task %s, want duplicate of %s", when, acc.Outcome, acc.Task.ID, first.Task.ID)
		}
		if acc.Task.Status.State != taskplane.StateWorking {
			t.Fatalf("%s: the prior task is returned as %s, want it as it is now (working)", when, acc.Task.Status.State)
		}
	}
	check("redelivery")
	e.restart()
	check("redelivery after a restart")
	if n := e.tasks(); n != 1 {
		t.Fatalf("tasks = %d, want 1", n)
	}
	if n := len(e.evidence(sources.EvidenceDuplicate)); n != 2 {
		t.Fatalf("duplicate evidence = %d, want 2", n)
	}
}

// checkpoint: a declared checkpoint moves with acceptance and classification, holds on failure
// and across a restart, and never regresses; an undeclared one is never written.
func (k *kit) checkpoint(t *testing.T, e *env) {
	ctx := context.Background()
	if !k.row.Checkpoint.Declared() {
		e.work(Input{ID: "ev-1", Conversation: "c1", Text: "hello", Seq: 1})
		e.inject(Input{Kind: NonWork, ID: "ev-2", Conversation: "c1", Seq: 2}, Acked)
		cps, err := e.store.ListCheckpoints(ctx, k.row.Source)
		if err != nil {
			t.Fatal(err)
		}
		if len(cps) != 0 {
			t.Fatalf("the row declares no checkpoint, but one was stored: %+v", cps)
		}
		return
	}
	e.work(Input{ID: "ev-1", Conversation: "c1", Text: "one", Seq: 1})
	instance := e.instanceOfLastAcceptance()
	seq := func() int64 {
		t.Helper()
		c, err := e.sink.Checkpoint(ctx, e.principal(), instance)
		if err != nil {
			t.Fatal(err)
		}
		return c.Position.Seq
	}
	if s := seq(); s != 1 {
		t.Fatalf("checkpoint after accepting seq 1 = %d", s)
	}
	e.store.setFail(true)
	e.inject(Input{Kind: Work, ID: "ev-2", Conversation: "c1", Text: "two", Seq: 2}, Unacked)
	e.store.setFail(false)
	if s := seq(); s != 1 {
		t.Fatalf("checkpoint after a failed acceptance of seq 2 = %d, want held at 1", s)
	}
	e.restart()
	e.work(Input{ID: "ev-2", Conversation: "c1", Text: "two", Seq: 2})
	if s := seq(); s != 2 {
		t.Fatalf("checkpoint after accepting seq 2 = %d", s)
	}
	e.work(Input{ID: "ev-1", Conversation: "c1", Text: "one", Seq: 1})
	if s := seq(); s != 2 {
		t.Fatalf("checkpoint after a redelivery of seq 1 = %d, want 2 (never backwards)", s)
	}
	e.inject(Input{Kind: NonWork, ID: "ev-3", Conversation: "c1", Seq: 3}, Acked)
	if s := seq(); s != 3 {
		t.Fatalf("checkpoint after classifying seq 3 as non-work = %d, want 3", s)
	}
}

// checkpointPerInstance: two instances of a source that declares a checkpoint, run side by side
// for one principal against the one Sink (as sources.Host runs them), each keep their own
// position: the one ahead neither swallows the other's advance nor lends it its position, and
// neither moves backwards, also across a restart.
func (k *kit) checkpointPerInstance(t *testing.T, e *env) {
	if !k.row.Checkpoint.Declared() {
		t.Skip("the row declares no checkpoint")
	}
	d, ok := k.d.(Instances)
	if !ok {
		t.Fatalf("the row declares checkpoint %q, but the driver does not implement sourcetest.Instances: the kit cannot prove that two instances keep their own positions", k.row.Checkpoint.Position)
	}
	ctx := context.Background()
	const a, b = "kit-a", "kit-b"
	stops := map[string]func(){}
	start := func(instance string) {
		t.Helper()
		src := d.NewInstance(t, instance)
		rctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- sources.Run(rctx, src, e.sink) }()
		stops[instance] = func() {
			cancel()
			select {
			case err := <-stopped:
				if err != nil {
					t.Errorf("instance %s: Run returned %v after its context ended, want nil", instance, err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("instance %s: Run did not return within 10s of its context ending", instance)
			}
		}
		if h, ok := src.(sources.HealthChecker); ok {
			for deadline := time.Now().Add(10 * time.Second); h.Health(rctx) != nil; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("instance %s never reported healthy", instance)
				}
			}
		}
	}
	t.Cleanup(func() {
		for _, stop := range stops {
			stop()
		}
	})
	start(a)
	start(b)
	into := func(instance string, in Input, want Ack) {
		t.Helper()
		e.injectWith(func() Ack { return d.InjectInto(t, instance, in) }, in, want)
	}
	want := func(when string, positions map[string]int64) {
		t.Helper()
		for instance, seq := range positions {
			c, err := e.sink.Checkpoint(ctx, e.principal(), instance)
			if err != nil {
				t.Fatal(err)
			}
			if c.Position.Seq != seq || c.Position.Instance != instance {
				t.Fatalf("%s: checkpoint of instance %s = %q at seq %d, want its own at seq %d", when, instance,
					c.Position.Instance, c.Position.Seq, seq)
			}
		}
	}

	into(a, Input{Kind: Work, ID: "a-100", Conversation: "ca", Text: "work mail", Seq: 100}, Acked)
	if got := e.instanceOfLastAcceptance(); got != a {
		t.Fatalf("instance %s accepted an event with the position of instance %q", a, got)
	}
	into(b, Input{Kind: Work, ID: "b-5", Conversation: "cb", Text: "home mail", Seq: 5}, Acked)
	if got := e.instanceOfLastAcceptance(); got != b {
		t.Fatalf("instance %s accepted an event with the position of instance %q", b, got)
	}
	want("after accepting seq 100 on "+a+" and seq 5 on "+b, map[string]int64{a: 100, b: 5})
	into(b, Input{Kind: NonWork, ID: "b-6", Conversation: "cb", Seq: 6}, Acked)
	into(a, Input{Kind: Work, ID: "a-50", Conversation: "ca", Text: "older work mail", Seq: 50}, Acked)
	want("after non-work at seq 6 on "+b+" and seq 50 on "+a, map[string]int64{a: 100, b: 6})

	stops[b]()
	delete(stops, b)
	start(b)
	into(b, Input{Kind: Work, ID: "b-7", Conversation: "cb", Text: "more home mail", Seq: 7}, Acked)
	want("after restarting "+b+" and accepting its seq 7", map[string]int64{a: 100, b: 7})
}

// malformed: a malformed envelope is recorded, then settled; while the store is down it is not
// settled, because it could not be recorded.
func (k *kit) malformed(t *testing.T, e *env) {
	in := Input{Kind: Malformed, ID: "ev-bad", Conversation: "c1", Seq: 1}
	instance, tasks := "", 0
	if k.row.Checkpoint.Declared() {
		// An accepted event first names the instance whose position the envelope must pass.
		e.work(Input{ID: "ev-first", Conversation: "c1", Text: "first", Seq: 1})
		instance, tasks, in.Seq = e.instanceOfLastAcceptance(), 1, 2
	}
	e.store.setFail(true)
	e.inject(in, Unacked)
	e.store.setFail(false)
	if n := len(e.evidence(sources.EvidenceMalformed)); n != 0 {
		t.Fatalf("malformed evidence while the store was down = %d", n)
	}
	e.mu.Lock()
	before := len(e.seen)
	e.mu.Unlock()
	got := k.d.Inject(t, in)
	if got == Unacked {
		t.Fatalf("malformed envelope answered %s, want it settled (acked or refused)", got)
	}
	if n := len(e.evidence(sources.EvidenceMalformed)); n != 1 {
		t.Fatalf("malformed evidence = %d, want 1", n)
	}
	e.mu.Lock()
	for _, o := range e.seen[before:] {
		if o.err == nil {
			t.Errorf("a malformed envelope was accepted: %+v", o.acc)
		}
	}
	e.mu.Unlock()
	if n := e.tasks(); n != tasks {
		t.Fatalf("tasks = %d, want %d", n, tasks)
	}
	if instance != "" {
		// Settled with its evidence, the envelope's position is passed, in its instance's
		// checkpoint: a pull source that kept it would fetch it, and record it malformed, on
		// every poll.
		c, err := e.sink.Checkpoint(context.Background(), e.principal(), instance)
		if err != nil {
			t.Fatal(err)
		}
		if c.Position.Instance != instance || c.Position.Seq < in.Seq {
			t.Fatalf("instance %s's checkpoint after the settled malformed envelope (seq %d): %+v", instance, in.Seq, c)
		}
	}
}

// nonWork: non-work is settled, counted by reason, and makes no Task.
func (k *kit) nonWork(t *testing.T, e *env) {
	for i, id := range []string{"nw-1", "nw-2", "nw-3"} {
		if a := k.d.Inject(t, Input{Kind: NonWork, ID: id, Conversation: "c1", Text: "beep", Seq: int64(i + 1)}); a == Unacked {
			t.Fatalf("non-work %s answered %s, want settled", id, a)
		}
	}
	if err := e.sink.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	counts, err := sources.CountByReason(context.Background(), e.store,
		store.EvidenceFilter{Principal: e.principal(), Source: k.row.Source, Kind: sources.EvidenceNonWork})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, n := range counts {
		total += n
	}
	if total != 3 {
		t.Fatalf("non-work counted %d times (%v), want 3", total, counts)
	}
	if n := e.tasks(); n != 0 {
		t.Fatalf("tasks = %d, want 0", n)
	}
}

// continuation: a reply to the anchor of a delivered question continues the waiting Task; a
// second reply to it, a reply to something else and a plain message each make a new Task in the
// same context. A source that declares no reply-anchor continuation cannot record an anchor.
func (k *kit) continuation(t *testing.T, e *env) {
	ctx := context.Background()
	first := e.work(Input{ID: "ev-1", Conversation: "c1", Text: "deploy it"})
	waiting, q := e.ask(first.Task.ID)

	if k.row.Continuation.Method != matrix.ReplyAnchor {
		err := e.sink.RecordAnchor(ctx, e.principal(), "resp-1", waiting.ID)
		if !errors.Is(err, taskplane.ErrContinuationNotAllowed) {
			t.Fatalf("RecordAnchor on a source declaring %q = %v, want ErrContinuationNotAllowed", k.row.Continuation.Method, err)
		}
		acc := e.work(Input{ID: "ev-2", Conversation: "c1", Text: "the blue one", ReplyTo: "resp-1"})
		if acc.Outcome != taskplane.Created || acc.Task.ID == waiting.ID || acc.ContextID != first.ContextID {
			t.Fatalf("reply: %s task %s context %s, want a new task in context %s", acc.Outcome, acc.Task.ID, acc.ContextID, first.ContextID)
		}
		return
	}

	sender := e.src.(sources.Sender) // declaration checks it exists
	rc, err := sender.Send(ctx, sources.Delivery{
		ID: "delivery-q1", Principal: e.principal(), TaskID: waiting.ID, ContextID: waiting.ContextID,
		Operation: "question", State: waiting.Status.State, Locator: waiting.Origin.Locator, Message: *q,
	})
	if err != nil {
		t.Fatalf("send the question: %v", err)
	}
	if rc.ProviderID == "" {
		t.Fatal("the question's receipt has no provider id")
	}
	if err := e.sink.RecordAnchor(ctx, e.principal(), rc.ProviderID, waiting.ID); err != nil {
		t.Fatalf("record anchor: %v", err)
	}

	reply := e.work(Input{ID: "ev-2", Conversation: "c1", Text: "the blue one", ReplyTo: rc.ProviderID})
	if reply.Outcome != taskplane.Continued || reply.Task.ID != waiting.ID {
		t.Fatalf("reply to the anchor: %s task %s, want continued %s", reply.Outcome, reply.Task.ID, waiting.ID)
	}
	cont := e.task(waiting.ID)
	if cont.Status.State != taskplane.StateSubmitted || len(cont.History) != len(waiting.History)+1 {
		t.Fatalf("continued task: state %s history %d, want submitted with %d messages", cont.Status.State, len(cont.History), len(waiting.History)+1)
	}

	for _, in := range []Input{
		{ID: "ev-3", Conversation: "c1", Text: "and again", ReplyTo: rc.ProviderID}, // answered already
		{ID: "ev-4", Conversation: "c1", Text: "elsewhere", ReplyTo: "never-sent-by-us"},
		{ID: "ev-5", Conversation: "c1", Text: "plain message in the thread"},
	} {
		acc := e.work(in)
		if acc.Outcome != taskplane.Created || acc.Task.ID == waiting.ID {
			t.Fatalf("%s: %s task %s, want a new task", in.ID, acc.Outcome, acc.Task.ID)
		}
		if acc.ContextID != first.ContextID {
			t.Fatalf("%s: context %s, want the conversation's %s", in.ID, acc.ContextID, first.ContextID)
		}
	}
	if n := len(e.evidence(sources.EvidenceAnchorMiss)); n != 2 {
		t.Fatalf("anchor-miss evidence = %d, want 2 (the answered anchor and the unknown one)", n)
	}
	if n := len(e.evidence(sources.EvidenceContinued)); n != 1 {
		t.Fatalf("continued evidence = %d, want 1", n)
	}
}

// bodyTaskID: a taskId in the provider body, naming a waiting Task of the same principal, in the
// same or another conversation, never continues it.
func (k *kit) bodyTaskID(t *testing.T, e *env) {
	first := e.work(Input{ID: "ev-1", Conversation: "c1", Text: "deploy it"})
	waiting, _ := e.ask(first.Task.ID)
	for _, in := range []Input{
		{ID: "ev-2", Conversation: "c1", Text: "continue that", BodyTaskID: waiting.ID},
		{ID: "ev-3", Conversation: "c2", Text: "continue that", BodyTaskID: waiting.ID},
	} {
		acc := e.work(in)
		if acc.Outcome != taskplane.Created || acc.Task.ID == waiting.ID {
			t.Fatalf("%s with body taskId %s: %s task %s, want a new task", in.ID, waiting.ID, acc.Outcome, acc.Task.ID)
		}
		for _, m := range acc.Task.History {
			if m.TaskID != acc.Task.ID || slices.Contains(m.ReferenceTaskIDs, waiting.ID) {
				t.Fatalf("%s: message ids %s/%v carry the body's taskId", in.ID, m.TaskID, m.ReferenceTaskIDs)
			}
		}
	}
	after := e.task(waiting.ID)
	if after.Status.State != taskplane.StateInputRequired || len(after.History) != len(waiting.History) {
		t.Fatalf("the named task changed: state %s history %d", after.Status.State, len(after.History))
	}
}
