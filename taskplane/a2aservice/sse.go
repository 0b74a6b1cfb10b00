package a2aservice

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/channels-dev/channels/internal/boundedwrite"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// Encoder frames stream payloads for one binding: HTTP+JSON sends the StreamResponse itself,
// JSON-RPC wraps it in a JSON-RPC response.
type Encoder interface {
	// Event encodes one stream event as single-line JSON.
	Event(*a2awire.StreamResponse) ([]byte, error)
	// Error encodes a mid-stream error as single-line JSON.
	Error(*a2awire.Error) []byte
}

// WriteAnswer writes body, an answer that is not a stream, to w: a chunk at a time, each to be
// taken by the client within StreamWriteTimeout (see package boundedwrite).
func (s *Service) WriteAnswer(w http.ResponseWriter, body []byte) {
	_ = boundedwrite.Write(w, body, s.cfg.StreamWriteTimeout)
}

// endWriteTimeout bounds the write of a stream's end (the chunked body's terminator) after its
// handler returns.
const endWriteTimeout = time.Second

// ServeSSE writes st as a text/event-stream: each event as "id: <seq>" (when it has one) and
// "data: <json>", keep-alive comments every KeepAlive, and a mid-stream error as one
// "event: error" before closing. It returns when the stream closes, the client goes away or
// takes no write for StreamWriteTimeout, or the service closes.
func (s *Service) ServeSSE(w http.ResponseWriter, r *http.Request, st *Stream, enc Encoder) {
	defer st.Close()
	rc := http.NewResponseController(w)
	ctx, cancel := s.withBase(r.Context())
	defer cancel()
	// Each write gets its own deadline instead of a server-wide WriteTimeout, which would cut a
	// long-lived stream: a client that stops reading fills the socket buffers, and without a
	// deadline the write would block, holding the stream's slot, until the connection closes.
	// When ctx ends (the service closes, the client goes away), a write in progress then has
	// endWriteTimeout to finish: one to a client that reads does, and the stream still ends
	// cleanly; one blocked by a client that stopped reading is cut. After that nothing more is
	// written but the headers and the first event, if they are not yet (a request accepted as the
	// service closes still tells its client what it made), each within endWriteTimeout. mu keeps
	// the watcher's deadline and a write's from crossing.
	var (
		mu      sync.Mutex
		opening = true // the headers and the first event are not all written yet
		cut     bool   // ctx ended
	)
	send := func(b []byte, header bool) bool {
		mu.Lock()
		// ctx may have ended before the watcher ran: no event after the opening is written once it
		// has, whether or not the watcher has seen it yet.
		cut = cut || ctx.Err() != nil
		d := s.cfg.StreamWriteTimeout
		switch {
		case cut && !opening:
			mu.Unlock()
			return false
		case cut:
			d = endWriteTimeout
		}
		_ = rc.SetWriteDeadline(time.Now().Add(d))
		mu.Unlock()
		if header {
			w.WriteHeader(http.StatusOK)
			return rc.Flush() == nil
		}
		// A large event (a snapshot or an artifact of some MiB) goes out in pieces, each with a
		// fresh deadline, and the whole within the time of one and boundedwrite.MinRate more (as
		// other answers), so a client that keeps reading gets it whole; once ctx has ended the
		// deadline stays the watcher's (or the opening's).
		err := boundedwrite.Chunks(w, b, d, func(t time.Time) {
			mu.Lock()
			defer mu.Unlock()
			if cut = cut || ctx.Err() != nil; !cut {
				_ = rc.SetWriteDeadline(t)
			}
		})
		return err == nil && rc.Flush() == nil
	}
	opened := func() {
		mu.Lock()
		opening = false
		mu.Unlock()
	}
	// The watcher is done before ServeSSE returns, so it never touches a connection that has
	// moved on to its next request.
	unwatch := make(chan struct{})
	unwatched := make(chan struct{})
	go func() {
		defer close(unwatched)
		select {
		case <-ctx.Done():
			mu.Lock()
			cut = true
			_ = rc.SetWriteDeadline(time.Now().Add(endWriteTimeout))
			mu.Unlock()
		case <-unwatch:
		}
	}()
	defer func() {
		close(unwatch)
		<-unwatched
		// The end of the body, which net/http writes once the handler returns, must reach a
		// client that reads within endWriteTimeout, whatever deadline the last write had (a
		// write cut before leaves the connection failed, so this gives a stalled one nothing).
		_ = rc.SetWriteDeadline(time.Now().Add(endWriteTimeout))
	}()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	if !send(nil, true) {
		return
	}

	// write frames one event and sends it; false: the client is gone (or encoding failed).
	write := func(ev Event) bool {
		b, err := enc.Event(ev.Response)
		if err != nil {
			s.log.ErrorContext(ctx, "encode stream event", "err", err)
			return false
		}
		var frame []byte
		if ev.Seq > 0 {
			frame = append(frame, "id: "...)
			frame = strconv.AppendInt(frame, ev.Seq, 10)
			frame = append(frame, '\n')
		}
		frame = append(frame, "data: "...)
		frame = append(frame, b...)
		frame = append(frame, "\n\n"...)
		return send(frame, false)
	}
	// The first event (the Task snapshot, or the direct Message) is written even if the service
	// has closed meanwhile (within endWriteTimeout then): a request accepted when the service
	// closes (one in flight at shutdown) still tells its client what it made.
	if st.first != nil {
		first := *st.first
		st.first = nil
		if !write(first) {
			return
		}
	}
	opened()
	events := make(chan Event)
	done := make(chan error, 1)
	go func() {
		// run, not Run: the slot is ServeSSE's until it returns, after the last event (or the
		// error) run handed over has been written, however long a stalled client makes that.
		done <- st.run(ctx, func(ev Event) error {
			select {
			case events <- ev:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	stop := func() {
		cancel()
		<-done
	}
	tick := time.NewTicker(s.cfg.KeepAlive)
	defer tick.Stop()
	for {
		select {
		case ev := <-events:
			if !write(ev) {
				stop()
				return
			}
		case <-tick.C:
			if !send([]byte(": keep-alive\n\n"), false) {
				stop()
				return
			}
		case err := <-done:
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				we := s.WireError(ctx, "stream", err)
				frame := append([]byte("event: error\ndata: "), enc.Error(we)...)
				frame = append(frame, "\n\n"...)
				send(frame, false)
			}
			return
		}
	}
}
