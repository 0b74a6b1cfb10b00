package a2ahttp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/channels-dev/channels/taskplane/a2awire"
)

// pipeListener hands an http.Server the server ends of net.Pipe connections: a pipe has no
// buffer, so a client that stops reading blocks the server's next write at once.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { close(l.done); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// pipeSubscribe serves e's handler on one in-memory connection (unbuffered: a write the client
// does not read blocks) and sends a SubscribeToTask of taskID on it. It returns the server, which
// the test may shut down, and the client's end; cleanup closes both.
func pipeSubscribe(t *testing.T, e *env, taskID a2a.TaskID) (*http.Server, net.Conn) {
	t.Helper()
	ln := &pipeListener{conns: make(chan net.Conn, 1), done: make(chan struct{})}
	hs := &http.Server{Handler: e.srv}
	go func() { _ = hs.Serve(ln) }()
	cli, srvEnd := net.Pipe()
	t.Cleanup(func() {
		_ = hs.Close()
		_ = cli.Close()
	})
	ln.conns <- srvEnd
	go func() {
		_, _ = fmt.Fprintf(cli, "GET /tasks/%s:subscribe HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", taskID, tokenAlice)
	}()
	return hs, cli
}

// stalledSubscribe subscribes to taskID over a pipe served by its own http.Server over e's
// handler, reads the stream up to the end of its first event (the snapshot), and then reads no
// more. It returns that server, which the test may shut down; cleanup closes it and the pipe.
func stalledSubscribe(t *testing.T, e *env, taskID a2a.TaskID) *http.Server {
	t.Helper()
	hs, cli := pipeSubscribe(t, e, taskID)
	// A small buffer: nothing past what is asked for is taken off the pipe.
	br := bufio.NewReaderSize(cli, 16)
	_ = cli.SetReadDeadline(time.Now().Add(10 * time.Second))
	seenData, inBody := false, false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		switch {
		case !inBody && line == "\r\n":
			inBody = true // the end of the response headers
		case strings.HasPrefix(line, "data: "):
			seenData = true
		case seenData && line == "\n":
			// The end of the event; its chunk ends with CRLF, read too so that the server's
			// write of the first event completes and the stream is under way.
			if line, err := br.ReadString('\n'); err != nil || line != "\r\n" {
				t.Fatalf("after the first event: %q %v, want the chunk's CRLF", line, err)
			}
			return hs
		}
	}
}

// TestAStreamWhoseClientStopsReadingEndsOnClose: a stream blocked writing to a client that
// stopped reading ends when the server closes, so a graceful shutdown does not wait for it and
// its slot under max_streams_per_principal comes back; the write timeout is an hour here, so
// only Close can have ended it.
func TestAStreamWhoseClientStopsReadingEndsOnClose(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) {
		c.Limits.MaxStreamsPerPrincipal = 1
		c.StreamWriteTimeout = time.Hour
	})
	alice := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	task := send(t, alice, userMessage("gate"), &a2a.SendMessageConfig{ReturnImmediately: true})
	waitHeld(t, alice, task.ID)
	other := send(t, alice, userMessage("gate"), &a2a.SendMessageConfig{ReturnImmediately: true})
	defer e.exec.release(string(other.ID))
	waitHeld(t, alice, other.ID)

	hs := stalledSubscribe(t, e, task.ID)
	// The task's next events block the stream's write.
	e.exec.release(string(task.ID))
	waitState(t, alice, task.ID, a2a.TaskStateCompleted)

	e.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(ctx); errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("a graceful shutdown after Close still waits after 10s: the stalled stream never ended")
	}
	// The slot is free again: a stream opened now (after Close it sends its snapshot and ends)
	// is not refused.
	s, status, body := e.openSSE(ctxT(t), http.MethodGet, "/tasks/"+string(other.ID)+":subscribe", tokenAlice, nil, nil)
	if s == nil {
		t.Fatalf("subscribe after the stalled stream ended: HTTP %d %s (429: it still holds its slot)", status, body)
	}
	s.close()
}

