package command_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/executor/command"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// outputBlip fails, once, the first store write made by Turn.RecordOutput, the way a pooled
// connection killed by a database restart does.
type outputBlip struct {
	store.Store
	once  sync.Once
	fired atomic.Bool
}

func (s *outputBlip) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	buf := make([]byte, 1<<16)
	if strings.Contains(string(buf[:runtime.Stack(buf, false)]), "(*Turn).RecordOutput") {
		fire := false
		s.once.Do(func() { fire = true })
		if fire {
			s.fired.Store(true)
			return errors.New("begin: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")
		}
	}
	return s.Store.Update(ctx, fn)
}

// TestAStoreBlipWhileRecordingAnOutputOffersTheTurnAgain (review of a694aad): the exec executor
// wraps RecordOutput's error with %v (command.go apply), so the ErrStore the turn returns is lost:
// the task is failed as "bad output" with the store's error (SQLSTATE …) as its status message,
// instead of the turn being offered again.
// TestAStoreBlipWhileRecordingAnOutputOffersTheTurnAgain: the store failing the write of a
// command's output is not a bad output: the turn is offered again and the task ends as the
// command said, never failed with the store's error.
func TestAStoreBlipWhileRecordingAnOutputOffersTheTurnAgain(t *testing.T) {
	e, err := command.New(command.Config{Command: []string{"sh", "-c",
		`cat >/dev/null; printf '%s' '{"result":"reject","reason":"no","outputs":[{"name":"summary","value":{"words":3}}]}'`},
		Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	blip := &outputBlip{Store: storetest.OpenSQLite(t)}
	t.Cleanup(func() {
		if !blip.fired.Load() {
			t.Error("the store never failed the write the test meant it to: the test proved nothing")
		}
	})
	p := taskplane.New(blip, taskplane.WithReofferDelay(10*time.Millisecond))
	d := &taskplane.Dispatcher{Plane: p, Executor: e, Concurrency: 1, Poll: 10 * time.Millisecond, Lease: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	acc, err := p.Accept(ctx, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "m1",
		Message: taskplane.Message{ID: "m1", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("hi")}}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var task *taskplane.Task
	for {
		task, err = p.GetTask(ctx, "alice", acc.Task.ID)
		if err == nil && task.Status.State.Terminal() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task not finished: %+v %v", task, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if task.Status.State != taskplane.StateRejected || strings.Contains(statusText(task), "SQLSTATE") {
		t.Fatalf("task %s with %q; want REJECTED on the re-offer, not failed with the store's error", task.Status.State, statusText(task))
	}
}
