package a2ahttp_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// oneCutGet fails the next failGets reads of a task a request makes outside a transaction, as the pooled
// connections a database restart cut fail their next use, once each.
type oneCutGet struct {
	store.Store
	failGets atomic.Int64
}

func (f *oneCutGet) GetTask(ctx context.Context, principal, id string) (store.Task, error) {
	// Only a client's request reads (the stream's), not the dispatcher's heartbeat.
	if ctx.Value(http.ServerContextKey) != nil && f.failGets.Add(-1) >= 0 {
		return store.Task{}, errReadsDown
	}
	return f.Store.GetTask(ctx, principal, id)
}

// TestAStreamMeetingAQuestionSurvivesOneFailedRead: a stream that meets the task's question live
// reads the task once more; one failed read of it (a pooled connection a restart cut) is tried
// again, as the stream's own reads are, rather than ending the stream with an error event.
func TestAStreamMeetingAQuestionSurvivesOneFailedRead(t *testing.T) {
	st := &oneCutGet{Store: storetest.OpenSQLite(t)}
	asking := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		// Wait until the stream follows the task (its own first read done), then cut one read.
		for deadline := time.Now().Add(5 * time.Second); turn.Plane().Subscribers() == 0; {
			if time.Now().After(deadline) {
				return nil
			}
			time.Sleep(5 * time.Millisecond)
		}
		st.failGets.Store(1)
		return turn.RequireInput(ctx, taskplane.Question{Text: "which one?"})
	})
	e := newEnvExec(t, st, nil, asking)
	last := streamEnd(t, e)
	if k, state := kind(t, last.Data); k != "statusUpdate" || state != string(a2a.TaskStateInputRequired) {
		t.Fatalf("the stream ended with %s %s (%s), want the INPUT_REQUIRED status update", k, state, last.Data)
	}
}

// TestABlockingSendSurvivesOneFailedReadAfterItsTaskSettled: a blocking send whose wait saw its
// task settle reads the task once more to answer with it; one failed read of it is tried again,
// so the answer is the COMPLETED task, not the task as accepted.
func TestABlockingSendSurvivesOneFailedReadAfterItsTaskSettled(t *testing.T) {
	st := &oneCutGet{Store: storetest.OpenSQLite(t)}
	completing := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		st.failGets.Store(1) // the next read a request makes fails once
		return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted, Message: agentMsg("done")})
	})
	e := newEnvExec(t, st, nil, completing, func(c *a2aConfig) { c.BlockingTimeout = 10 * time.Second })
	forEachBinding(t, func(t *testing.T, binding string) {
		task := send(t, e.client(binding, tokenAlice), userMessage("hello"), nil)
		if task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("answer in state %s, want %s: one failed read after the wait", task.Status.State, a2a.TaskStateCompleted)
		}
	})
}
