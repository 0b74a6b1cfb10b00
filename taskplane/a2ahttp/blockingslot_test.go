package a2ahttp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// heldExec holds each task WORKING until the test opens the gate named by the task's first
// message, then completes it. A task started before or after the gate opens waits on the same
// gate, so the test need not know when a turn starts.
type heldExec struct {
	mu    sync.Mutex
	gates map[string]chan struct{}
}

func (x *heldExec) gate(name string) chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.gates == nil {
		x.gates = map[string]chan struct{}{}
	}
	g := x.gates[name]
	if g == nil {
		g = make(chan struct{})
		x.gates[name] = g
	}
	return g
}

// open lets the tasks of gate name complete.
func (x *heldExec) open(name string) { close(x.gate(name)) }

func (x *heldExec) Execute(ctx context.Context, turn *taskplane.Turn) error {
	g := x.gate(userTexts(turn.Task)[0])
	if err := turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateWorking}); err != nil {
		return err
	}
	select {
	case <-g:
	case <-ctx.Done():
		return ctx.Err()
	}
	return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted, Message: agentMsg("done")})
}

// newHeldEnv starts a server whose agent is a heldExec, with the given bounds on blocking sends
// and a blocking timeout no test waits out.
func newHeldEnv(t *testing.T, total, perPrincipal int, opts ...envOption) (*env, *heldExec) {
	x := &heldExec{}
	opts = append([]envOption{func(c *a2aConfig) {
		c.BlockingTimeout = time.Hour
		c.Limits.MaxBlockingSends, c.Limits.MaxBlockingSendsPerPrincipal = total, perPrincipal
	}}, opts...)
	return newEnvExec(t, storetest.OpenSQLite(t), nil, x, opts...), x
}

type sendAnswer struct {
	task *a2a.Task
	err  error
}

// blockingSend sends text as a blocking send in the background; its answer arrives on the
// channel.
func blockingSend(ctx context.Context, c *a2aclient.Client, text string) <-chan sendAnswer {
	ch := make(chan sendAnswer, 1)
	go func() {
		res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: userMessage(text)})
		task, _ := res.(*a2a.Task)
		ch <- sendAnswer{task, err}
	}()
	return ch
}

// waitBlocking waits until n blocking sends hold a slot.
func waitBlocking(t *testing.T, e *env, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for e.srv.Service().BlockingSends() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d blocking sends hold a slot, want %d", e.srv.Service().BlockingSends(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sendsAtOnce sends text as a blocking send of principal (whose client c is) that must not wait
// for its task (held WORKING until the test opens its gate, under a blocking timeout of an
// hour): it answers with the task as accepted, not settled, and no error, and the task is
// stored. A send that waits instead runs into the test's patience and fails.
func sendsAtOnce(t *testing.T, e *env, c *a2aclient.Client, principal, text, why string) *a2a.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: userMessage(text)})
	if err != nil {
		t.Fatalf("a blocking send %s: %v (want the task at once, no error)", why, err)
	}
	task, ok := res.(*a2a.Task)
	if !ok || task.ID == "" || task.Status.State.Terminal() {
		t.Fatalf("a blocking send %s answered %#v, want the task as accepted", why, res)
	}
	if _, err := e.plane.GetTask(ctxT(t), principal, string(task.ID)); err != nil {
		t.Fatalf("the task a blocking send %s answered with is not stored: %v", why, err)
	}
	return task
}

// completed checks that a waiting send answered with its task settled.
func completed(t *testing.T, ch <-chan sendAnswer, who string) {
	t.Helper()
	a := <-ch
	if a.err != nil || a.task == nil || a.task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("%s: answer %+v, error %v; want the COMPLETED task", who, a.task, a.err)
	}
}

// TestABlockingSendPastItsCallersBoundAnswersAtOnceAndAnotherCallerStillWaits: with
// max_blocking_sends_per_principal 1, alice's second blocking send, while her first waits, is
// accepted and answered at once with the task as accepted (no error); bob's send still waits for
// its task, and the message alice's second send carried is worked like any other.
func TestABlockingSendPastItsCallersBoundAnswersAtOnceAndAnotherCallerStillWaits(t *testing.T) {
	e, x := newHeldEnv(t, 10, 1)
	alice := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	bob := e.client(a2awire.BindingHTTPJSON, tokenBob)

	first := blockingSend(ctxT(t), alice, "g")
	waitBlocking(t, e, 1)
	over := sendsAtOnce(t, e, alice, "alice", "g", "past max_blocking_sends_per_principal")
	if n := e.srv.Service().BlockingSends(); n != 1 {
		t.Fatalf("after alice's send past her bound, %d blocking sends hold a slot, want 1", n)
	}
	if p, s := e.srv.Service().BlockingSendsUnwaited(); p != 1 || s != 0 {
		t.Fatalf("sends answered at once: %d past a caller's bound and %d past the server's, want 1 and 0", p, s)
	}

	fromBob := blockingSend(ctxT(t), bob, "g")
	waitBlocking(t, e, 2) // bob waits: alice's bound is hers

	x.open("g")
	completed(t, first, "alice's first send")
	completed(t, fromBob, "bob's send")
	waitState(t, alice, over.ID, a2a.TaskStateCompleted) // accepted and worked, not dropped
	waitBlocking(t, e, 0)
}

