package taskplane_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// Invariant 7: a turn interrupted by a shutdown is not counted against the re-offer cap, also
// when its executor returns nil as its context ends (leaving the task WORKING) rather than
// ctx.Err(): more graceful restarts than the cap allows offers leave the task unfailed.
func TestAShutdownIsNotAReofferWhenTheExecutorReturnsNil(t *testing.T) {
	p := taskplane.New(storetest.OpenSQLite(t), taskplane.WithReofferDelay(time.Millisecond))
	var started atomic.Int32
	exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		started.Add(1)
		<-ctx.Done()
		return nil // stopped; the task stays WORKING
	})
	acc, err := p.Accept(context.Background(), a2aEvent("m-long", "work"))
	if err != nil {
		t.Fatal(err)
	}
	for i := int32(1); i <= taskplane.MaxReoffers+3; i++ {
		d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 1, Poll: 10 * time.Millisecond, Lease: time.Minute}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = d.Run(ctx) }()
		var task *taskplane.Task
		waitWithin(stopBound, func() bool {
			task, err = p.GetTask(context.Background(), "alice", acc.Task.ID)
			return started.Load() >= i || err != nil || task.Status.State.Terminal()
		})
		cancel()
		<-done
		if task.Status.State.Terminal() {
			t.Fatalf("after %d graceful restarts the task is %s: %v", i-1, task.Status.State, task.Status.Message.Parts[0].Text)
		}
	}
}
