package a2ahttp_test

import (
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// The subscriber count (the channels_sse_subscribers gauge) counts the clients' streams and
// nothing else: a blocking send waiting for its task to settle holds a subscription to the task's
// notifications, but no stream is open, so it is not counted; a SubscribeToTask stream is.
func TestABlockingSendsWaitIsNotCountedAsAStreamSubscriber(t *testing.T) {
	e := newEnv(t)
	c := e.client(a2awire.BindingHTTPJSON, tokenAlice)

	// A blocking send of a task that waits (gate): its wait follows the task until it settles.
	type answer struct {
		res a2a.SendMessageResult
		err error
	}
	sent := make(chan answer, 1)
	ctx := ctxT(t)
	go func() {
		res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: userMessage("gate")})
		sent <- answer{res, err}
	}()
	var id a2a.TaskID
	deadline := time.Now().Add(20 * time.Second)
	for id == "" {
		page, err := e.plane.ListTasks(ctxT(t), "alice", taskplane.ListQuery{PageSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Tasks) == 1 {
			id = a2a.TaskID(page.Tasks[0].ID)
		} else if time.Now().After(deadline) {
			t.Fatal("the blocking send's task did not appear")
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitHeld(t, c, id)
	// The send is accepted and its wait subscribed right after; give it ample time.
	time.Sleep(200 * time.Millisecond)
	if n := e.plane.Subscribers(); n != 0 {
		t.Fatalf("with a blocking send waiting and no stream open, Subscribers = %d, want 0", n)
	}

	// A stream on the same task is counted while it is open.
	s, status, body := e.openSSE(ctxT(t), "GET", "/tasks/"+string(id)+":subscribe", tokenAlice, nil, nil)
	if s == nil {
		t.Fatalf("subscribe: %d %s", status, body)
	}
	s.next() // the snapshot; the stream follows the task from here
	deadline = time.Now().Add(20 * time.Second)
	for e.plane.Subscribers() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("with one stream open, Subscribers = %d, want 1", e.plane.Subscribers())
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.exec.release(string(id))
	s.all() // to the end: the task completed
	s.close()
	if a := <-sent; a.err != nil {
		t.Fatalf("the blocking send: %v", a.err)
	} else if task, ok := a.res.(*a2a.Task); !ok || task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("the blocking send answered %#v, want a COMPLETED task", a.res)
	}
	deadline = time.Now().Add(20 * time.Second)
	for e.plane.Subscribers() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the stream ended, Subscribers = %d, want 0", e.plane.Subscribers())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
