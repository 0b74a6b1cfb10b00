package a2ahttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/channels-dev/channels/taskplane/a2awire"
	"github.com/channels-dev/channels/taskplane/executor/conformance"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// eventWait bounds every wait for a stream event (or its end) in these tests, so that a stream
// that closes too early or stays open too long fails the test instead of hanging it.
const eventWait = 10 * time.Second

// feed reads s in a goroutine of its own and hands its events over a channel that is closed when
// the stream ends. The goroutine stops when the test ends (the stream's body is closed then).
func feed(t *testing.T, s *sseStream) <-chan sseEvent {
	ch := make(chan sseEvent)
	done := make(chan struct{})
	go func() {
		defer close(ch)
		for {
			ev, ok := s.next()
			if !ok {
				return
			}
			select {
			case ch <- ev:
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { close(done); s.close() })
	return ch
}

// nextWithin returns the next event of ch; ok is false when the stream ended. It fails the test
// if neither comes within eventWait.
func nextWithin(t *testing.T, ch <-chan sseEvent, waiting string) (sseEvent, bool) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		return ev, ok
	case <-time.After(eventWait):
		t.Fatalf("no stream event and no end within %s while waiting for %s", eventWait, waiting)
		return sseEvent{}, false
	}
}

// streamTaskID returns the id of the Task a stream event carries (REST or JSON-RPC framing).
func streamTaskID(t *testing.T, data string) a2a.TaskID {
	t.Helper()
	var ev struct {
		Task   *struct{ ID string } `json:"task"`
		Result *struct {
			Task *struct{ ID string } `json:"task"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		t.Fatalf("stream data: %v: %s", err, data)
	}
	switch {
	case ev.Task != nil:
		return a2a.TaskID(ev.Task.ID)
	case ev.Result != nil && ev.Result.Task != nil:
		return a2a.TaskID(ev.Result.Task.ID)
	}
	t.Fatalf("stream event carries no task: %s", data)
	return ""
}

// Invariant 6 on streams: AUTH_REQUIRED is interrupted, not terminal, and its credentials arrive
// out of band, so it closes no stream. A streaming send whose task goes WORKING → AUTH_REQUIRED
// keeps its stream open; so does the same streaming send sent again (a client whose connection
// dropped retries it), which opens on the AUTH_REQUIRED snapshot. A follow-up continuing the task
// by its taskId, on a request of its own, is then seen on both streams through COMPLETED, and only
// there do they end. On each binding.
func TestStreamsStayOpenThroughAuthRequiredUntilTheTaskCompletes(t *testing.T) {
	e := newEnvExec(t, storetest.OpenSQLite(t), nil, conformance.New(), func(c *a2aConfig) { c.BlockingTimeout = time.Minute })
	forEachBinding(t, func(t *testing.T, binding string) {
		path, body := "/message:stream", sendBody(t, wireMsg("tck-auth-required-"+bindingName(binding), "sign me in"), nil)
		if binding == a2awire.BindingJSONRPC {
			path = "/jsonrpc"
			body = []byte(`{"jsonrpc":"2.0","id":"s1","method":"SendStreamingMessage","params":` + string(body) + `}`)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		open := func(which string) <-chan sseEvent {
			t.Helper()
			s, status, b := e.openSSE(ctx, http.MethodPost, path, tokenAlice, body, nil)
			if s == nil {
				t.Fatalf("%s: %d %s", which, status, b)
			}
			return feed(t, s)
		}
		describe := func(ev sseEvent) string {
			k, st := kind(t, ev.Data)
			return strings.TrimSpace(k + " " + st)
		}

		first := open("streaming send")
		ev, ok := nextWithin(t, first, "the task")
		if !ok || describe(ev) != "task TASK_STATE_SUBMITTED" {
			t.Fatalf("first event of the streaming send: %q (%v), want the SUBMITTED task", ev.Data, ok)
		}
		taskID := streamTaskID(t, ev.Data)
		var before []string
		for len(before) == 0 || before[len(before)-1] != "statusUpdate TASK_STATE_AUTH_REQUIRED" {
			ev, ok := nextWithin(t, first, "AUTH_REQUIRED")
			if !ok {
				t.Fatalf("the streaming send's stream ended after %v, before AUTH_REQUIRED", before)
			}
			before = append(before, describe(ev))
		}
		if before[0] != "statusUpdate TASK_STATE_WORKING" {
			t.Fatalf("status events before AUTH_REQUIRED: %v, want WORKING first", before)
		}

		// The same streaming send again: a duplicate, whose stream opens on the snapshot.
		retried := open("the same streaming send again")
		ev, ok = nextWithin(t, retried, "the snapshot")
		if !ok || describe(ev) != "task TASK_STATE_AUTH_REQUIRED" || streamTaskID(t, ev.Data) != taskID {
			t.Fatalf("first event of the retried streaming send: %q (%v), want task %s AUTH_REQUIRED", ev.Data, ok, taskID)
		}

		m := userMessage("signed in")
		m.TaskID = taskID
		if done := send(t, e.client(binding, tokenAlice), m, nil); done.ID != taskID || done.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("follow-up: task %s %s, want %s COMPLETED", done.ID, done.Status.State, taskID)
		}

		for name, ch := range map[string]<-chan sseEvent{"the streaming send": first, "the retried streaming send": retried} {
			var after []string
			for {
				ev, ok := nextWithin(t, ch, "the follow-up's events and the end of "+name)
				if !ok {
					break
				}
				after = append(after, describe(ev))
			}
			if len(after) == 0 {
				t.Errorf("%s ended at AUTH_REQUIRED: it carried none of the follow-up's events", name)
				continue
			}
			if after[len(after)-1] != "statusUpdate TASK_STATE_COMPLETED" {
				t.Errorf("%s carried %v after AUTH_REQUIRED, want the follow-up's events ending at COMPLETED", name, after)
			}
			for _, d := range after[:len(after)-1] {
				if d == "statusUpdate TASK_STATE_COMPLETED" {
					t.Errorf("%s went on after COMPLETED: %v", name, after)
				}
			}
		}
	})
}
