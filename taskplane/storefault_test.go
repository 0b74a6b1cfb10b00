package taskplane_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

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
		runDispatcher(t, p, exec, 1)
		task := finished(t, p, mustAccept(t, p, a2aEvent("m1", "hello")).Task.ID)
		if task.Status.State != taskplane.StateCompleted || runs.Load() != 2 {
			t.Fatalf("task %s (%q) after %d runs; want completed on the second, not failed by the store's blip", task.Status.State, statusText(task), runs.Load())
		}
		if strings.Contains(statusText(task), "SQLSTATE") {
			t.Errorf("the status message carries the store's error: %q", statusText(task))
		}
	})
}

// finished waits for task id (of alice) to reach a terminal state and returns it.
func finished(t *testing.T, p *taskplane.Plane, id string) *taskplane.Task {
	t.Helper()
	var task *taskplane.Task
	waitFor(t, "task "+id+" to finish", func() bool {
		var err error
		task, err = p.GetTask(context.Background(), "alice", id)
		return err == nil && task.Status.State.Terminal()
	})
	return task
}

// statusText is the text of the first part of task's status message, or "".
func statusText(task *taskplane.Task) string {
	if m := task.Status.Message; m != nil && len(m.Parts) > 0 {
		return m.Parts[0].Text
	}
	return ""
}
