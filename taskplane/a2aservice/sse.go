package a2aservice

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

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

// ServeSSE writes st as a text/event-stream: each event as "id: <seq>" (when it has one) and
// "data: <json>", keep-alive comments every KeepAlive, and a mid-stream error as one
// "event: error" before closing. It returns when the stream closes, the client goes away, or
// the service closes.
func (s *Service) ServeSSE(w http.ResponseWriter, r *http.Request, st *Stream, enc Encoder) {
	defer st.Close()
	rc := http.NewResponseController(w)
	// A server-wide WriteTimeout must not cut a long-lived stream.
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()

	// write frames one event and flushes it; false: the client is gone (or encoding failed).
	write := func(ctx context.Context, ev Event) bool {
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
		if _, err := w.Write(frame); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// The first event (the Task snapshot, or the direct Message) is written before anything can
	// cut the stream off: a request accepted when the service closes (one in flight at shutdown)
	// still tells its client what it made.
	if st.first != nil {
		first := *st.first
		st.first = nil
		if !write(r.Context(), first) {
			return
		}
	}

	ctx, cancel := s.withBase(r.Context())
	defer cancel()
	events := make(chan Event)
	done := make(chan error, 1)
	go func() {
		done <- st.Run(ctx, func(ev Event) error {
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
			if !write(ctx, ev) {
				stop()
				return
			}
		case <-tick.C:
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil {
				stop()
				return
			}
			if err := rc.Flush(); err != nil {
				stop()
				return
			}
		case err := <-done:
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				we := s.WireError(ctx, "stream", err)
				frame := append([]byte("event: error\ndata: "), enc.Error(we)...)
				frame = append(frame, "\n\n"...)
				_, _ = w.Write(frame)
				_ = rc.Flush()
			}
			return
		}
	}
}
