package a2ahttp_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// failingReads fails the reads a blocking send waits with (the task's events and the task
// outside a transaction) while fail is set.
type failingReads struct {
	store.Store
	fail atomic.Bool
}

var errReadsDown = errors.New("reads are down")

func (f *failingReads) TaskEvents(ctx context.Context, principal, taskID string, after int64, limit int) ([]store.TaskEvent, error) {
	if f.fail.Load() {
		return nil, errReadsDown
	}
	return f.Store.TaskEvents(ctx, principal, taskID, after, limit)
}

func (f *failingReads) GetTask(ctx context.Context, principal, id string) (store.Task, error) {
	if f.fail.Load() {
		return store.Task{}, errReadsDown
	}
	return f.Store.GetTask(ctx, principal, id)
}

// A blocking send whose message was accepted durably answers with the task as accepted when
// reading what became of it fails: an error would read as "not accepted", and a client sending
// the message again (with messageId deduplication off) would make a second task.
func TestABlockingSendWhoseWaitCannotReadAnswersWithTheAcceptedTask(t *testing.T) {
	st := &failingReads{Store: storetest.OpenSQLite(t)}
	waiting := taskplane.ExecutorFunc(func(ctx context.Context, _ *taskplane.Turn) error {
		<-ctx.Done()
		return ctx.Err()
	})
	e := newEnvExec(t, st, nil, waiting, func(c *a2aConfig) { c.BlockingTimeout = 10 * time.Second })
	st.fail.Store(true)
	task := send(t, e.client(a2awire.BindingHTTPJSON, tokenAlice), userMessage("hello"), nil)
	st.fail.Store(false)
	if task.ID == "" || task.Status.State.Terminal() {
		t.Fatalf("answer %+v, want the accepted task", task.Status)
	}
	if _, err := e.plane.GetTask(context.Background(), "alice", string(task.ID)); err != nil {
		t.Fatalf("the task answered is not in the store: %v", err)
	}
}
