package taskplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// eachDriver runs fn once per store driver with a fresh Plane over a fresh store.
func eachDriver(t *testing.T, fn func(t *testing.T, p *taskplane.Plane)) {
	t.Helper()
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		fn(t, taskplane.New(open(t)))
	})
}

func textMsg(id, text string) taskplane.Message {
	return taskplane.Message{ID: id, Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart(text)}}
}

func nativeEvent(principal, identity, convKey, text string) taskplane.Event {
	return taskplane.Event{
		Principal: principal, Source: "webhook", Identity: identity, ConversationKey: convKey,
		Message: textMsg("m-"+identity, text),
	}
}

func mustAccept(t *testing.T, p *taskplane.Plane, ev taskplane.Event) taskplane.Acceptance {
	t.Helper()
	acc, err := p.Accept(context.Background(), ev)
	if err != nil {
		t.Fatalf("Accept(%s): %v", ev.Identity, err)
	}
	return acc
}

func countEvidence(t *testing.T, p *taskplane.Plane, principal, kind string) int {
	t.Helper()
	ev, err := p.Store().ListEvidence(context.Background(), store.EvidenceFilter{Principal: principal, Kind: kind})
	if err != nil {
		t.Fatal(err)
	}
	return len(ev)
}

func countTasks(t *testing.T, p *taskplane.Plane, principal string) int {
	t.Helper()
	page, err := p.ListTasks(context.Background(), principal, taskplane.ListQuery{PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	return page.TotalSize
}

// ask puts the task into an interrupted state with a question, as an executor would.
func ask(t *testing.T, p *taskplane.Plane, principal, taskID string, st taskplane.State) *taskplane.Task {
	t.Helper()
	q := &taskplane.Message{ID: "q-" + taskID, Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("which one?")}}
	task, err := p.Apply(context.Background(), principal, taskID, taskplane.AnyVersion, taskplane.SetStatus{State: st, Message: q})
	if err != nil {
		t.Fatalf("ask: %v", err)
	}
	return task
}

func TestDuplicateReturnsThePriorTask(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ev := nativeEvent("alice", "ev-1", "c1", "hello")
		first := mustAccept(t, p, ev)
		if first.Outcome != taskplane.Created || first.Task == nil {
			t.Fatalf("first: %+v", first)
		}
		// The agent works on it; the redelivery must return the task as it is now.
		if _, err := p.Apply(context.Background(), "alice", first.Task.ID, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateWorking}); err != nil {
			t.Fatal(err)
		}
		second := mustAccept(t, p, ev)
		if second.Outcome != taskplane.Duplicate || second.Task == nil || second.Task.ID != first.Task.ID {
			t.Fatalf("second: %+v", second)
		}
		if second.Task.Status.State != taskplane.StateWorking || second.ContextID != first.ContextID {
			t.Fatalf("duplicate returned %s in %s", second.Task.Status.State, second.ContextID)
		}
		if n := countTasks(t, p, "alice"); n != 1 {
			t.Fatalf("tasks = %d, want 1", n)
		}
		if n := countEvidence(t, p, "alice", taskplane.EvidenceDuplicate); n != 1 {
			t.Fatalf("duplicate evidence = %d", n)
		}
	})
}

func TestDuplicateDirectMessageReturnsThePriorMessage(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ev := taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "msg-1", Message: textMsg("msg-1", "hi")}
		ev.Reply = &taskplane.Message{ID: "reply-1", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("direct")}}
		first := mustAccept(t, p, ev)
		if first.Message == nil || first.Task != nil || first.Message.ContextID == "" {
			t.Fatalf("first: %+v", first)
		}
		// The executor's second answer differs; the duplicate must still return the first one.
		ev.Reply = &taskplane.Message{ID: "reply-2", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("other")}}
		second := mustAccept(t, p, ev)
		if second.Outcome != taskplane.Duplicate || second.Message == nil || second.Message.ID != "reply-1" ||
			second.Message.Parts[0].Text != "direct" || second.Message.ContextID != first.Message.ContextID {
			t.Fatalf("second: %+v %+v", second, second.Message)
		}
		if n := countTasks(t, p, "alice"); n != 0 {
			t.Fatalf("tasks = %d, want 0", n)
		}
	})
}

func TestDifferentPayloadUnderTheSameIdentityConflicts(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		first := mustAccept(t, p, nativeEvent("alice", "ev-1", "c1", "hello"))
		_, err := p.Accept(context.Background(), nativeEvent("alice", "ev-1", "c1", "changed"))
		var ce *taskplane.ConflictError
		if !errors.As(err, &ce) || !errors.Is(err, taskplane.ErrDuplicateConflict) {
			t.Fatalf("err = %v, want ConflictError", err)
		}
		if n := countEvidence(t, p, "alice", taskplane.EvidenceDuplicateConflict); n != 1 {
			t.Fatalf("duplicate-conflict evidence = %d", n)
		}
		task, err := p.GetTask(context.Background(), "alice", first.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(task.History) != 1 || task.History[0].Parts[0].Text != "hello" || task.Version != first.Task.Version {
			t.Fatalf("task changed: %+v", task)
		}
		if n := countTasks(t, p, "alice"); n != 1 {
			t.Fatalf("tasks = %d", n)
		}
	})
}

// A claim recorded by an older release holds a digest of an older formula, bare (unmarked) or
// marked v2:. Its event's redelivery still deduplicates, and a different payload under its
// identity is still a conflict, never a silent replay (DESIGN.md §4, invariant 3).
func TestAChangedPayloadConflictsWithAClaimAnOlderReleaseRecorded(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		for principal, mark := range map[string]string{"alice": "", "bob": "v2:"} {
			olderClaimConflicts(t, p, principal, mark)
		}
	})
}

