package a2ahttp_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/channels-dev/channels/internal/boundedwrite/boundedwritetest"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// TestASlowButSteadyReaderGetsALargeStreamEvent: docs/a2a.md (Streams): "A client that reads,
// however slowly, keeps its stream." An event is written as one write under one
// StreamWriteTimeout deadline, so an event larger than what the client can take within that
// time (a task snapshot or an artifact of a few MiB; tasks hold up to 8 MiB) is cut even though
// the client never stops reading — and it is cut again on every reconnect. Non-stream answers
// bound each 64 KiB instead (boundedwrite).
func TestASlowButSteadyReaderGetsALargeStreamEvent(t *testing.T) {
	big := strings.Repeat("x", 2<<20) // a 2 MiB artifact
	x := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		return turn.Update(ctx,
			taskplane.AddArtifact{Artifact: taskplane.Artifact{ID: "big", Parts: []taskplane.Part{taskplane.TextPart(big)}}},
			taskplane.SetStatus{State: taskplane.StateCompleted})
	})
	e := newEnvExec(t, storetest.OpenSQLite(t), nil, x, func(c *a2aConfig) {
		c.StreamWriteTimeout = 2 * time.Second // room for a loaded machine between two reads
	})
	alice := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	task := send(t, alice, userMessage("hello"), nil)
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("task is %s", task.Status.State)
	}

	// Serve e's handler on a pipe (no buffering: the server's write waits for the reader).
	ln := &pipeListener{conns: make(chan net.Conn, 1), done: make(chan struct{})}
	hs := &http.Server{Handler: e.srv}
	go func() { _ = hs.Serve(ln) }()
	cli, srvEnd := net.Pipe()
	t.Cleanup(func() { _ = hs.Close(); _ = cli.Close() })
	ln.conns <- srvEnd
	go func() {
		_, _ = fmt.Fprintf(cli, "GET /tasks/%s:subscribe HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
			"Accept: text/event-stream\r\nLast-Event-ID: 0\r\nConnection: close\r\n\r\n", task.ID, tokenAlice)
	}()
	_ = cli.SetReadDeadline(time.Now().Add(20 * time.Second))
	// 16 KiB every 20 ms: about 0.8 MB/s, a steady reader that takes the 2 MiB event in some 2.6 s,
	// more than one StreamWriteTimeout, and never stalls for anything near it.
	got, err := boundedwritetest.ReadSlowly(cli, 16<<10, 20*time.Millisecond)
	if err != nil {
		t.Fatalf("reading the stream: %v after %d bytes", err, len(got))
	}
	if !bytes.Contains(got, []byte("TASK_STATE_COMPLETED")) || !bytes.HasSuffix(got, []byte("0\r\n\r\n")) {
		t.Fatalf("the stream of a steady reader was cut after %d bytes (the 2 MiB artifact event was not delivered whole)", len(got))
	}
}
