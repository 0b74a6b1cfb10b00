package taskplane_test

import (
	"context"
	"encoding/json"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// TestAnExecutorsUnencodableChangeFailsTheTaskAtOnce: a change JSON cannot hold (a data part that
// is not JSON, a NaN) is the executor's error, not the store's: the task fails at once with it,
// rather than being offered again until the re-offer cap.
func TestAnExecutorsUnencodableChangeFailsTheTaskAtOnce(t *testing.T) {
	for name, change := range map[string]func(*taskplane.Turn, context.Context) error{
		"data part not JSON": func(turn *taskplane.Turn, ctx context.Context) error {
			return turn.Complete(ctx, &taskplane.Message{ID: "r", Role: taskplane.RoleAgent,
				Parts: []taskplane.Part{{Data: json.RawMessage(`{"unterminated`)}}})
		},
		"NaN metadata": func(turn *taskplane.Turn, ctx context.Context) error {
			return turn.Update(ctx, taskplane.SetMetadata{Key: "score", Value: math.NaN()})
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := taskplane.New(storetest.OpenSQLite(t), taskplane.WithReofferDelay(time.Millisecond))
			var runs atomic.Int32
			exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
				runs.Add(1)
				return change(turn, ctx)
			})
			runDispatcher(t, p, exec, 1)
			task := finished(t, p, mustAccept(t, p, a2aEvent("m1", "hello")).Task.ID)
			if n := runs.Load(); n != 1 {
				t.Fatalf("the executor ran %d times (task %s, %q); want once, the task failed with the encoding error", n, task.Status.State, statusText(task))
			}
		})
	}
}