// olderClaimConflicts accepts an event as principal, rewrites its claim as an older release
// stored it (its digest marked with mark), and checks a redelivery and a changed payload.
func olderClaimConflicts(t *testing.T, p *taskplane.Plane, principal, mark string) {
	t.Helper()
	ctx := context.Background()
	first := mustAccept(t, p, nativeEvent(principal, "ev-1", "c1", "hello"))
	// Rewrite the claim as an older release stored it: the same digest (the event has nothing
	// the canonical form changes) under the older mark.
	var older string
	if err := p.Store().Update(ctx, func(ctx context.Context, tx store.Tx) error {
		c, err := tx.GetClaim(ctx, principal, "webhook", "ev-1")
		if err != nil {
			return err
		}
		marked := c.Digest
		if older = strings.TrimPrefix(marked, "v3:"); older == marked {
			return fmt.Errorf("claim digest %q is not marked", marked)
		}
		older = mark + older
		if _, err := tx.DeleteClaim(ctx, principal, "webhook", "ev-1", c.TaskID); err != nil {
			return err
		}
		c.Digest = older
		_, _, err = tx.InsertClaim(ctx, c)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if acc := mustAccept(t, p, nativeEvent(principal, "ev-1", "c1", "hello")); acc.Outcome != taskplane.Duplicate || acc.Task.ID != first.Task.ID {
		t.Fatalf("redelivery against the older claim: %s task %s, want a duplicate of %s", acc.Outcome, acc.Task.ID, first.Task.ID)
	}

	_, err := p.Accept(ctx, nativeEvent(principal, "ev-1", "c1", "changed"))
	var ce *taskplane.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, taskplane.ErrDuplicateConflict) {
		t.Fatalf("changed payload against the older claim: err = %v, want ConflictError", err)
	}
	if n := countEvidence(t, p, principal, taskplane.EvidenceDuplicateConflict); n != 1 {
		t.Fatalf("duplicate-conflict evidence = %d, want 1", n)
	}
	task, err := p.GetTask(ctx, principal, first.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(task.History) != 1 || task.History[0].Parts[0].Text != "hello" || task.Version != first.Task.Version {
		t.Fatalf("task changed: %+v", task)
	}
	if n := countTasks(t, p, principal); n != 1 {
		t.Fatalf("tasks = %d, want 1", n)
	}
	if c, err := p.Store().GetClaim(ctx, principal, "webhook", "ev-1"); err != nil || c.Digest != older || c.TaskID != first.Task.ID {
		t.Fatalf("claim after the conflict: %+v (%v), want the older claim unchanged", c, err)
	}
}

func TestTwoEventsInOneConversationMakeTwoTasksInOneContext(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		a := mustAccept(t, p, nativeEvent("alice", "ev-1", "thread-1", "one"))
		b := mustAccept(t, p, nativeEvent("alice", "ev-2", "thread-1", "two"))
		c := mustAccept(t, p, nativeEvent("alice", "ev-3", "thread-2", "three"))
		if a.Task.ID == b.Task.ID {
			t.Fatal("one task for two events")
		}
		if a.ContextID != b.ContextID || a.Task.ContextID != b.Task.ContextID {
			t.Fatalf("contexts differ: %s %s", a.ContextID, b.ContextID)
		}
		if c.ContextID == a.ContextID {
			t.Fatal("another conversation joined the context")
		}
		// The same key under another principal is another conversation.
		d := mustAccept(t, p, nativeEvent("bob", "ev-1", "thread-1", "one"))
		if d.ContextID == a.ContextID || d.Outcome != taskplane.Created {
			t.Fatalf("bob: %+v", d)
		}
	})
}

// together runs fn(0) … fn(n-1) on n goroutines released at once, and returns when all have.
func together(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

func TestFiftyConcurrentFirstMessagesGetOneContextID(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		const n = 50
		ctxs := make([]string, n)
		errs := make([]error, n)
		together(n, func(i int) {
			acc, err := p.Accept(context.Background(), nativeEvent("alice", fmt.Sprintf("ev-%d", i), "busy-thread", "hi"))
			ctxs[i], errs[i] = acc.ContextID, err
		})
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("accept %d: %v", i, errs[i])
			}
			if ctxs[i] != ctxs[0] {
				t.Fatalf("context %d = %s, want %s", i, ctxs[i], ctxs[0])
			}
		}
		if got := countTasks(t, p, "alice"); got != n {
			t.Fatalf("tasks = %d, want %d", got, n)
		}
	})
}

// Concurrent first messages (and CreateTask calls) naming one new client contextId share one
// context of that id: on Postgres the losers' context inserts collide with the winner's, and they
// run again and join it.
func TestConcurrentFirstUsesOfAClientContextIDShareOneContext(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		const n = 20
		ctxs := make([]string, n)
		errs := make([]error, n)
		together(n, func(i int) {
			if i%2 == 1 { // the trusted interface, naming the same context
				task, err := p.CreateTask(context.Background(), "alice", "client-ctx")
				if errs[i] = err; err == nil {
					ctxs[i] = task.ContextID
				}
				return
			}
			id := fmt.Sprintf("m-%d", i)
			acc, err := p.Accept(context.Background(), taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A,
				Identity: id, ContextID: "client-ctx", Message: textMsg(id, "hi")})
			ctxs[i], errs[i] = acc.ContextID, err
		})
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("accept %d: %v", i, errs[i])
			}
			if ctxs[i] != "client-ctx" {
				t.Fatalf("context %d = %s, want client-ctx", i, ctxs[i])
			}
		}
		page, err := p.ListTasks(context.Background(), "alice", taskplane.ListQuery{ContextID: "client-ctx", PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		if page.TotalSize != n {
			t.Fatalf("context client-ctx holds %d tasks, want %d", page.TotalSize, n)
		}
	})
}

// TestConcurrentRedeliveriesOfOneEventMakeOneTask: many deliveries of one event at once (a
// provider retrying while the first is still being accepted) make exactly one task; every other
// one is a duplicate returning it, whether it ran in the same group transaction or raced it from
// another one (on Postgres the loser's claim insert waits for the winner's commit, and the loser
// runs again and finds the claim).
func TestConcurrentRedeliveriesOfOneEventMakeOneTask(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		const n = 20
		accs := make([]taskplane.Acceptance, n)
		errs := make([]error, n)
		together(n, func(i int) {
			accs[i], errs[i] = p.Accept(context.Background(), nativeEvent("alice", "ev-retried", "thread", "hi"))
		})
		created := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("accept %d: %v", i, errs[i])
			}
			if accs[i].Outcome == taskplane.Created {
				created++
			}
			if accs[i].Task == nil || accs[i].Task.ID != accs[0].Task.ID {
				t.Fatalf("acceptance %d: %+v; want the one task %s", i, accs[i], accs[0].Task.ID)
			}
		}
		if created != 1 {
			t.Fatalf("%d acceptances created a task, want 1", created)
		}
		if got := countTasks(t, p, "alice"); got != 1 {
			t.Fatalf("tasks = %d, want 1", got)
		}
		if got := countEvidence(t, p, "alice", taskplane.EvidenceAccepted); got != 1 {
			t.Fatalf("accepted evidence = %d, want 1", got)
		}
		if got := countEvidence(t, p, "alice", taskplane.EvidenceDuplicate); got != n-1 {
			t.Fatalf("duplicate evidence = %d, want %d", got, n-1)
		}
	})
}

// A foreign or unknown contextId gets a fresh context: one of the caller's own, under the id the
// client sent (A2A forbids substituting another), which joins no one else's work.
func TestForeignContextIDGetsAFreshContext(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		bob := mustAccept(t, p, taskplane.Event{Principal: "bob", Source: taskplane.SourceA2A, Identity: "b1", Message: textMsg("b1", "mine")})
		own := mustAccept(t, p, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "a0", Message: textMsg("a0", "mine")})
		for _, cid := range []string{bob.ContextID, "never-issued"} {
			acc := mustAccept(t, p, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "a-" + cid,
				ContextID: cid, Message: textMsg("a-"+cid, "join?")})
			if acc.ContextID != cid {
				t.Fatalf("contextId %q was replaced by %q", cid, acc.ContextID)
			}
			if _, err := p.Store().GetContext(ctx, "alice", cid); err != nil {
				t.Fatalf("alice has no context %q of her own: %v", cid, err)
			}
			// A second message names the same context: alice's, now.
			again := mustAccept(t, p, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "a2-" + cid,
				ContextID: cid, Message: textMsg("a2-"+cid, "again")})
			page, err := p.ListTasks(ctx, "alice", taskplane.ListQuery{ContextID: cid, PageSize: 10})
			if err != nil {
				t.Fatal(err)
			}
			if page.TotalSize != 2 || again.ContextID != cid {
				t.Fatalf("alice's context %q holds %d tasks, want her 2", cid, page.TotalSize)
			}
		}
		// Bob's context holds his task only.
		page, err := p.ListTasks(ctx, "bob", taskplane.ListQuery{ContextID: bob.ContextID, PageSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		if page.TotalSize != 1 || page.Tasks[0].ID != bob.Task.ID {
			t.Fatalf("bob's context holds %d tasks, want his 1", page.TotalSize)
		}
		// Its own context attaches.
		acc := mustAccept(t, p, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "a2",
			ContextID: own.ContextID, Message: textMsg("a2", "same")})
		if acc.ContextID != own.ContextID {
			t.Fatalf("own context not attached: %s", acc.ContextID)
		}
	})
}

