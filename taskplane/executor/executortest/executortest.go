// Package executortest runs an executor for real in tests: a Plane over a fresh SQLite store, a
// Dispatcher feeding it, and helpers that send an event and collect the task's events until the
// executor has settled it (terminal or interrupted).
//
//	h := executortest.New(t, echo.New())
//	acc := h.Send(t, executortest.UserEvent("m-1", "hello"))
//	evs := h.Settle(t, acc.Task.ID, 0)
package executortest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	_ "github.com/channels-dev/channels/taskplane/store/sqlite" // the store the harness runs on
)

// Principal owns every event UserEvent builds.
const Principal = "tester"

// Harness is a running Plane and Dispatcher over a temporary SQLite store.
type Harness struct {
	Plane      *taskplane.Plane
	Dispatcher *taskplane.Dispatcher
	Store      store.Store

	stop func()
}

// New opens a store in t.TempDir(), starts a Dispatcher running exec, and stops both when the
// test ends.
func New(t testing.TB, exec taskplane.Executor) *Harness {
	t.Helper()
	s, err := store.Open(context.Background(), "sqlite://"+t.TempDir()+"/channels.db")
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	h := &Harness{Plane: taskplane.New(s), Store: s}
	h.StartDispatcher(t, exec)
	t.Cleanup(func() {
		h.StopDispatcher()
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return h
}

// StartDispatcher starts a new Dispatcher running exec (after StopDispatcher, it plays a restart).
func (h *Harness) StartDispatcher(t testing.TB, exec taskplane.Executor) {
	h.StopDispatcher()
	d := &taskplane.Dispatcher{Plane: h.Plane, Executor: exec, Concurrency: 4, Poll: 50 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := d.Run(ctx); err != nil {
			t.Errorf("dispatcher: %v", err)
		}
	}()
	h.Dispatcher = d
	h.stop = func() { cancel(); wg.Wait() }
}

// StopDispatcher stops the Dispatcher as a shutdown does and waits for its running turns.
func (h *Harness) StopDispatcher() {
	if h.stop != nil {
		h.stop()
		h.stop = nil
	}
}

// UserEvent is an A2A event of Principal carrying one user text message with the given messageId.
func UserEvent(messageID, text string) taskplane.Event {
	return taskplane.Event{
		Principal: Principal,
		Source:    taskplane.SourceA2A,
		Identity:  messageID,
		Message: taskplane.Message{ID: messageID, Role: taskplane.RoleUser,
			Parts: []taskplane.Part{taskplane.TextPart(text)}},
	}
}

// Send accepts ev and fails the test on error.
func (h *Harness) Send(t testing.TB, ev taskplane.Event) taskplane.Acceptance {
	t.Helper()
	acc, err := h.Plane.Accept(context.Background(), ev)
	if err != nil {
		t.Fatalf("accept %s: %v", ev.Identity, err)
	}
	return acc
}

// Settle follows the task's events after sequence after until a status event puts it in a terminal
// or interrupted state, and returns every event seen. It fails the test after 20 seconds.
func (h *Harness) Settle(t testing.TB, taskID string, after int64) []taskplane.TaskEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var evs []taskplane.TaskEvent
	err := h.Plane.Follow(ctx, Principal, taskID, after, func(ev taskplane.TaskEvent) error {
		evs = append(evs, ev)
		if ev.Kind == taskplane.EventStatus && (ev.Status.Status.State.Terminal() || ev.Status.Status.State.Interrupted()) {
			return taskplane.ErrStopFollowing
		}
		return nil
	})
	if err != nil {
		t.Fatalf("follow task %s: %v (saw %d events)", taskID, err, len(evs))
	}
	return evs
}

// Task reads the task and fails the test on error.
func (h *Harness) Task(t testing.TB, taskID string) *taskplane.Task {
	t.Helper()
	task, err := h.Plane.GetTask(context.Background(), Principal, taskID)
	if err != nil {
		t.Fatalf("get task %s: %v", taskID, err)
	}
	return task
}

// Step is an event reduced to what tests compare: its kind and, for a status, the state.
func Step(ev taskplane.TaskEvent) string {
	if ev.Kind == taskplane.EventStatus {
		return "status:" + string(ev.Status.Status.State)
	}
	return ev.Kind
}

// Steps maps Step over evs.
func Steps(evs []taskplane.TaskEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = Step(ev)
	}
	return out
}
