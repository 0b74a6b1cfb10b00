package a2aservice

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// settled reports whether a blocking send stops waiting: terminal or interrupted.
func settled(s taskplane.State) bool { return s.Terminal() || s.Interrupted() }

// view returns how tasks are shown to call: at most historyLength (bounded by the server's
// MaxHistoryLength; nil means the server maximum) history messages.
func (s *Service) view(call Call, historyLength *int, artifacts bool) a2awire.View {
	h := s.lim.MaxHistoryLength
	if historyLength != nil && *historyLength < h {
		h = *historyLength
	}
	return a2awire.View{History: h, Artifacts: artifacts, Extensions: call.Extensions, Locator: s.locator(call)}
}

func (s *Service) locator(call Call) *a2awire.Locator {
	u := s.cfg.PublicURL
	binding := call.Binding
	if binding == "" {
		binding = a2awire.BindingHTTPJSON
	}
	if binding == a2awire.BindingJSONRPC {
		u += JSONRPCPath
	}
	return &a2awire.Locator{InterfaceURL: u, ProtocolBinding: binding, ProtocolVersion: a2awire.ProtocolVersion, Tenant: call.Tenant}
}

// accept turns a SendMessageRequest into a task-plane event and accepts it. A message without
// taskId whose messageId has no claim yet is first offered to the executor's DirectResponder;
// its reply makes the outcome a direct Message, recorded with the claim so a duplicate returns it
// verbatim.
func (s *Service) accept(ctx context.Context, call Call, req *a2awire.SendMessageRequest) (taskplane.Acceptance, error) {
	msg := a2awire.ToMessage(req.Message)
	if err := s.checkMediaTypes(msg.Parts); err != nil {
		return taskplane.Acceptance{}, err
	}
	var push []taskplane.PushConfig
	if req.Configuration.PushConfig {
		if err := s.PushSupported(); err != nil {
			return taskplane.Acceptance{}, err
		}
		pc := a2awire.ToPushConfig(*req.Configuration.PushNotificationConfig)
		if err := s.checkPushURL(ctx, "configuration.taskPushNotificationConfig.url", pc.URL); err != nil {
			return taskplane.Acceptance{}, err
		}
		push = []taskplane.PushConfig{pc}
	}
	ev := taskplane.Event{
		Principal: call.Principal,
		Source:    taskplane.SourceA2A,
		Identity:  msg.ID,
		ContextID: msg.ContextID,
		TaskID:    msg.TaskID,
		Message:   msg,
		Metadata:  req.Metadata,
		// Registered in the acceptance's transaction, on the task it creates or continues.
		PushConfigs: push,
	}
	if s.cfg.FreshSends {
		// Each send is its own event: the claim is a fresh id, and the message's (cut to stay
		// within taskplane.MaxIdentityLen) for the evidence.
		ev.Identity = uuid.NewString() + "#" + strings.ToValidUTF8(msg.ID[:min(len(msg.ID), 400)], "")
	}
	// outfitter-task/v1 request data (a settlement, redo links) is read only when the caller
	// activated the extension (A2A-Extensions) or the message lists it in its extensions: without
	// either, the key is plain metadata, so a client that echoes a task's metadata settles and
	// links nothing, and its send to a finished task is refused as any other.
	outfitter := call.Extensions.Has(a2awire.ExtOutfitterTask) || slices.Contains(msg.Extensions, a2awire.ExtOutfitterTask)
	if outfitter && msg.TaskID == "" {
		ev.Redo = taskplane.RedoOf(req.Metadata, msg.Metadata)
	}
	if outfitter && msg.TaskID != "" {
		// A send to a finished task that carries an outfitter-task/v1 outcome settles it
		// (docs/executors.md): the state stays, the outcome and feedback are recorded, under the
		// messageId's claim, so a resend replays it, and a resend of a send accepted as an
		// ordinary continuation (the task was still open then) replays that. A task not finished
		// is continued as usual; the metadata travels with the message.
		if st, ok := taskplane.SettlementOf(req.Metadata, msg.Metadata); ok {
			if err := st.Validate(); err != nil {
				return taskplane.Acceptance{}, a2awire.Invalid("metadata", "%s", err.Error())
			}
			ev.Settlement = &st
		}
	}
	if dr, ok := s.exec.(taskplane.DirectResponder); ok && msg.TaskID == "" {
		// A resend is answered from its claim (a duplicate, or a conflict): the agent is not
		// asked again. (Two first sends racing may both ask; one acceptance wins.) A send the
		// plane refuses is refused here, before the agent is asked; with FreshSends, whose fresh
		// identity has no claim, that is all there is to check.
		var (
			claimed bool
			err     error
		)
		if s.cfg.FreshSends {
			err = ev.Validate()
		} else {
			claimed, err = s.plane.Claimed(ctx, ev) // validates ev first
		}
		if err != nil {
			return taskplane.Acceptance{}, err
		}
		if !claimed {
			if reply, ok := dr.RespondDirectly(ctx, call.Principal, msg); ok && reply != nil {
				r := *reply
				if r.ID == "" {
					r.ID = uuid.NewString()
				}
				r.Role = taskplane.RoleAgent
				ev.Reply = &r
			}
		}
	}
	for attempt := 0; ; attempt++ {
		acc, err := s.plane.Accept(ctx, ev)
		if errors.Is(err, taskplane.ErrClaimPending) && attempt < 20 {
			select {
			case <-ctx.Done():
				return acc, ctx.Err()
			case <-time.After(25 * time.Millisecond):
			}
			continue
		}
		if err == nil && len(push) > 0 && acc.Task != nil && acc.Outcome != taskplane.Duplicate {
			s.cfg.Push.Registered(call.Principal, acc.Task.ID)
		}
		return acc, pushError(err)
	}
}