func TestUnauthorizedExplicitTaskIDIsNotFoundAndPersistsNothing(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		bob := mustAccept(t, p, taskplane.Event{Principal: "bob", Source: taskplane.SourceA2A, Identity: "b1", Message: textMsg("b1", "mine")})
		ask(t, p, "bob", bob.Task.ID, taskplane.StateInputRequired)
		for _, id := range []string{bob.Task.ID, "no-such-task"} {
			_, err := p.Accept(context.Background(), taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A,
				Identity: "a-" + id, TaskID: id, Message: textMsg("a-"+id, "take over")})
			if !errors.Is(err, taskplane.ErrTaskNotFound) {
				t.Fatalf("explicit %s: err = %v, want ErrTaskNotFound", id, err)
			}
			if _, err := p.Store().GetClaim(context.Background(), "alice", taskplane.SourceA2A, "a-"+id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("claim persisted: %v", err)
			}
		}
		if n := countTasks(t, p, "alice"); n != 0 {
			t.Fatalf("alice has %d tasks", n)
		}
		ev, _ := p.Store().ListEvidence(context.Background(), store.EvidenceFilter{Principal: "alice"})
		if len(ev) != 0 {
			t.Fatalf("evidence persisted: %+v", ev)
		}
		task, _ := p.GetTask(context.Background(), "bob", bob.Task.ID)
		if len(task.History) != 2 {
			t.Fatalf("bob's task history = %d", len(task.History))
		}
	})
}

func TestExplicitTaskIDOfOwnInputRequiredTaskContinuesIt(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		first := mustAccept(t, p, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "a1", Message: textMsg("a1", "start")})
		ask(t, p, "alice", first.Task.ID, taskplane.StateInputRequired)
		acc := mustAccept(t, p, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "a2",
			TaskID: first.Task.ID, Message: textMsg("a2", "answer")})
		if acc.Outcome != taskplane.Continued || acc.Task.ID != first.Task.ID {
			t.Fatalf("acc: %+v", acc)
		}
		if acc.Task.Status.State != taskplane.StateSubmitted || acc.Task.InputRequest != 0 {
			t.Fatalf("state %s inputRequest %d", acc.Task.Status.State, acc.Task.InputRequest)
		}
		last := acc.Task.History[len(acc.Task.History)-1]
		if last.ID != "a2" || last.TaskID != first.Task.ID || last.ContextID != first.ContextID {
			t.Fatalf("appended message: %+v", last)
		}
		// A contextId that disagrees with the task is refused and persists nothing.
		_, err := p.Accept(context.Background(), taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "a3",
			TaskID: first.Task.ID, ContextID: "other", Message: textMsg("a3", "x")})
		if !errors.Is(err, taskplane.ErrContextMismatch) {
			t.Fatalf("mismatch err = %v", err)
		}
	})
}

// anchored makes a native task that asked a question delivered as provider message "q-1".
func anchored(t *testing.T, p *taskplane.Plane, st taskplane.State) *taskplane.Task {
	t.Helper()
	acc := mustAccept(t, p, nativeEvent("alice", "ev-1", "thread-1", "start"))
	ask(t, p, "alice", acc.Task.ID, st)
	if err := p.RecordAnchor(context.Background(), "alice", "webhook", "q-1", acc.Task.ID); err != nil {
		t.Fatal(err)
	}
	return acc.Task
}

func TestVerifiedReplyAnchorContinuesTheWaitingTask(t *testing.T) {
	for _, st := range []taskplane.State{taskplane.StateInputRequired, taskplane.StateAuthRequired} {
		t.Run(string(st), func(t *testing.T) {
			eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
				task := anchored(t, p, st)
				ev := nativeEvent("alice", "ev-2", "thread-1", "the blue one")
				ev.ReplyTo = "q-1"
				acc := mustAccept(t, p, ev)
				if acc.Outcome != taskplane.Continued || acc.Task.ID != task.ID || acc.AnchorMiss != "" {
					t.Fatalf("acc: %+v", acc)
				}
				// The anchor is spent: a second reply to the same question is new work.
				ev2 := nativeEvent("alice", "ev-3", "thread-1", "again")
				ev2.ReplyTo = "q-1"
				acc2 := mustAccept(t, p, ev2)
				if acc2.Outcome != taskplane.Created || acc2.AnchorMiss == "" {
					t.Fatalf("second reply: %+v", acc2)
				}
			})
		})
	}
}

