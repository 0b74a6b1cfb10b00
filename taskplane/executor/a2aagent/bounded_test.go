package a2aagent_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/executor/a2aagent"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// An answer of the agent that is not a stream (here its card) is read up to MaxAnswerBytes: an
// agent that answers with 256 MiB fails the turn without filling Channels' memory.
func TestAnAgentsAnswerIsReadUpToItsBound(t *testing.T) {
	var written atomic.Int64
	chunk := bytes.Repeat([]byte(" "), 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"name":"x","description":"`))
		for i := 0; i < 256; i++ {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	ch := startChannels(t, storetest.OpenSQLite(t), srv.URL)
	task := ch.send(t, "m-1", "hello", "")
	ch.await(t, task.ID, "the turn to fail", func(tk *taskplane.Task) bool { return tk.Status.State.Terminal() })
	time.Sleep(100 * time.Millisecond)
	if n := written.Load(); n > a2aagent.MaxAnswerBytes+8<<20 { // what the socket buffers took beyond it
		t.Fatalf("Channels read %d MiB of the agent card before giving up", n>>20)
	}
}