// SendMessage accepts a message and answers with a direct Message or the Task. Unless
// configuration.returnImmediately is set it waits until the task is terminal or interrupted,
// at most BlockingTimeout, then returns the current snapshot; past MaxBlockingSends or
// MaxBlockingSendsPerPrincipal it does not wait (see settle).
func (s *Service) SendMessage(ctx context.Context, call Call, req *a2awire.SendMessageRequest) (*a2awire.SendMessageResponse, error) {
	acc, err := s.accept(ctx, call, req)
	if err != nil {
		return nil, err
	}
	v := s.view(call, req.Configuration.HistoryLength, true)
	if acc.Message != nil {
		m := a2awire.FromMessage(*acc.Message, v)
		return &a2awire.SendMessageResponse{Message: &m}, nil
	}
	t := acc.Task
	if acc.Settled != nil {
		// Settled in the acceptance: committed so, nothing to wait for, and what even a
		// returnImmediately send answers with (the task is no longer SUBMITTED).
		t = acc.Settled
	} else if !req.Configuration.ReturnImmediately {
		if t, err = s.settle(ctx, call.Principal, t); err != nil {
			return nil, err
		}
	}
	return &a2awire.SendMessageResponse{Task: a2awire.FromTask(t, v)}, nil
}

// settle waits until t is terminal or interrupted, BlockingTimeout passes, or the service
// closes, and returns the task as it then is.
//
// A waiting send holds a goroutine and a connection, so it holds one of the slots bounded by
// MaxBlockingSends and MaxBlockingSendsPerPrincipal while it waits, and only then. A send past
// either bound does not wait: its message is accepted all the same, and it answers at once with
// the task as accepted, not settled, as a send whose blocking timeout passed does (the protocol
// allows a blocking send to answer with a task not yet settled). Not with an error, which would
// read as "not accepted" and invite the same send again.
func (s *Service) settle(ctx context.Context, principal string, t *taskplane.Task) (*taskplane.Task, error) {
	if settled(t.Status.State) {
		return t, nil
	}
	release, full := s.sends.take(principal, s.lim.MaxBlockingSendsPerPrincipal, s.lim.MaxBlockingSends)
	if full != notFull {
		return t, nil
	}
	defer release()
	wctx, cancel := s.withBase(ctx)
	defer cancel()
	wctx, cancelT := context.WithTimeout(wctx, s.cfg.BlockingTimeout)
	defer cancelT()
	nt, err := s.plane.WaitTask(wctx, t, func(t *taskplane.Task) bool { return settled(t.Status.State) })
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err == nil {
		return nt, nil
	}
	if wctx.Err() != nil {
		// Past the blocking timeout: the task as it stands, read once.
		if nt, err = s.plane.GetTask(ctx, principal, t.ID); err == nil {
			return nt, nil
		}
	}
	// The message is accepted, durably: a failed read of what became of it answers with the task
	// as accepted (the caller gets its id and can get it again), not an error that would read as
	// "not accepted" and be sent again.
	s.log.Warn("blocking send: reading the task failed; answering with the task as accepted", "task", t.ID, "err", err)
	return t, nil
}