func TestEachAnchorConditionFailingAloneMakesANewTask(t *testing.T) {
	cases := []struct {
		name    string
		want    string
		breakIt func(t *testing.T, p *taskplane.Plane, task *taskplane.Task, ev *taskplane.Event)
	}{
		{"task not interrupted", taskplane.AnchorNotInterrupted, func(t *testing.T, p *taskplane.Plane, task *taskplane.Task, ev *taskplane.Event) {
			if _, err := p.Apply(context.Background(), "alice", task.ID, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateWorking}); err != nil {
				t.Fatal(err)
			}
		}},
		{"response not sent to the task's source", taskplane.AnchorNotOurResponse, func(t *testing.T, p *taskplane.Plane, task *taskplane.Task, ev *taskplane.Event) {
			if err := p.RecordAnchor(context.Background(), "alice", "email", "q-mail", task.ID); err != nil {
				t.Fatal(err)
			}
			ev.Source, ev.ReplyTo = "email", "q-mail"
		}},
		{"id not stored as an anchor", taskplane.AnchorNotStored, func(t *testing.T, p *taskplane.Plane, task *taskplane.Task, ev *taskplane.Event) {
			ev.ReplyTo = "q-unknown"
		}},
		{"event does not directly reply", "", func(t *testing.T, p *taskplane.Plane, task *taskplane.Task, ev *taskplane.Event) {
			ev.ReplyTo = "" // a plain message in the same thread
		}},
		{"another principal", taskplane.AnchorNotStored, func(t *testing.T, p *taskplane.Plane, task *taskplane.Task, ev *taskplane.Event) {
			ev.Principal = "mallory"
		}},
		{"no unanswered input request", taskplane.AnchorNoInputRequest, func(t *testing.T, p *taskplane.Plane, task *taskplane.Task, ev *taskplane.Event) {
			// A newer question replaced the one q-1 carried.
			ask(t, p, "alice", task.ID, taskplane.StateInputRequired)
		}},
		{"task too full to hold the reply", taskplane.AnchorTaskFull, func(t *testing.T, p *taskplane.Plane, task *taskplane.Task, ev *taskplane.Event) {
			// Artifacts fill the waiting task to 40 bytes under MaxTaskBytes: the reply does not fit.
			ctx := context.Background()
			size := func() int {
				row, err := p.Store().GetTask(ctx, "alice", task.ID)
				if err != nil {
					t.Fatal(err)
				}
				return len(row.Body)
			}
			add := func(id string, n int) {
				if _, err := p.Apply(ctx, "alice", task.ID, taskplane.AnyVersion, taskplane.AddArtifact{
					Artifact: taskplane.Artifact{ID: id, Parts: []taskplane.Part{taskplane.TextPart(strings.Repeat("x", n))}}}); err != nil {
					t.Fatalf("filling the task: %v", err)
				}
			}
			add("probe1", 1)
			before := size()
			add("probe2", 1)
			add("fill01", taskplane.MaxTaskBytes-40-size()-(size()-before-1))
			if got := size(); got != taskplane.MaxTaskBytes-40 {
				t.Fatalf("filled to %d bytes, want %d", got, taskplane.MaxTaskBytes-40)
			}
			// The question's status message leaves the task with the reply; the reply is longer.
			ev.Message.Parts = []taskplane.Part{taskplane.TextPart(strings.Repeat("y", 1000))}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
				task := anchored(t, p, taskplane.StateInputRequired)
				ev := nativeEvent("alice", "ev-2", "thread-1", "reply")
				ev.ReplyTo = "q-1"
				tc.breakIt(t, p, task, &ev)
				before, _ := p.GetTask(context.Background(), "alice", task.ID)
				acc := mustAccept(t, p, ev)
				if acc.Outcome != taskplane.Created || acc.Task == nil || acc.Task.ID == task.ID {
					t.Fatalf("acc: %+v", acc)
				}
				if acc.AnchorMiss != tc.want {
					t.Fatalf("anchor miss %q, want %q", acc.AnchorMiss, tc.want)
				}
				if ev.Principal == "alice" && ev.Source == "webhook" && acc.ContextID != task.ContextID {
					t.Fatalf("new task not in the conversation's context")
				}
				after, _ := p.GetTask(context.Background(), "alice", task.ID)
				if after.Version != before.Version {
					t.Fatal("waiting task was changed")
				}
				if tc.want != "" && countEvidence(t, p, ev.Principal, taskplane.EvidenceAnchorMiss) != 1 {
					t.Fatal("no anchor-miss evidence")
				}
			})
		})
	}
}

func TestForeignPrincipalsAnchorMakesANewTask(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		task := anchored(t, p, taskplane.StateInputRequired)
		ev := nativeEvent("mallory", "ev-m", "thread-1", "I answer for alice")
		ev.ReplyTo = "q-1"
		acc := mustAccept(t, p, ev)
		if acc.Outcome != taskplane.Created || acc.Task.ID == task.ID {
			t.Fatalf("acc: %+v", acc)
		}
		cur, _ := p.GetTask(context.Background(), "alice", task.ID)
		if cur.Status.State != taskplane.StateInputRequired {
			t.Fatalf("alice's task moved to %s", cur.Status.State)
		}
		if _, err := p.GetTask(context.Background(), "mallory", task.ID); !errors.Is(err, taskplane.ErrTaskNotFound) {
			t.Fatalf("mallory can read alice's task: %v", err)
		}
	})
}

// Cancel is idempotent: canceling a CANCELED task returns it as it is, writing nothing; another
// principal's task is not found, and any other terminal task is not cancelable.
func TestCancelOfACanceledTaskReturnsItUnchanged(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		acc := mustAccept(t, p, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "a1", Message: textMsg("a1", "x")})
		first, canceled, err := p.Cancel(ctx, "alice", acc.Task.ID, nil)
		if err != nil || !canceled || first.Status.State != taskplane.StateCanceled {
			t.Fatalf("first cancel: %v, canceled %v", err, canceled)
		}
		again, canceled, err := p.Cancel(ctx, "alice", acc.Task.ID, map[string]any{"why": "again"})
		if err != nil || canceled {
			t.Fatalf("second cancel: %v, canceled %v; want the task, canceled false", err, canceled)
		}
		if again.Version != first.Version || again.LastSeq != first.LastSeq || !again.Status.Timestamp.Equal(first.Status.Timestamp) {
			t.Fatalf("second cancel changed the task: v%d seq%d at %v, was v%d seq%d at %v", again.Version, again.LastSeq,
				again.Status.Timestamp, first.Version, first.LastSeq, first.Status.Timestamp)
		}
		if _, _, err := p.Cancel(ctx, "mallory", acc.Task.ID, nil); !errors.Is(err, taskplane.ErrTaskNotFound) {
			t.Fatalf("mallory's cancel: %v, want not found", err)
		}
	})
}