// TestAStalledStreamEndsAfterTheWriteTimeoutAndFreesItsSlot: a stream whose client stops reading
// while its task keeps going ends once a write (here a keep-alive comment) has waited
// StreamWriteTimeout, and its slot under max_streams_per_principal comes back.
func TestAStalledStreamEndsAfterTheWriteTimeoutAndFreesItsSlot(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) {
		c.Limits.MaxStreamsPerPrincipal = 1
		c.KeepAlive = 50 * time.Millisecond
		c.StreamWriteTimeout = 200 * time.Millisecond
	})
	alice := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	task := send(t, alice, userMessage("gate"), &a2a.SendMessageConfig{ReturnImmediately: true})
	defer e.exec.release(string(task.ID))
	waitHeld(t, alice, task.ID)

	stalledSubscribe(t, e, task.ID)
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, status, body := e.openSSE(ctxT(t), http.MethodGet, "/tasks/"+string(task.ID)+":subscribe", tokenAlice, nil, nil)
		if s != nil {
			s.close()
			break
		}
		if status != http.StatusTooManyRequests {
			t.Fatalf("subscribe: HTTP %d %s", status, body)
		}
		if time.Now().After(deadline) {
			t.Fatal("the stalled stream still holds its slot after 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitHeld(t, alice, task.ID) // the stream ended while its task kept going
}

// TestCloseEndsAnOpenStreamCleanly: docs/a2a.md promises Close() "ends every open stream
// cleanly". A stream whose client is reading must end with the chunked terminator (a clean EOF),
// not a connection cut mid-body (unexpected EOF), which SSE clients report as an error.
func TestCloseEndsAnOpenStreamCleanly(t *testing.T) {
	e := newEnv(t)
	c := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	task := send(t, c, userMessage("gate"), &a2a.SendMessageConfig{ReturnImmediately: true})
	defer e.exec.release(string(task.ID))
	waitHeld(t, c, task.ID)
	s, status, body := e.openSSE(ctxT(t), http.MethodGet, "/tasks/"+string(task.ID)+":subscribe", tokenAlice, nil, nil)
	if s == nil {
		t.Fatalf("%d %s", status, body)
	}
	defer s.close()
	if _, ok := s.next(); !ok {
		t.Fatal("no snapshot")
	}
	time.Sleep(50 * time.Millisecond)
	e.srv.Close()
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(s.resp.Body); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the stream ended by Close ended with %v, want a clean end of the body", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end on Close")
	}
}

// TestAStreamingSendAfterCloseEndsWithoutAnError: through the a2a-go client, a streaming send in
// flight at shutdown gets its Task and then a clean end of stream, not an error after it.
func TestAStreamingSendAfterCloseEndsWithoutAnError(t *testing.T) {
	forEachBinding(t, func(t *testing.T, binding string) {
		e := newEnv(t)
		c := e.client(binding, tokenAlice)
		e.srv.Close()
		failed := 0
		var last error
		for i := 0; i < 20; i++ {
			n := 0
			for _, err := range c.SendStreamingMessage(ctxT(t), &a2a.SendMessageRequest{Message: userMessage("complete")}) {
				if err != nil {
					failed, last = failed+1, err
					break
				}
				n++
			}
			if n == 0 {
				t.Fatal("no event")
			}
		}
		if failed > 0 {
			t.Fatalf("%d of 20 streaming sends after Close gave the SDK an error after the Task: %v", failed, last)
		}
	})
}

// TestAJSONRPCRefusalStreamAfterCloseEndsCleanly: the one-event error stream of a refusal
// answered during shutdown is also cut instead of ending: the client gets its error
// event and then an unexpected EOF.
func TestAJSONRPCRefusalStreamAfterCloseEndsCleanly(t *testing.T) {
	e := newEnv(t)
	e.srv.Close()
	body := []byte(`{"jsonrpc":"2.0","id":"r9","method":"SendStreamingMessage","params":{}}`)
	cut := 0
	for i := 0; i < 50; i++ {
		s, status, rb := e.openSSE(ctxT(t), http.MethodPost, "/jsonrpc", tokenAlice, body, map[string]string{"Content-Type": "text/plain"})
		if s == nil {
			t.Fatalf("%d %s", status, rb)
		}
		if _, err := io.ReadAll(s.resp.Body); err != nil {
			cut++
		}
		s.close()
	}
	if cut > 0 {
		t.Fatalf("%d of 50 refusal streams answered after Close ended with a cut connection, want a clean end", cut)
	}
}

// TestAStreamBlockedOnItsFirstEventEndsOnClose: a subscriber that never reads blocks the
// stream's first write (its headers and the task); Close cuts that write too, within a second,
// rather than leaving it to StreamWriteTimeout.
func TestAStreamBlockedOnItsFirstEventEndsOnClose(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) {
		c.Limits.MaxStreamsPerPrincipal = 1
		c.StreamWriteTimeout = time.Hour
	})
	alice := e.client(a2awire.BindingHTTPJSON, tokenAlice)
	task := send(t, alice, userMessage("gate"), &a2a.SendMessageConfig{ReturnImmediately: true})
	defer e.exec.release(string(task.ID))
	waitHeld(t, alice, task.ID)

	hs, _ := pipeSubscribe(t, e, task.ID)
	time.Sleep(300 * time.Millisecond) // the handler is blocked writing the response: nobody reads

	e.srv.Close()
	// 10 s: far above the second Close gives the write, far below StreamWriteTimeout, and room
	// for a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(ctx); errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("a graceful shutdown after Close still waits after 10s: the stream blocked on its first write is not cut by Close (only by StreamWriteTimeout)")
	}
}
