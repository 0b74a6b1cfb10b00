package a2ahttp_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/channels-dev/channels/taskplane/a2awire"
)

// TestAStreamBlockedWritingItsLastEventKeepsItsSlot: docs/a2a.md says a stream's max_streams
// slot "comes back when its stream ends", and channels_a2a_streams_open counts a stream "from
// their admission to their end". A stream whose last event (here the CANCELED status) is being
// written to a client that stopped reading has not ended: its handler is blocked in the write
// (for up to StreamWriteTimeout), holding the connection. Its slot must still be held.
func TestAStreamBlockedWritingItsLastEventKeepsItsSlot(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) {
		c.Limits.MaxStreamsPerPrincipal = 1
		c.StreamWriteTimeout = time.Hour
		c.KeepAlive = time.Hour // no keep-alive write gets in the way of the last event's
	})
	alice := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	task := send(t, alice, userMessage("auth"), nil) // AUTH_REQUIRED: a stream stays open
	if task.Status.State != a2a.TaskStateAuthRequired {
		t.Fatalf("task is %s", task.Status.State)
	}
	other := send(t, alice, userMessage("gate"), &a2a.SendMessageConfig{ReturnImmediately: true})
	defer e.exec.release(string(other.ID))
	waitHeld(t, alice, other.ID)

	stalledSubscribe(t, e, task.ID) // reads the snapshot, then stops reading
	if _, err := alice.CancelTask(ctxT(t), &a2a.CancelTaskRequest{ID: task.ID}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the CANCELED event is now being written, and blocks

	if n := e.srv.Service().OpenStreams(); n != 1 {
		t.Errorf("OpenStreams = %d while the stream is blocked writing its last event, want 1", n)
	}
	s, status, _ := e.openSSE(ctxT(t), http.MethodGet, "/tasks/"+string(other.ID)+":subscribe", tokenAlice, nil, nil)
	if s != nil {
		s.close()
		t.Fatalf("a second stream was admitted (HTTP %d) past max_streams_per_principal=1 while the first is still open", status)
	}
}