// A task's stored body is bounded (MaxTaskBytes): a first message, an artifact or a continuation
// that would leave it past the bound is refused as invalid and leaves nothing behind. A bare status
// move is never refused, even when it takes a full task a few bytes past the bound — a claim's
// WORKING must not fail, or the task would block the wake queue — and a change that ends the task
// still goes through.
func TestTaskGrowthPastTheBoundIsRefusedButTheTaskCanStillMoveAndEnd(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		huge := strings.Repeat("x", taskplane.MaxTaskBytes)
		_, err := p.Accept(ctx, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "a0",
			Message: taskplane.Message{ID: "a0", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart(huge)}}})
		if !errors.Is(err, taskplane.ErrInvalid) {
			t.Fatalf("a first message past the bound: %v, want ErrInvalid", err)
		}
		if _, err := p.Store().GetClaim(ctx, "alice", taskplane.SourceA2A, "a0"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused first message left a claim: %v", err)
		}

		acc := mustAccept(t, p, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "a1", Message: textMsg("a1", "x")})
		id := acc.Task.ID
		size := func() int {
			row, err := p.Store().GetTask(ctx, "alice", id)
			if err != nil {
				t.Fatal(err)
			}
			return len(row.Body)
		}
		add := func(artifact string, n int) error {
			_, err := p.Apply(ctx, "alice", id, taskplane.AnyVersion,
				taskplane.AddArtifact{Artifact: taskplane.Artifact{ID: artifact, Parts: []taskplane.Part{taskplane.TextPart(strings.Repeat("x", n))}}})
			return err
		}
		// Fill the task to one byte under the bound: a second one-byte artifact shows what one
		// more artifact (with an id of the same length) costs besides its text.
		if err := add("probe1", 1); err != nil {
			t.Fatal(err)
		}
		before := size()
		if err := add("probe2", 1); err != nil {
			t.Fatal(err)
		}
		overhead := size() - before - 1
		if err := add("fill01", taskplane.MaxTaskBytes-1-size()-overhead); err != nil {
			t.Fatalf("filling to the bound: %v", err)
		}
		if got := size(); got != taskplane.MaxTaskBytes-1 {
			t.Fatalf("filled body is %d bytes, want %d", got, taskplane.MaxTaskBytes-1)
		}
		full, err := p.GetTask(ctx, "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		if err := add("over", 10); !errors.Is(err, taskplane.ErrInvalid) {
			t.Fatalf("an artifact past the bound: %v, want ErrInvalid", err)
		}
		_, err = p.Accept(ctx, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "a2", TaskID: id, Message: textMsg("a2", "more")})
		if !errors.Is(err, taskplane.ErrInvalid) {
			t.Fatalf("a continuation past the bound: %v, want ErrInvalid", err)
		}
		after, err := p.GetTask(ctx, "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		if after.Version != full.Version || after.LastSeq != full.LastSeq || len(after.Artifacts) != 3 || len(after.History) != len(full.History) {
			t.Fatalf("refused changes left traces: v%d seq%d, was v%d seq%d", after.Version, after.LastSeq, full.Version, full.LastSeq)
		}
		if _, err := p.Store().GetClaim(ctx, "alice", taskplane.SourceA2A, "a2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused continuation left a claim: %v", err)
		}
		// A bare status move takes it past the bound, and is not refused.
		if _, err := p.Apply(ctx, "alice", id, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateInputRequired}); err != nil {
			t.Fatalf("a bare status move of a full task: %v", err)
		}
		if got := size(); got <= taskplane.MaxTaskBytes {
			t.Fatalf("the status move left %d bytes: the test meant to cross the bound", got)
		}
		// Ending it, with one more artifact, still works.
		if _, err := p.Apply(ctx, "alice", id, taskplane.AnyVersion,
			taskplane.AddArtifact{Artifact: taskplane.Artifact{ID: "last", Parts: []taskplane.Part{taskplane.TextPart("done")}}},
			taskplane.SetStatus{State: taskplane.StateCompleted}); err != nil {
			t.Fatalf("completing a full task: %v", err)
		}
	})
}

func TestTerminalTaskIsImmutable(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		acc := mustAccept(t, p, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "a1", Message: textMsg("a1", "x")})
		id := acc.Task.ID
		done, err := p.Apply(context.Background(), "alice", id, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateCompleted})
		if err != nil {
			t.Fatal(err)
		}
		changes := []taskplane.Change{
			taskplane.SetStatus{State: taskplane.StateWorking},
			taskplane.SetStatus{State: taskplane.StateCompleted},
			taskplane.AddArtifact{Artifact: taskplane.Artifact{ID: "a", Parts: []taskplane.Part{taskplane.TextPart("late")}}},
			taskplane.AddMessage{Message: textMsg("late", "late")},
		}
		for _, c := range changes {
			if _, err := p.Apply(context.Background(), "alice", id, taskplane.AnyVersion, c); !errors.Is(err, taskplane.ErrTaskTerminal) {
				t.Fatalf("%T: err = %v", c, err)
			}
		}
		if _, _, err := p.Cancel(context.Background(), "alice", id, nil); !errors.Is(err, taskplane.ErrTaskNotCancelable) {
			t.Fatalf("cancel: %v", err)
		}
		_, err = p.Accept(context.Background(), taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "a2", TaskID: id, Message: textMsg("a2", "more")})
		if !errors.Is(err, taskplane.ErrTaskTerminal) {
			t.Fatalf("message to terminal: %v", err)
		}
		cur, _ := p.GetTask(context.Background(), "alice", id)
		if cur.Version != done.Version || cur.LastSeq != done.LastSeq || len(cur.Artifacts) != 0 {
			t.Fatalf("terminal task changed: v%d seq%d", cur.Version, cur.LastSeq)
		}
	})
}

func TestTransitionTableRefusesIllegalMoves(t *testing.T) {
	for _, from := range taskplane.States {
		for _, to := range taskplane.States {
			got := taskplane.CanTransition(from, to)
			if from.Terminal() && got {
				t.Errorf("%s -> %s allowed from a terminal state", from, to)
			}
			if !from.Terminal() && to.Terminal() && !got {
				t.Errorf("%s -> %s refused", from, to)
			}
		}
	}
	if taskplane.CanTransition(taskplane.StateWorking, taskplane.StateSubmitted) {
		t.Error("working -> submitted allowed")
	}
	if taskplane.StateInputRequired.Terminal() || taskplane.StateAuthRequired.Terminal() {
		t.Error("interrupted states are terminal")
	}
}

func TestStaleVersionIsRefused(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		acc := mustAccept(t, p, nativeEvent("alice", "ev-1", "c", "x"))
		v := acc.Task.Version
		if _, err := p.Apply(context.Background(), "alice", acc.Task.ID, v, taskplane.SetStatus{State: taskplane.StateWorking}); err != nil {
			t.Fatal(err)
		}
		_, err := p.Apply(context.Background(), "alice", acc.Task.ID, v, taskplane.SetStatus{State: taskplane.StateCompleted})
		if !errors.Is(err, taskplane.ErrConcurrentModification) {
			t.Fatalf("err = %v", err)
		}
		cur, _ := p.GetTask(context.Background(), "alice", acc.Task.ID)
		if cur.Status.State != taskplane.StateWorking {
			t.Fatalf("state = %s", cur.Status.State)
		}
	})
}

