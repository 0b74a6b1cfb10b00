package taskplane_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// blipStore fails the next Update once armed, as a pooled connection killed by a database
// restart (or pg_terminate_backend) does; the Update after it gets a fresh connection and works.
type blipStore struct {
	store.Store
	armed atomic.Bool
}

func (s *blipStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	if s.armed.CompareAndSwap(true, false) {
		return errors.New("begin: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")
	}
	return s.Store.Update(ctx, fn)
}

// TestAStoreFailureDuringATurnOffersItAgainInsteadOfFailingTheTask: the store failing the write
// of an agent's completion is no failure of the agent: the task is not failed with the store's
// error (which its client would read), the turn is offered again and completes the task.
func TestAStoreFailureDuringATurnOffersItAgainInsteadOfFailingTheTask(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		bs := &blipStore{Store: open(t)}
		p := taskplane.New(bs)
		var runs atomic.Int32
		exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
			if runs.Add(1) == 1 {
				bs.armed.Store(true) // the store goes away for one transaction: the completion's
			}
			return turn.Complete(ctx, &taskplane.Message{ID: "reply", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("done")}})
		})
		ctx, cancel := context.WithCancel(context.Background())
		d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 1, Poll: 10 * time.Millisecond, Lease: time.Minute}
		done := make(chan struct{})
		go func() { defer close(done); _ = d.Run(ctx) }()
		defer func() { cancel(); <-done }()
		acc, err := p.Accept(ctx, a2aEvent("m1", "hello"))
		if err != nil {
			t.Fatal(err)
		}
		var task *taskplane.Task
		waitFor(t, "the task to finish", func() bool {
			task, err = p.GetTask(ctx, "alice", acc.Task.ID)
			return err == nil && task.Status.State.Terminal()
		})
		if task.Status.State != taskplane.StateCompleted || runs.Load() != 2 {
			var text string
			if m := task.Status.Message; m != nil && len(m.Parts) > 0 {
				text = m.Parts[0].Text
			}
			t.Fatalf("task %s (%q) after %d runs; want completed on the second, not failed by the store's blip", task.Status.State, text, runs.Load())
		}
		if strings.Contains(string(task.Status.Message.Parts[0].Text), "SQLSTATE") {
			t.Errorf("the status message carries the store's error: %q", task.Status.Message.Parts[0].Text)
		}
	})
}