// TestABlockingSendPastTheServersBoundAnswersAtOnce: with max_blocking_sends 2, a third blocking
// send while two wait (one each of alice and bob, both within their own bound) is answered at
// once with the task as accepted, and its message is worked.
func TestABlockingSendPastTheServersBoundAnswersAtOnce(t *testing.T) {
	e, x := newHeldEnv(t, 2, 10)
	alice := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	bob := e.client(a2awire.BindingHTTPJSON, tokenBob)

	fromAlice := blockingSend(ctxT(t), alice, "g")
	fromBob := blockingSend(ctxT(t), bob, "g")
	waitBlocking(t, e, 2)
	over := sendsAtOnce(t, e, alice, "alice", "g", "past max_blocking_sends")
	if n := e.srv.Service().BlockingSends(); n != 2 {
		t.Fatalf("after a send past the server's bound, %d blocking sends hold a slot, want 2", n)
	}
	if p, s := e.srv.Service().BlockingSendsUnwaited(); p != 0 || s != 1 {
		t.Fatalf("sends answered at once: %d past a caller's bound and %d past the server's, want 0 and 1", p, s)
	}

	x.open("g")
	completed(t, fromAlice, "alice's send")
	completed(t, fromBob, "bob's send")
	waitState(t, alice, over.ID, a2a.TaskStateCompleted)
	waitBlocking(t, e, 0)
}

// TestBlockingSendSlotsComeBackWhenTheirSendsSettle: with max_blocking_sends 2, after two
// waiting sends settle two more can wait, and a third is again answered at once: the bound is
// on the sends waiting now, not on every send so far.
func TestBlockingSendSlotsComeBackWhenTheirSendsSettle(t *testing.T) {
	e, x := newHeldEnv(t, 2, 2)
	alice := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	for _, gate := range []string{"round 1", "round 2", "round 3"} {
		a, b := blockingSend(ctxT(t), alice, gate), blockingSend(ctxT(t), alice, gate)
		waitBlocking(t, e, 2)
		sendsAtOnce(t, e, alice, "alice", gate, "past the bound in "+gate)
		x.open(gate)
		completed(t, a, gate)
		completed(t, b, gate)
		// The slot is given back before the answer is written.
		if n := e.srv.Service().BlockingSends(); n != 0 {
			t.Fatalf("%s: with both sends answered, %d blocking sends hold a slot, want 0", gate, n)
		}
	}
}

// TestABlockingSendGivesItsSlotBackOnEveryReturn: a blocking send gives its slot back whether
// its blocking timeout passes, its client goes away, or reading its task fails.
func TestABlockingSendGivesItsSlotBackOnEveryReturn(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		e, x := newHeldEnv(t, 1, 1, func(c *a2aConfig) { c.BlockingTimeout = 50 * time.Millisecond })
		defer x.open("g")
		alice := e.client(a2awire.BindingHTTPJSON, tokenAlice)
		for range 2 { // the second send finds the slot free again (it waits, and times out)
			task := send(t, alice, userMessage("g"), nil)
			if task.Status.State.Terminal() {
				t.Fatalf("task %s before its gate opened", task.Status.State)
			}
			if n := e.srv.Service().BlockingSends(); n != 0 {
				t.Fatalf("after a send's blocking timeout, %d blocking sends hold a slot, want 0", n)
			}
		}
	})
	t.Run("client gone", func(t *testing.T) {
		e, x := newHeldEnv(t, 2, 2)
		defer x.open("g")
		alice := e.client(a2awire.BindingHTTPJSON, tokenAlice)
		ctx, cancel := context.WithCancel(ctxT(t))
		a, b := blockingSend(ctx, alice, "g"), blockingSend(ctx, alice, "g")
		waitBlocking(t, e, 2)
		cancel()
		<-a
		<-b
		waitBlocking(t, e, 0)
		c, d := blockingSend(ctxT(t), alice, "h"), blockingSend(ctxT(t), alice, "h")
		waitBlocking(t, e, 2)
		x.open("h")
		completed(t, c, "a send after the clients went away")
		completed(t, d, "a send after the clients went away")
	})
	t.Run("read failed", func(t *testing.T) {
		st := &failingReads{Store: storetest.OpenSQLite(t)}
		popts := []taskplane.Option{taskplane.WithFollowOutage(200 * time.Millisecond)}
		x := &heldExec{}
		defer x.open("g")
		e := newEnvExec(t, st, popts, x, func(c *a2aConfig) {
			c.Limits.MaxBlockingSends, c.Limits.MaxBlockingSendsPerPrincipal = 1, 1
		})
		alice := e.client(a2awire.BindingHTTPJSON, tokenAlice)
		st.fail.Store(true)
		task := send(t, alice, userMessage("g"), nil) // answered with the task as accepted
		st.fail.Store(false)
		if task.Status.State.Terminal() {
			t.Fatalf("task %s before its gate opened", task.Status.State)
		}
		if n := e.srv.Service().BlockingSends(); n != 0 {
			t.Fatalf("after a send whose reads failed, %d blocking sends hold a slot, want 0", n)
		}
	})
}