func TestEventLogResumesAfterNWithNothingLostOrRepeated(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		acc := mustAccept(t, p, nativeEvent("alice", "ev-1", "c", "x"))
		id := acc.Task.ID
		const writers, each = 4, 10
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					art := taskplane.Artifact{ID: fmt.Sprintf("w%d", w), Parts: []taskplane.Part{taskplane.TextPart(fmt.Sprint(i))}}
					if _, err := p.Apply(context.Background(), "alice", id, taskplane.AnyVersion, taskplane.AddArtifact{Artifact: art, Append: i > 0}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		// A follower started mid-way from N=1 must see every later event exactly once, in order.
		got := make(chan []int64, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		go func() {
			var seqs []int64
			err := p.Follow(ctx, "alice", id, 1, func(ev taskplane.TaskEvent) error {
				seqs = append(seqs, ev.Seq)
				if ev.Seq == 1+writers*each {
					return taskplane.ErrStopFollowing
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			got <- seqs
		}()
		wg.Wait()
		seqs := <-got
		if len(seqs) != writers*each {
			t.Fatalf("followed %d events, want %d", len(seqs), writers*each)
		}
		for i, s := range seqs {
			if s != int64(i+2) {
				t.Fatalf("event %d has seq %d", i, s)
			}
		}
		// Resuming after any N gives exactly the rest.
		for _, n := range []int64{0, 7, 40, 41} {
			evs, err := p.Events(context.Background(), "alice", id, n, 0)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(evs)) != 41-n || (len(evs) > 0 && evs[0].Seq != n+1) {
				t.Fatalf("after %d: %d events", n, len(evs))
			}
		}
		task, _ := p.GetTask(context.Background(), "alice", id)
		if len(task.Artifacts) != writers || len(task.Artifacts[0].Parts) != each {
			t.Fatalf("artifacts: %d", len(task.Artifacts))
		}
	})
}

func TestCheckpointAdvancesWithAcceptanceAndHoldsOnFailure(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		ev := nativeEvent("alice", "ev-1", "c", "x")
		ev.Checkpoint = &taskplane.Checkpoint{Instance: "box", Position: []byte("uid:10"), Seq: 10}
		mustAccept(t, p, ev)
		// A refused acceptance (conflict) leaves the checkpoint where it was.
		bad := nativeEvent("alice", "ev-1", "c", "changed")
		bad.Checkpoint = &taskplane.Checkpoint{Instance: "box", Position: []byte("uid:11"), Seq: 11}
		if _, err := p.Accept(ctx, bad); err == nil {
			t.Fatal("conflict accepted")
		}
		// An older position never moves it back.
		old := nativeEvent("alice", "ev-0", "c", "y")
		old.Checkpoint = &taskplane.Checkpoint{Instance: "box", Position: []byte("uid:5"), Seq: 5}
		mustAccept(t, p, old)
		// Another instance of the source keeps a position of its own.
		other := nativeEvent("alice", "ev-9", "c", "z")
		other.Checkpoint = &taskplane.Checkpoint{Instance: "other", Position: []byte("uid:3"), Seq: 3}
		mustAccept(t, p, other)
		// A position that names no instance could be anyone's: the event is refused.
		unnamed := nativeEvent("alice", "ev-8", "c", "w")
		unnamed.Checkpoint = &taskplane.Checkpoint{Position: []byte("uid:12"), Seq: 12}
		if _, err := p.Accept(ctx, unnamed); !errors.Is(err, taskplane.ErrInvalid) {
			t.Fatalf("event with a checkpoint of no instance: %v, want ErrInvalid", err)
		}
		for instance, want := range map[string]string{"box": "uid:10", "other": "uid:3"} {
			cp, err := p.Store().GetCheckpoint(ctx, "alice", "webhook", instance)
			if err != nil {
				t.Fatal(err)
			}
			if string(cp.Position) != want || cp.Instance != instance {
				t.Fatalf("checkpoint of %s = %s %s/%d, want %s", instance, cp.Instance, cp.Position, cp.Seq, want)
			}
		}
	})
}

// RunRetention prunes continuously, not once: a task that becomes old while it runs is pruned
// by a later pass, and a live task stays through every pass.
func TestRunRetentionPrunesContinuously(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		var mu sync.Mutex
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
		p := taskplane.New(open(t), taskplane.WithClock(clock), taskplane.WithRetention(time.Hour))
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() { p.RunRetention(ctx, 5*time.Millisecond); close(stopped) }()
		defer func() { cancel(); <-stopped }()

		live := mustAccept(t, p, nativeEvent("alice", "ev-live", "c-live", "x"))
		ask(t, p, "alice", live.Task.ID, taskplane.StateInputRequired)
		for i, id := range []string{"ev-1", "ev-2"} {
			acc := mustAccept(t, p, nativeEvent("alice", id, "c-"+id, "y"))
			if _, err := p.Apply(context.Background(), "alice", acc.Task.ID, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateCompleted}); err != nil {
				t.Fatal(err)
			}
			retireSettledWakes(t, p)
			advance(2 * time.Hour)
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, err := p.GetTask(context.Background(), "alice", acc.Task.ID)
				if errors.Is(err, taskplane.ErrTaskNotFound) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("pass %d: task %s still there 10 s after it aged out (%v)", i+1, acc.Task.ID, err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		if _, err := p.GetTask(context.Background(), "alice", live.Task.ID); err != nil {
			t.Fatalf("the waiting task did not survive the passes: %v", err)
		}
	})
}

// A pass that deletes only old evidence (or settled deliveries) says so in a retention record,
// as a pass that deletes tasks does.
func TestAPassThatPrunesOnlyEvidenceRecordsIt(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		var mu sync.Mutex
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		p := taskplane.New(open(t), taskplane.WithClock(clock), taskplane.WithRetention(time.Hour))
		mustAccept(t, p, nativeEvent("alice", "ev-live", "c-live", "x")) // live: its task stays
		mu.Lock()
		now = now.Add(2 * time.Hour)
		mu.Unlock()
		r, err := p.Prune(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if r.Tasks != 0 || r.Evidence == 0 {
			t.Fatalf("pass deleted %d tasks and %d evidence records, want 0 and some", r.Tasks, r.Evidence)
		}
		evs, err := p.Store().ListEvidence(context.Background(), store.EvidenceFilter{Kind: taskplane.EvidenceRetention})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 {
			t.Fatalf("%d retention records, want 1", len(evs))
		}
		var d struct{ Evidence, Deliveries int }
		if err := json.Unmarshal(evs[0].Detail, &d); err != nil || d.Evidence != r.Evidence || d.Deliveries != 0 {
			t.Fatalf("retention record %s (%v), want evidence %d", evs[0].Detail, err, r.Evidence)
		}
	})
}

// With no setting, retention is the documented 30 days (DESIGN.md §4, invariant 3): a terminal
// task is kept 29 days after its last event and pruned after 31.
func TestRetentionKeepsLiveStateAndReacceptsAPrunedIdentity(t *testing.T) {
	if taskplane.DefaultRetention != 30*24*time.Hour {
		t.Fatalf("DefaultRetention = %s, want 30 days", taskplane.DefaultRetention)
	}
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		var mu sync.Mutex
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
		p := taskplane.New(s, taskplane.WithClock(clock)) // the default window

		done := mustAccept(t, p, nativeEvent("alice", "ev-done", "c-done", "x"))
		if _, err := p.Apply(context.Background(), "alice", done.Task.ID, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateCompleted}); err != nil {
			t.Fatal(err)
		}
		live := mustAccept(t, p, nativeEvent("alice", "ev-live", "c-live", "y"))
		ask(t, p, "alice", live.Task.ID, taskplane.StateInputRequired)
		advance(29 * 24 * time.Hour)
		if r, err := p.Prune(context.Background()); err != nil || r.Tasks != 0 {
			t.Fatalf("pruned %+v (%v) after 29 days, want nothing: the window is 30 days", r, err)
		}
		if _, err := p.GetTask(context.Background(), "alice", done.Task.ID); err != nil {
			t.Fatalf("terminal task dropped after 29 days: %v", err)
		}
		advance(2 * 24 * time.Hour)
		recent := mustAccept(t, p, nativeEvent("alice", "ev-recent", "c-recent", "z"))
		if _, err := p.Apply(context.Background(), "alice", recent.Task.ID, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateCompleted}); err != nil {
			t.Fatal(err)
		}

		retireSettledWakes(t, p)
		r, err := p.Prune(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if r.Tasks != 1 {
			t.Fatalf("pruned %+v, want exactly the old terminal task", r)
		}
		if _, err := p.GetTask(context.Background(), "alice", done.Task.ID); !errors.Is(err, taskplane.ErrTaskNotFound) {
			t.Fatalf("old terminal task kept: %v", err)
		}
		for _, id := range []string{live.Task.ID, recent.Task.ID} {
			if _, err := p.GetTask(context.Background(), "alice", id); err != nil {
				t.Fatalf("live or recent task %s dropped: %v", id, err)
			}
		}
		if _, err := s.GetContext(context.Background(), "alice", live.ContextID); err != nil {
			t.Fatalf("live context dropped: %v", err)
		}
		// The live task's claim is kept: its redelivery is still a duplicate.
		if acc := mustAccept(t, p, nativeEvent("alice", "ev-live", "c-live", "y")); acc.Outcome != taskplane.Duplicate {
			t.Fatalf("live redelivery: %s", acc.Outcome)
		}
		// Evidence ages out on the same window: the first month's records went, the recent stayed.
		evs, err := s.ListEvidence(context.Background(), store.EvidenceFilter{Principal: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Evidence == 0 || len(evs) == 0 {
			t.Fatalf("pruned %d evidence records, %d left", r.Evidence, len(evs))
		}
		for _, e := range evs {
			if e.CreatedAt.Before(clock().Add(-30 * 24 * time.Hour)) {
				t.Fatalf("evidence older than the window kept: %+v", e)
			}
		}
		// The pruned identity is new work again.
		again := mustAccept(t, p, nativeEvent("alice", "ev-done", "c-done", "x"))
		if again.Outcome != taskplane.Created || again.Task.ID == done.Task.ID {
			t.Fatalf("re-accept: %+v", again)
		}
	})
}

