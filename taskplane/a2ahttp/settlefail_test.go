package a2ahttp_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/google/uuid"

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
// reading what became of it keeps failing (for longer than the plane's follow outage, short
// here): an error would read as "not accepted", and a client sending the message again (with
// messageId deduplication off) would make a second task.
func TestABlockingSendWhoseWaitCannotReadAnswersWithTheAcceptedTask(t *testing.T) {
	st := &failingReads{Store: storetest.OpenSQLite(t)}
	waiting := taskplane.ExecutorFunc(func(ctx context.Context, _ *taskplane.Turn) error {
		<-ctx.Done()
		return ctx.Err()
	})
	popts := []taskplane.Option{taskplane.WithFollowOutage(200 * time.Millisecond)}
	e := newEnvExec(t, st, popts, waiting, func(c *a2aConfig) { c.BlockingTimeout = 10 * time.Second })
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

// outageTurn is an agent whose turn makes st's reads fail (as a database restart does, for the
// pooled connections it cut) from just before its WORKING update until a while after it, then
// completes the task.
func outageTurn(st *failingReads, outage time.Duration) taskplane.Executor {
	return taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		st.fail.Store(true)
		if err := turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateWorking}); err != nil {
			return err
		}
		select {
		case <-time.After(outage):
		case <-ctx.Done():
			return ctx.Err()
		}
		st.fail.Store(false)
		return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted, Message: agentMsg("done")})
	})
}

// A blocking send waits through a short store outage: its failed reads are retried until the
// blocking timeout (or the plane's follow outage), and it answers with the settled task, not
// with the task as accepted on the first failed read.
func TestABlockingSendWaitsThroughAShortStoreOutage(t *testing.T) {
	st := &failingReads{Store: storetest.OpenSQLite(t)}
	e := newEnvExec(t, st, nil, outageTurn(st, 400*time.Millisecond))
	forEachBinding(t, func(t *testing.T, binding string) {
		task := send(t, e.client(binding, tokenAlice), userMessage("hello"), nil)
		if task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("answer in state %s, want %s: the wait gave up on a failed read", task.Status.State, a2a.TaskStateCompleted)
		}
	})
}

// A stream follows its task through a short store outage to the end, with no error event.
func TestAStreamFollowsThroughAShortStoreOutage(t *testing.T) {
	st := &failingReads{Store: storetest.OpenSQLite(t)}
	e := newEnvExec(t, st, nil, outageTurn(st, 400*time.Millisecond))
	last := streamEnd(t, e)
	if k, state := kind(t, last.Data); k != "statusUpdate" || state != string(a2a.TaskStateCompleted) {
		t.Fatalf("the stream ended with %s %s (%s), want the COMPLETED status update", k, state, last.Data)
	}
}

// A stream whose reads fail for longer than the plane's follow outage ends with an error event.
func TestAStreamEndsWithAnErrorAfterASustainedStoreOutage(t *testing.T) {
	st := &failingReads{Store: storetest.OpenSQLite(t)}
	popts := []taskplane.Option{taskplane.WithFollowOutage(300 * time.Millisecond)}
	e := newEnvExec(t, st, popts, outageTurn(st, time.Hour))
	last := streamEnd(t, e)
	if k, _ := kind(t, last.Data); k != "error" {
		t.Fatalf("the stream ended with %s, want an error event", last.Data)
	}
	st.fail.Store(false)
}

// streamEnd sends a new message as a streaming send, reads its stream to the end and returns its
// last event.
func streamEnd(t *testing.T, e *env) sseEvent {
	t.Helper()
	s, status, body := e.openSSE(ctxT(t), http.MethodPost, "/message:stream", tokenAlice,
		sendBody(t, wireMsg(uuid.NewString(), "hello"), nil), nil)
	if s == nil {
		t.Fatalf("stream: %d %s", status, body)
	}
	defer s.close()
	evs := s.all()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	return evs[len(evs)-1]
}
