package command_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/executor/command"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

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
	blip := storetest.NewBlip(t, storetest.OpenSQLite(t), "(*Turn).RecordOutput")
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