// A claim can outlive its pruned task (one an older build left behind: retention now deletes a
// task's claims with it). A redelivery of its identity is then new work, not an error: the claim
// is replaced.
func TestAClaimThatOutlivedItsPrunedTaskIsNewWork(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := context.Background()
		s := open(t)
		var mu sync.Mutex
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		p := taskplane.New(s, taskplane.WithClock(clock), taskplane.WithRetention(30*24*time.Hour))

		// One task with two claims: its first event, and a reply that continued it.
		task := anchored(t, p, taskplane.StateInputRequired)
		reply := nativeEvent("alice", "ev-2", "thread-1", "the blue one")
		reply.ReplyTo = "q-1"
		if acc := mustAccept(t, p, reply); acc.Outcome != taskplane.Continued {
			t.Fatalf("reply: %s", acc.Outcome)
		}
		if _, err := p.Apply(ctx, "alice", task.ID, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateCompleted}); err != nil {
			t.Fatal(err)
		}
		retireSettledWakes(t, p)
		mu.Lock()
		now = now.Add(31 * 24 * time.Hour)
		mu.Unlock()
		// A pass bounded to one row of each kind: the task goes with one of its claims.
		var r store.PruneResult
		if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			r, err = tx.Prune(ctx, clock().Add(-30*24*time.Hour), taskplane.TerminalStates(), 1)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		// Both stores delete a task's claims with it. A claim left naming the pruned task (one an
		// older build left behind) must read as new work: put ev-2's back.
		if r.Tasks != 1 || r.Claims != 2 {
			t.Fatalf("pruned %+v, want the task and both its claims", r)
		}
		if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			_, _, err := tx.InsertClaim(ctx, store.Claim{Principal: "alice", Source: "webhook", Identity: "ev-2",
				Digest: "d", State: store.ClaimDone, OutcomeKind: "task", TaskID: task.ID, ContextID: task.ContextID,
				CreatedAt: clock(), UpdatedAt: clock()})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		mustAccept(t, p, nativeEvent("alice", "ev-3", "thread-1", "anyone there?"))
		// Both identities are new work: the one whose claim went, and the one whose claim stayed.
		// Claimed, which the A2A bindings ask before a DirectResponder, agrees; a live claim is one.
		for id, want := range map[string]bool{"ev-1": false, "ev-2": false, "ev-3": true} {
			if got, err := p.Claimed(ctx, nativeEvent("alice", id, "thread-1", "x")); err != nil || got != want {
				t.Errorf("Claimed(%s) = %v, %v; want %v", id, got, err, want)
			}
		}
		for _, ev := range []taskplane.Event{nativeEvent("alice", "ev-1", "thread-1", "start"), reply} {
			acc, err := p.Accept(ctx, ev)
			if err != nil {
				t.Fatalf("redelivery of %s: %v", ev.Identity, err)
			}
			if acc.Outcome != taskplane.Created || acc.Task.ID == task.ID {
				t.Fatalf("redelivery of %s: %+v, want a new task", ev.Identity, acc)
			}
			// And its claim now names the new task: the next redelivery is a duplicate of it.
			if again := mustAccept(t, p, ev); again.Outcome != taskplane.Duplicate || again.Task.ID != acc.Task.ID {
				t.Fatalf("second redelivery of %s: %+v", ev.Identity, again)
			}
		}
	})
}

// failingStore wraps a real store and makes one Tx method fail, to prove a store failure in the
// middle of Accept leaves nothing behind.
type failingStore struct {
	store.Store
	failWake bool
}

type failingTx struct {
	store.Tx
	s *failingStore
}

var errInjected = errors.New("injected store failure")

func (f *failingStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	return f.Store.Update(ctx, func(ctx context.Context, tx store.Tx) error { return fn(ctx, failingTx{tx, f}) })
}

func (t failingTx) InsertWake(ctx context.Context, w store.Wake) error {
	if t.s.failWake {
		return errInjected
	}
	return t.Tx.InsertWake(ctx, w)
}

func TestStoreFailureReturnsAnErrorAndRecordsNoOutcome(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		fs := &failingStore{Store: open(t), failWake: true}
		p := taskplane.New(fs)
		ev := nativeEvent("alice", "ev-1", "c", "x")
		ev.Checkpoint = &taskplane.Checkpoint{Instance: "box", Position: []byte("p1"), Seq: 1}
		if _, err := p.Accept(context.Background(), ev); !errors.Is(err, errInjected) {
			t.Fatalf("err = %v", err)
		}
		if _, err := fs.GetClaim(context.Background(), "alice", "webhook", "ev-1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("claim recorded: %v", err)
		}
		if n := countTasks(t, p, "alice"); n != 0 {
			t.Fatalf("tasks = %d", n)
		}
		if ev, _ := fs.ListEvidence(context.Background(), store.EvidenceFilter{Principal: "alice"}); len(ev) != 0 {
			t.Fatalf("evidence: %+v", ev)
		}
		if _, err := fs.GetCheckpoint(context.Background(), "alice", "webhook", "box"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("checkpoint advanced: %v", err)
		}
		// The provider redelivers; with the store healthy again it is accepted as new work.
		fs.failWake = false
		if acc := mustAccept(t, p, ev); acc.Outcome != taskplane.Created {
			t.Fatalf("redelivery: %s", acc.Outcome)
		}
	})
}

