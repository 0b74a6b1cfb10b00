package taskplane_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// countingStore counts the task reads made through it (a real store underneath).
type countingStore struct {
	store.Store
	gets atomic.Int64
}

func (s *countingStore) GetTask(ctx context.Context, principal, id string) (store.Task, error) {
	defer s.gets.Add(1)
	return s.Store.GetTask(ctx, principal, id)
}

func settledTask(t *taskplane.Task) bool {
	return t.Status.State.Terminal() || t.Status.State == taskplane.StateInputRequired
}

// waitTask runs WaitTask in the background once the store has been read n times before it, and
// returns its outcome's channel after its first read.
func waitTask(t *testing.T, ctx context.Context, p *taskplane.Plane, s *countingStore, task *taskplane.Task) <-chan waitOutcome {
	t.Helper()
	before := s.gets.Load()
	out := make(chan waitOutcome, 1)
	go func() {
		nt, err := p.WaitTask(ctx, task, settledTask)
		out <- waitOutcome{nt, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.gets.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("WaitTask made no first read")
		}
		time.Sleep(time.Millisecond)
	}
	return out
}

type waitOutcome struct {
	task *taskplane.Task
	err  error
}

// waitSettledInBackground starts WaitTask(ctx, t, settledTask) and returns its outcome's channel
// once the wait is registered, so that rows handed from then on reach it.
func waitSettledInBackground(ctx context.Context, p *taskplane.Plane, t *taskplane.Task) <-chan waitOutcome {
	out := make(chan waitOutcome, 1)
	go func() {
		nt, err := p.WaitTask(ctx, t, settledTask)
		out <- waitOutcome{nt, err}
	}()
	for !p.Waiting(t.Origin.Principal, t.ID) {
		time.Sleep(time.Millisecond)
	}
	return out
}

// A blocking send's wait gets the version a turn of this process commits as the turn committed it,
// with no read of the store after its first.
func TestAWaitIsHandedTheVersionATurnCommitsWithoutReadingIt(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := &countingStore{Store: open(t)}
		p := taskplane.New(s)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		acc := mustAccept(t, p, a2aEvent("m-1", "hello"))
		g := claimAs(t, p, "worker")
		turn, err := p.ResumeTurn(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		out := waitTask(t, ctx, p, s, acc.Task)
		reads := s.gets.Load()
		reply := taskplane.Message{ID: "r-1", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("hi")}}
		if err := turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted, Message: &reply}); err != nil {
			t.Fatal(err)
		}
		got := <-out
		if got.err != nil {
			t.Fatal(got.err)
		}
		if got.task.Status.State != taskplane.StateCompleted || got.task.Status.Message == nil || got.task.Status.Message.ID != "r-1" {
			t.Fatalf("WaitTask = %s %+v; want the completed task with the reply", got.task.Status.State, got.task.Status.Message)
		}
		if n := s.gets.Load() - reads; n != 0 {
			t.Errorf("WaitTask read the task %d times after the turn's commit; want it handed over", n)
		}
		stored, err := p.GetTask(ctx, "alice", acc.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.task.LastSeq != stored.LastSeq || got.task.Version != stored.Version {
			t.Errorf("WaitTask's task is at seq %d version %d; the store's at %d, %d", got.task.LastSeq, got.task.Version, stored.LastSeq, stored.Version)
		}
	})
}

// A change announced without its row (a cancel) is read; a wait whose context ends first returns
// the context's error.
func TestAWaitReadsAChangeAnnouncedWithoutItsRow(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := &countingStore{Store: open(t)}
		p := taskplane.New(s)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		acc := mustAccept(t, p, a2aEvent("m-1", "hello"))

		short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancelShort()
		if _, err := p.WaitTask(short, acc.Task, settledTask); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitTask past its context = %v, want DeadlineExceeded", err)
		}

		out := waitTask(t, ctx, p, s, acc.Task)
		if _, _, err := p.Cancel(ctx, "alice", acc.Task.ID, nil); err != nil {
			t.Fatal(err)
		}
		got := <-out
		if got.err != nil {
			t.Fatal(got.err)
		}
		if got.task.Status.State != taskplane.StateCanceled {
			t.Fatalf("WaitTask = %s, want CANCELED", got.task.Status.State)
		}
	})
}

// Two versions handed over before the wait wakes, the first settled (a question) and the second
// not (a follow-up moved the task on): the wait returns the settled one, whatever order they were
// handed in.
func TestAWaitReturnsASettledVersionALaterCommitMovedOnFrom(t *testing.T) {
	p := taskplane.New(storetest.OpenSQLite(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	acc := mustAccept(t, p, a2aEvent("m-1", "hello"))
	for _, order := range []string{"in order", "out of order"} {
		out := waitSettledInBackground(ctx, p, acc.Task)
		asked, movedOn := *acc.Task, *acc.Task
		asked.Status.State, asked.LastSeq, asked.Version = taskplane.StateInputRequired, acc.Task.LastSeq+1, acc.Task.Version+1
		movedOn.Status.State, movedOn.LastSeq, movedOn.Version = taskplane.StateWorking, acc.Task.LastSeq+2, acc.Task.Version+2
		rows := []*taskplane.Task{&asked, &movedOn}
		if order == "out of order" {
			rows = []*taskplane.Task{&movedOn, &asked}
		}
		if err := p.HandRows(rows...); err != nil {
			t.Fatal(err)
		}
		got := <-out
		if got.err != nil {
			t.Fatalf("%s: %v", order, got.err)
		}
		if got.task.Status.State != taskplane.StateInputRequired || got.task.LastSeq != asked.LastSeq {
			t.Errorf("%s: WaitTask = %s at seq %d, want the INPUT_REQUIRED version (seq %d)", order, got.task.Status.State, got.task.LastSeq, asked.LastSeq)
		}
	}
}

// More versions handed over before the wait wakes than a waiter keeps: a turn's many updates (an
// artifact streamed in chunks), then its question, then a follow-up's move on. The wait still
// returns the question, not the task as it is when it reads.
func TestAWaitReturnsASettledVersionHandedAfterManyOthers(t *testing.T) {
	p := taskplane.New(storetest.OpenSQLite(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	acc := mustAccept(t, p, a2aEvent("m-1", "hello"))
	out := waitSettledInBackground(ctx, p, acc.Task)
	version := func(n int64, state taskplane.State) *taskplane.Task {
		v := *acc.Task
		v.Status.State, v.LastSeq, v.Version = state, acc.Task.LastSeq+n, acc.Task.Version+n
		return &v
	}
	var rows []*taskplane.Task
	for n := int64(1); n <= 40; n++ {
		rows = append(rows, version(n, taskplane.StateWorking))
	}
	asked := version(41, taskplane.StateInputRequired)
	rows = append(rows, asked, version(42, taskplane.StateWorking))
	if err := p.HandRows(rows...); err != nil {
		t.Fatal(err)
	}
	got := <-out
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.task.Status.State != taskplane.StateInputRequired || got.task.LastSeq != asked.LastSeq {
		t.Errorf("WaitTask = %s at seq %d, want the INPUT_REQUIRED version (seq %d)", got.task.Status.State, got.task.LastSeq, asked.LastSeq)
	}
}