// BlockingSends reports how many blocking sends hold a slot now (over both bindings): those
// waiting for their task to settle, from the start of the wait until its answer is ready.
func (s *Service) BlockingSends() int { return s.sends.held() }

// BlockingSendsUnwaited reports how many blocking sends so far were answered at once, without
// waiting, because the caller's bound (MaxBlockingSendsPerPrincipal) or the server's
// (MaxBlockingSends) was full.
func (s *Service) BlockingSendsUnwaited() (principal, server int64) {
	return s.sends.refusedBy(principalFull), s.sends.refusedBy(serverFull)
}

// GetTask returns a task of the caller.
func (s *Service) GetTask(ctx context.Context, call Call, req *a2awire.GetTaskRequest) (*a2awire.Task, error) {
	t, err := s.plane.GetTask(ctx, call.Principal, req.ID)
	if err != nil {
		return nil, err
	}
	return a2awire.FromTask(t, s.view(call, req.HistoryLength, true)), nil
}

// ListTasks lists the caller's tasks, newest status first, a page at a time.
func (s *Service) ListTasks(ctx context.Context, call Call, req *a2awire.ListTasksRequest) (*a2awire.ListTasksResponse, error) {
	q := taskplane.ListQuery{ContextID: req.ContextID, StatusAfter: req.StatusTimestampAfter, PageToken: req.PageToken,
		PageSize: s.lim.DefaultPageSize, MaxBytes: s.lim.MaxPageBytes}
	if req.PageSize != nil {
		if *req.PageSize < 1 || *req.PageSize > s.lim.MaxPageSize {
			return nil, a2awire.Invalid("pageSize", "must be between 1 and %d", s.lim.MaxPageSize)
		}
		q.PageSize = *req.PageSize
	}
	if req.Status != "" && req.Status != a2awire.TaskStateUnspecified {
		st, ok := a2awire.ToState(req.Status)
		if !ok {
			return nil, a2awire.Invalid("status", "unknown task state")
		}
		q.State = st
	}
	page, err := s.plane.ListTasks(ctx, call.Principal, q)
	if err != nil {
		if errors.Is(err, taskplane.ErrInvalid) {
			return nil, a2awire.Invalid("pageToken", "is not a token this server issued")
		}
		return nil, err
	}
	v := s.view(call, req.HistoryLength, req.IncludeArtifacts)
	out := &a2awire.ListTasksResponse{Tasks: make([]a2awire.Task, 0, len(page.Tasks)),
		NextPageToken: page.NextPageToken, PageSize: page.PageSize, TotalSize: page.TotalSize}
	for _, t := range page.Tasks {
		out.Tasks = append(out.Tasks, *a2awire.FromTask(t, v))
	}
	return out, nil
}

// CancelTask cancels a task of the caller: the plane records CANCELED, the dispatcher stops a
// running turn, and an executor that implements taskplane.Canceler is told, once by this process
// (a turn running in another process sharing the store tells it too; see docs/executors.md).
func (s *Service) CancelTask(ctx context.Context, call Call, req *a2awire.CancelTaskRequest) (*a2awire.Task, error) {
	t, canceled, err := s.plane.Cancel(ctx, call.Principal, req.ID, req.Metadata)
	if err != nil {
		return nil, err
	}
	if !canceled { // already CANCELED: cancel is idempotent, and its effects happened the first time
		return a2awire.FromTask(t, s.view(call, nil, true)), nil
	}
	// The executor hears of the cancel once: a turn of this process whose update was refused (or
	// whose heartbeat saw CANCELED) since the cancel committed has told it already.
	tell := true
	if s.disp != nil {
		tell = s.disp.CancelTurn(t.ID)
	}
	if c, ok := s.exec.(taskplane.Canceler); ok && tell {
		var timeout time.Duration
		if s.disp != nil {
			timeout = s.disp.CancelTimeout
		}
		if err := taskplane.TellCanceler(ctx, c, t, timeout); err != nil {
			s.log.WarnContext(ctx, "executor cancel failed", "task", t.ID, "err", err)
		}
	}
	return a2awire.FromTask(t, s.view(call, nil, true)), nil
}

// PushNotConfigured answers every push-notification-config operation: the card declares
// pushNotifications false. The caller is authenticated first, so the answer reveals nothing.
func (s *Service) PushNotConfigured() error {
	return a2awire.Errorf(a2awire.ErrPushNotificationNotSupported, "push notifications are not supported")
}