func TestAcceptRefusesMalformedEvents(t *testing.T) {
	p := taskplane.New(storetest.OpenSQLite(t))
	good := nativeEvent("alice", "ev", "c", "x")
	cases := map[string]func(*taskplane.Event){
		"no principal": func(e *taskplane.Event) { e.Principal = "" },
		"no source":    func(e *taskplane.Event) { e.Source = "" },
		"no identity":  func(e *taskplane.Event) { e.Identity = "" },
		"no parts":     func(e *taskplane.Event) { e.Message.Parts = nil },
		"agent role":   func(e *taskplane.Event) { e.Message.Role = taskplane.RoleAgent },
	}
	for name, mut := range cases {
		ev := good
		mut(&ev)
		if _, err := p.Accept(context.Background(), ev); !errors.Is(err, taskplane.ErrInvalid) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// Invariant 5: the metadata an executor keeps its own state under is the server's to write. A
// caller's event that carries it — here the a2a executor's link to a downstream task, which would
// have the executor follow, continue and cancel another principal's task at the agent — is refused
// and persists nothing.
func TestAnEventCannotSetMetadataTheServerWrites(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		for _, key := range []string{taskplane.MetaRemoteAgent, taskplane.MetaReason} {
			ev := nativeEvent("mallory", "ev-"+key, "c", "x")
			ev.Metadata = map[string]any{key: map[string]any{"taskId": "someone-elses-downstream-task", "sent": ev.Message.ID}}
			if _, err := p.Accept(ctx, ev); !errors.Is(err, taskplane.ErrInvalid) || !strings.Contains(err.Error(), key) {
				t.Fatalf("an event setting %s: %v; want ErrInvalid naming the key", key, err)
			}
		}
		page, err := p.ListTasks(ctx, "mallory", taskplane.ListQuery{})
		if err != nil || len(page.Tasks) != 0 {
			t.Fatalf("refused events left tasks: %v, %v", page.Tasks, err)
		}
	})
}

// A retention pass goes on while any kind filled its batch, not only tasks: 600 old claims of no
// task (direct Messages; more than one batch of 500) all go in one pass.
func TestARetentionPassGoesOnWhileClaimsFillABatch(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		old := time.Now().Add(-60 * 24 * time.Hour)
		if err := p.Store().Update(ctx, func(ctx context.Context, tx store.Tx) error {
			for i := range 600 {
				if _, _, err := tx.InsertClaim(ctx, store.Claim{Principal: "alice", Source: "webhook",
					Identity: fmt.Sprintf("ev-%d", i), Digest: "d", State: store.ClaimDone, OutcomeKind: "message",
					Message: []byte(`{"messageId":"r"}`), CreatedAt: old, UpdatedAt: old}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		r, err := p.Prune(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Claims != 600 {
			t.Fatalf("one retention pass pruned %d of the 600 old claims", r.Claims)
		}
	})
}

// A plane without a clock of its own takes its store's (store.Clock): on a shared Postgres that
// is the database's, so the wake leases it writes mean one instant to every process.
func TestPlaneWithoutAClockTakesTheStores(t *testing.T) {
	ahead := time.Now().Add(time.Hour)
	p := taskplane.New(storetest.Clocked{Store: storetest.OpenSQLite(t), Clock: func() time.Time { return ahead }})
	acc := mustAccept(t, p, nativeEvent("alice", "ev-1", "c1", "hello"))
	if want := ahead.UTC().Truncate(time.Microsecond); !acc.Task.Status.Timestamp.Equal(want) {
		t.Errorf("accepted at %v, want the store's time %v", acc.Task.Status.Timestamp, want)
	}
}

// An empty file (a raw part of no bytes) is stored and read back as a file, not as empty text.
func TestAnEmptyFilePartStaysAFile(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ev := nativeEvent("alice", "ev-1", "c1", "")
		ev.Message.Parts = []taskplane.Part{{Raw: []byte{}, MediaType: "text/plain", Filename: "empty.txt"}}
		acc := mustAccept(t, p, ev)
		got, err := p.GetTask(context.Background(), "alice", acc.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if part := got.History[0].Parts[0]; part.Raw == nil || len(part.Raw) != 0 || part.Filename != "empty.txt" {
			t.Errorf("stored part = %+v, want an empty file", part)
		}
	})
}

// An event's Metadata is payload: it becomes the task's metadata and settlements read their
// links from it, so a retry under the same identity with other Metadata is a conflict, not a
// silent replay of the first.
func TestDifferentMetadataUnderTheSameIdentityConflicts(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ev := taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "m-1", Message: textMsg("m-1", "hello"),
			Metadata: map[string]any{"k": "v1"}}
		first := mustAccept(t, p, ev)
		if again := mustAccept(t, p, ev); again.Outcome != taskplane.Duplicate || again.Task.ID != first.Task.ID {
			t.Fatalf("the same event again: %s %s", again.Outcome, again.Task.ID)
		}
		ev.Metadata = map[string]any{"k": "v2"}
		if _, err := p.Accept(context.Background(), ev); !errors.Is(err, taskplane.ErrDuplicateConflict) {
			t.Fatalf("other metadata under the same identity: err = %v, want a conflict", err)
		}
		// Metadata added, or taken away, on a retry is another payload too.
		bare := taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "m-2", Message: textMsg("m-2", "hello")}
		mustAccept(t, p, bare)
		bare.Metadata = map[string]any{"k": "v"}
		if _, err := p.Accept(context.Background(), bare); !errors.Is(err, taskplane.ErrDuplicateConflict) {
			t.Fatalf("metadata added on a retry: err = %v, want a conflict", err)
		}
		ev.Metadata = nil
		if _, err := p.Accept(context.Background(), ev); !errors.Is(err, taskplane.ErrDuplicateConflict) {
			t.Fatalf("metadata dropped on a retry: err = %v, want a conflict", err)
		}
	})
}

// A continuation's metadata is not stored, so a client that echoes its task's metadata there —
// the a2a executor's link included — is not refused, and the link it echoes changes nothing.
func TestAContinuationEchoingItsTasksMetadataIsAccepted(t *testing.T) {
	p := taskplane.New(storetest.OpenSQLite(t))
	ctx := context.Background()
	acc, err := p.Accept(ctx, a2aEvent("m-1", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	ev := a2aEvent("m-2", "more")
	ev.TaskID = acc.Task.ID
	ev.Metadata = map[string]any{taskplane.MetaRemoteAgent: map[string]any{"taskId": "someone-elses"}}
	if _, err := p.Accept(ctx, ev); err != nil {
		t.Fatalf("a continuation echoing its task's metadata: %v", err)
	}
	task, err := p.GetTask(ctx, "alice", acc.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := task.Metadata[taskplane.MetaRemoteAgent]; ok {
		t.Fatalf("the echoed link was stored: %v", task.Metadata)
	}
}

// retireSettledWakes claims every due wake, as a dispatcher would: the wake of a task finished
// outside any turn (here by Apply) is retired on its claim. Retention keeps a finished task while a
// wake of it is pending. It fails the test if a task still needs a turn.
func retireSettledWakes(t *testing.T, p *taskplane.Plane) {
	t.Helper()
	for range 100 {
		g, err := p.ClaimTurn(context.Background(), taskplane.ClaimRequest{Owner: "retirer", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if g == nil {
			return
		}
		t.Fatalf("task %s still needs a turn", g.TaskID)
	}
}
