package a2aservice

import (
	"context"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// Event is one stream event. Seq is the task's event-log sequence, sent as the SSE id (0: none,
// for a direct Message). Resuming after Seq with Last-Event-ID yields every later event once.
type Event struct {
	Seq      int64
	Response *a2awire.StreamResponse
}

// Stream is an opened stream: every check that can fail before the first event has passed.
// ServeSSE gives its slot back when it ends.
type Stream struct {
	svc       *Service
	release   func() // gives back the stream's slot (nil: it holds none)
	principal string
	taskID    string
	view      a2awire.View
	// first is sent before following (the Task snapshot or the direct Message).
	first *Event
	// follow reads the event log after seq after.
	follow bool
	after  int64
	// settledAt is, for a resumed stream, the task's last seq when it opened: the replay up to it
	// is delivered whole, and an INPUT_REQUIRED in it closes the stream only if it is still the
	// task's state there (a question the task has moved on from does not).
	settledAt int64
	// asked: a resumed stream starts after the question its task still waits on; it closes once
	// it has delivered what followed the question up to settledAt (or at once, if nothing did).
	asked bool
}

// closes reports whether a stream ends after a status event in state st: at terminal states and
// INPUT_REQUIRED; it stays open through AUTH_REQUIRED, whose credentials arrive out of band.
func closes(st taskplane.State) bool {
	return st.Terminal() || st == taskplane.StateInputRequired
}

// SendStreamingMessage accepts a message and opens its stream: the direct Message alone, or the
// Task followed by its status and artifact updates until it closes.
//
// A duplicate of an earlier streaming send (same messageId and payload) with Last-Event-ID
// resumes that stream after the given event.
func (s *Service) SendStreamingMessage(ctx context.Context, call Call, req *a2awire.SendMessageRequest) (*Stream, error) {
	// The slot comes first: a refused stream accepts nothing.
	return s.withSlot(call.Principal, func() (*Stream, error) { return s.sendStreaming(ctx, call, req) })
}

func (s *Service) sendStreaming(ctx context.Context, call Call, req *a2awire.SendMessageRequest) (*Stream, error) {
	acc, err := s.accept(ctx, call, req)
	if err != nil {
		return nil, err
	}
	v := s.view(call, req.Configuration.HistoryLength, true)
	if acc.Message != nil {
		m := a2awire.FromMessage(*acc.Message, v)
		return &Stream{svc: s, first: &Event{Response: &a2awire.StreamResponse{Message: &m}}}, nil
	}
	t := acc.Task
	if acc.Outcome == taskplane.Duplicate && call.LastEventID >= 0 {
		return s.resume(call, t, v)
	}
	st := &Stream{svc: s, principal: call.Principal, taskID: t.ID, view: v, after: t.LastSeq,
		first: &Event{Seq: t.LastSeq, Response: &a2awire.StreamResponse{Task: a2awire.FromTask(t, v)}}}
	// A fresh or continued task is SUBMITTED or active; a duplicate may already have settled,
	// and then its stream is the snapshot alone, like a blocking send.
	st.follow = !t.Status.State.Terminal() && !(acc.Outcome == taskplane.Duplicate && closes(t.Status.State))
	return st, nil
}

// SubscribeToTask opens a stream on an existing task of the caller: the current Task snapshot,
// then its updates until it closes. A terminal task is UnsupportedOperation. An
// INPUT_REQUIRED task's stream stays open until the task moves on and settles again.
//
// With Last-Event-ID (a Channels extension) no snapshot is sent: the stream replays every event
// after that id exactly once, then continues live; a terminal task is refused only when nothing
// is left to replay.
func (s *Service) SubscribeToTask(ctx context.Context, call Call, req *a2awire.SubscribeToTaskRequest) (*Stream, error) {
	return s.withSlot(call.Principal, func() (*Stream, error) { return s.subscribe(ctx, call, req) })
}

func (s *Service) subscribe(ctx context.Context, call Call, req *a2awire.SubscribeToTaskRequest) (*Stream, error) {
	t, err := s.plane.GetTask(ctx, call.Principal, req.ID)
	if err != nil {
		return nil, err
	}
	v := s.view(call, nil, true)
	if call.LastEventID >= 0 {
		return s.resume(call, t, v)
	}
	if t.Status.State.Terminal() {
		return nil, a2awire.Errorf(a2awire.ErrUnsupportedOperation, "task is in a terminal state; use GetTask").WithTask(t.ID)
	}
	return &Stream{svc: s, principal: call.Principal, taskID: t.ID, view: v, after: t.LastSeq, follow: true,
		first: &Event{Seq: t.LastSeq, Response: &a2awire.StreamResponse{Task: a2awire.FromTask(t, v)}}}, nil
}

func (s *Service) resume(call Call, t *taskplane.Task, v a2awire.View) (*Stream, error) {
	switch {
	case call.LastEventID > t.LastSeq:
		return nil, a2awire.Invalid(HeaderLastEventID, "is ahead of the task's event log").WithTask(t.ID)
	case t.Status.State.Terminal() && call.LastEventID >= t.LastSeq:
		return nil, a2awire.Errorf(a2awire.ErrUnsupportedOperation, "task is in a terminal state and no event follows Last-Event-ID").WithTask(t.ID)
	}
	asked := t.Status.State == taskplane.StateInputRequired && t.InputRequest > 0 && t.InputRequest <= call.LastEventID
	return &Stream{svc: s, principal: call.Principal, taskID: t.ID, view: v, after: call.LastEventID, follow: true,
		settledAt: t.LastSeq, asked: asked}, nil
}

// Close gives the stream's slot back (see max_streams); Run does so when it returns, and so does
// ServeSSE. It may be called more than once.
func (st *Stream) Close() {
	if st.release != nil {
		st.release()
	}
}

// Run sends the stream's events to emit, in order, until the stream closes (nil), emit fails
// (its error), or ctx ends (ctx.Err()). It then gives the stream's slot back (Close).
func (st *Stream) Run(ctx context.Context, emit func(Event) error) error {
	defer st.Close()
	return st.run(ctx, emit)
}

// run is Run without giving the slot back: ServeSSE keeps it until its last write is done.
func (st *Stream) run(ctx context.Context, emit func(Event) error) error {
	if st.first != nil {
		if err := emit(*st.first); err != nil {
			return err
		}
	}
	if !st.follow {
		return nil
	}
	asked := st.asked // the last status event seen was an INPUT_REQUIRED
	if asked && st.after >= st.settledAt {
		return nil // resumed after the question the task waits on, and nothing followed it
	}
	// A question met live (past the replay) closes the stream after the rest of the update that
	// asked it (an artifact written with the question), which shares the question's time; an
	// event of a later update is not sent.
	var update time.Time
	return st.svc.plane.FollowStream(ctx, st.principal, st.taskID, st.after, func(ev taskplane.TaskEvent) error {
		if !update.IsZero() && !ev.Time.Equal(update) {
			return taskplane.ErrStopFollowing
		}
		if ev.Kind == taskplane.EventStatus && ev.Status != nil {
			asked = ev.Status.Status.State == taskplane.StateInputRequired
			if asked && ev.Seq >= st.settledAt {
				// The events of the update are all committed with it: deliver up to the
				// task's last one, stopping early at one of a later update.
				t, err := st.svc.plane.FollowedTask(ctx, st.principal, st.taskID)
				if err != nil {
					return err
				}
				st.settledAt, update = max(t.LastSeq, ev.Seq), ev.Time
			} else if !asked {
				update = time.Time{}
			}
		}
		r := a2awire.FromEvent(ev, st.view)
		if r != nil {
			if err := emit(Event{Seq: ev.Seq, Response: r}); err != nil {
				return err
			}
		}
		switch {
		case ev.Kind == taskplane.EventStatus && ev.Status != nil && ev.Status.Status.State.Terminal():
			return taskplane.ErrStopFollowing
		case ev.Kind == taskplane.EventTask && ev.Task != nil && ev.Task.Status.State.Terminal():
			return taskplane.ErrStopFollowing
		case asked && ev.Seq >= st.settledAt:
			return taskplane.ErrStopFollowing
		}
		return nil
	})
}

// OneEventStream returns a stream of the single event ev, for a binding that frames an early
// error as a stream event.
func (s *Service) OneEventStream(ev Event) *Stream {
	return &Stream{svc: s, first: &ev}
}

// withSlot runs open while holding a stream slot of principal. The slot goes with the stream
// (ServeSSE gives it back when the stream ends), or back at once if open fails or panics.
func (s *Service) withSlot(principal string, open func() (*Stream, error)) (*Stream, error) {
	release, err := s.takeStreamSlot(principal)
	if err != nil {
		return nil, err
	}
	kept := false
	defer func() {
		if !kept {
			release()
		}
	}()
	st, err := open()
	if err != nil {
		return nil, err
	}
	st.release, kept = release, true
	return st, nil
}

// takeStreamSlot holds a stream slot of principal, or refuses with RESOURCE_EXHAUSTED. The
// returned func gives it back.
func (s *Service) takeStreamSlot(principal string) (func(), error) {
	release, full := s.streams.take(principal, s.lim.MaxStreamsPerPrincipal, s.lim.MaxStreams)
	switch full {
	case principalFull:
		return nil, a2awire.Errorf(a2awire.ErrResourceExhausted,
			"this caller has reached its limit of %d open streams; close one or retry later", s.lim.MaxStreamsPerPrincipal)
	case serverFull:
		return nil, a2awire.Errorf(a2awire.ErrResourceExhausted, "the server has as many streams open as it allows; retry later")
	}
	return release, nil
}

// OpenStreams reports how many streams hold a slot now (SendStreamingMessage, SubscribeToTask,
// over both bindings): from the moment one is admitted, before its first write, until it ends.
func (s *Service) OpenStreams() int { return s.streams.held() }
