package taskplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	_ "github.com/channels-dev/channels/taskplane/store/sqlite"
)

// An in-process executor: a Go function that works each task Channels wakes it for. It reads the
// task, records a workflow output and completes with an answer. Library users plug their agent
// in exactly like this; the Dispatcher brings the wake queue's rules (one turn per task,
// re-offers, transport retries) for free.
func Example() {
	dir, _ := os.MkdirTemp("", "channels-example")
	defer os.RemoveAll(dir)
	st, err := store.Open(context.Background(), "sqlite://"+filepath.Join(dir, "channels.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	plane := taskplane.New(st)

	shout := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		last := turn.Task.History[len(turn.Task.History)-1]
		text := strings.ToUpper(last.Parts[0].Text)
		words, _ := json.Marshal(map[string]int{"words": len(strings.Fields(text))})
		if err := turn.RecordOutput(ctx, taskplane.Output{Name: "stats", Value: words}); err != nil {
			return err
		}
		return turn.Complete(ctx, &taskplane.Message{Parts: []taskplane.Part{taskplane.TextPart(text)}})
	})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&taskplane.Dispatcher{Plane: plane, Executor: shout, Concurrency: 4}).Run(ctx)
	}()

	acc, err := plane.Accept(context.Background(), taskplane.Event{
		Principal: "me", Source: taskplane.SourceA2A, Identity: "msg-1",
		Message: taskplane.Message{ID: "msg-1", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("hello there")}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var task *taskplane.Task
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if task, _ = plane.GetTask(context.Background(), "me", acc.Task.ID); task.Status.State.Terminal() {
			break
		}
	}
	stop()
	<-done
	fmt.Println(task.Status.State, task.Status.Message.Parts[0].Text)
	fmt.Println(task.Artifacts[0].Name, string(task.Artifacts[0].Parts[0].Data))
	// Output:
	// completed HELLO THERE
	// stats {"words":2}
}
