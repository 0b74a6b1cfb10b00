// Package results sends a native task's question or outcome home: when a task that came from a
// provider source (not an A2A caller) reaches INPUT_REQUIRED / AUTH_REQUIRED, or a terminal state,
// the wake queue hands it to Home (a taskplane.Results), which prepares a delivery to the task's
// origin source through the delivery engine: a question (delivery.OpQuestion, whose delivered
// provider ID becomes the reply anchor the person's answer continues the task through), or the
// answer / failure notice (delivery.OpReply).
//
// Router routes those deliveries to the configured source instances' Senders, by the instance
// named in the task's origin locator.
package results

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
)

// Home is the taskplane.Results that prepares deliveries on an engine.
type Home struct {
	Engine *delivery.Engine
	Logger *slog.Logger
}

var _ taskplane.Results = (*Home)(nil)

// Settled prepares the delivery of t's question or outcome. The request is a function of the
// task's settled state, so calling it again finds the same delivery. A source this process has no
// route to (no Sender) gets nothing, and that is not an error.
func (h *Home) Settled(ctx context.Context, t *taskplane.Task) error {
	op, msg, ok := What(t)
	if !ok {
		return nil
	}
	req := delivery.RequestFor(t, op, msg)
	if sent, err := h.legacyNotice(ctx, t, req); err != nil || sent {
		return err
	}
	rec, err := h.Engine.Prepare(ctx, req)
	if errors.Is(err, delivery.ErrNoRoute) {
		h.log().Debug("no delivery route for the task's source", "task", t.ID, "source", t.Origin.Source)
		return nil
	}
	if err != nil {
		return fmt.Errorf("send task %s home: %w", t.ID, err)
	}
	h.log().Info("task result scheduled for delivery", "task", t.ID, "source", t.Origin.Source,
		"operation", op, "delivery", rec.ID, "state", rec.State)
	return nil
}

// legacyNotice reports whether the notice of t's current ask was already prepared by a build whose
// notice IDs did not name the input request ("notice-<task>-<state>"): a result handed over
// again after an upgrade (a wake not yet retired) then finds it instead of telling the person a
// second time. A delivery under the old ID made before the current ask was for an earlier one.
func (h *Home) legacyNotice(ctx context.Context, t *taskplane.Task, req delivery.Request) (bool, error) {
	old := legacyNoticeID(t)
	if req.Operation != delivery.OpQuestion || req.Message.ID == old || !strings.HasPrefix(req.Message.ID, old+"-") {
		return false, nil
	}
	req.Message.ID = old
	id, err := delivery.ID(req)
	if err != nil {
		return false, err
	}
	rec, err := h.Engine.Get(ctx, t.Origin.Principal, id)
	switch {
	case errors.Is(err, delivery.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("send task %s home: %w", t.ID, err)
	}
	return !rec.CreatedAt.Before(t.Status.Timestamp), nil
}

// legacyNoticeID is a notice's ID without the input request: every notice's, as older builds
// made them, and a terminal task's still.
func legacyNoticeID(t *taskplane.Task) string { return "notice-" + t.ID + "-" + string(t.Status.State) }

func (h *Home) log() *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return slog.Default()
}

// What returns the operation and message that tell t's origin where t stands: a question for an
// interrupted task, the answer (or a notice) for a terminal one. ok is false for a task that is
// neither.
func What(t *taskplane.Task) (op string, msg taskplane.Message, ok bool) {
	st := t.Status.State
	switch {
	case st.Interrupted():
		op = delivery.OpQuestion
	case st.Terminal():
		op = delivery.OpReply
	default:
		return "", taskplane.Message{}, false
	}
	if t.Status.Message != nil && len(t.Status.Message.Parts) > 0 {
		return op, *t.Status.Message, true
	}
	// No status message: a fixed notice, with an id derived from the task and state so the same
	// outcome is always the same delivery. A question's notice names its input request too: each
	// time the task asks, the person is told again, and the reply anchor of each notice carries the
	// input request it asked (a notice sent late, after the task asked again, answers nothing).
	id := legacyNoticeID(t)
	if st.Interrupted() && t.InputRequest != 0 {
		id += "-" + strconv.FormatInt(t.InputRequest, 10)
	}
	return op, taskplane.Message{ID: id, Role: taskplane.RoleAgent,
		TaskID: t.ID, ContextID: t.ContextID, Parts: []taskplane.Part{taskplane.TextPart(notice(st))}}, true
}

func notice(st taskplane.State) string {
	switch st {
	case taskplane.StateCompleted:
		return "Done."
	case taskplane.StateFailed:
		return "The task failed."
	case taskplane.StateCanceled:
		return "The task was canceled."
	case taskplane.StateRejected:
		return "The task was rejected."
	case taskplane.StateAuthRequired:
		return "The agent needs you to authenticate to continue."
	default:
		return "The agent needs more input to continue."
	}
}

// Router is a delivery.Router over configured source instances: a delivery goes to the Sender of
// the instance its locator names ({"instance": …}), or to the only instance of its source and
// principal. Each source's recovery class is its matrix row's delivery_recovery.
type Router struct {
	mu        sync.RWMutex
	instances map[string][]hosted // source name → its instances that send
}

type hosted struct {
	instance  string
	principal string
	sender    sources.Sender
}

// NewRouter returns an empty router.
func NewRouter() *Router { return &Router{instances: map[string][]hosted{}} }

// FromHost returns a router over the host's instances that implement sources.Sender.
func FromHost(h *sources.Host) *Router {
	r := NewRouter()
	h.Each(func(in sources.Instance, src sources.Source) { r.Add(in, src) })
	return r
}

// SendChecker is implemented by Senders that can tell whether this instance is configured to
// send at all (a webhook without a callback URL is not); one that says no is not routed.
type SendChecker interface {
	Sends() bool
}

// Add routes the deliveries of one instance; an instance that is not a Sender, or whose
// SendChecker says it does not send, is skipped.
func (r *Router) Add(in sources.Instance, src sources.Source) {
	s, ok := src.(sources.Sender)
	if !ok {
		return
	}
	if sc, ok := src.(SendChecker); ok && !sc.Sends() {
		return
	}
	r.mu.Lock()
	r.instances[in.Source] = append(r.instances[in.Source], hosted{instance: in.Instance, principal: in.Principal, sender: s})
	r.mu.Unlock()
}

// Sources lists the sources with a route, sorted (the engine claims only their deliveries).
func (r *Router) Sources() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.instances))
	for s := range r.instances {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Route implements delivery.Router.
func (r *Router) Route(principal, source string) (delivery.Route, error) {
	r.mu.RLock()
	hs := slices.Clone(r.instances[source])
	r.mu.RUnlock()
	var mine []hosted
	for _, h := range hs {
		if h.principal == principal {
			mine = append(mine, h)
		}
	}
	if len(mine) == 0 {
		return delivery.Route{}, fmt.Errorf("%w %q for principal %s", delivery.ErrNoRoute, source, principal)
	}
	recovery := delivery.Ambiguous
	if row, err := sources.Declaration(source); err == nil && row.DeliveryRecovery != "" {
		recovery = delivery.Recovery(row.DeliveryRecovery)
	}
	s := &instanceSender{source: source, instances: mine}
	for _, h := range mine {
		if _, ok := h.sender.(sources.Reconciler); !ok {
			// Not every instance can look a delivery up: no Reconciler at all, so a lookup-class
			// delivery with an unknown outcome fails closed.
			return delivery.Route{Sender: s, Recovery: recovery}, nil
		}
	}
	return delivery.Route{Sender: reconcilingSender{s}, Recovery: recovery}, nil
}

// instanceSender sends through the instance a delivery's locator names.
type instanceSender struct {
	source    string
	instances []hosted
}

func (s *instanceSender) pick(d delivery.Delivery) (hosted, error) {
	var loc struct {
		Instance string `json:"instance"`
	}
	_ = json.Unmarshal(d.Locator, &loc) // a locator without an instance names none
	for _, h := range s.instances {
		if loc.Instance != "" && h.instance == loc.Instance {
			return h, nil
		}
	}
	if loc.Instance == "" && len(s.instances) == 1 {
		return s.instances[0], nil
	}
	return hosted{}, delivery.Permanent(fmt.Errorf("%w: %s has no instance %q for principal %s",
		delivery.ErrNoRoute, s.source, loc.Instance, d.Principal))
}

// Send implements delivery.Sender.
func (s *instanceSender) Send(ctx context.Context, d delivery.Delivery) (delivery.Receipt, error) {
	h, err := s.pick(d)
	if err != nil {
		return delivery.Receipt{}, err
	}
	r, err := h.sender.Send(ctx, sources.Delivery(d))
	return delivery.Receipt(r), err
}

// Lane implements delivery.Laner: the rate lane of d is the one the instance it goes out through
// keeps (Slack: one per channel), or none.
func (s *instanceSender) Lane(d delivery.Delivery) string {
	h, err := s.pick(d)
	if err != nil {
		return ""
	}
	if l, ok := h.sender.(sources.Laner); ok {
		return l.Lane(sources.Delivery(d))
	}
	return ""
}

// reconcilingSender is an instanceSender whose instances all look deliveries up.
type reconcilingSender struct{ *instanceSender }

// Lookup implements delivery.Reconciler.
func (s reconcilingSender) Lookup(ctx context.Context, d delivery.Delivery) (delivery.Receipt, bool, error) {
	h, err := s.pick(d)
	if err != nil {
		return delivery.Receipt{}, false, err
	}
	rc, ok := h.sender.(sources.Reconciler)
	if !ok {
		return delivery.Receipt{}, false, errors.New("instance cannot look deliveries up")
	}
	r, found, err := rc.Lookup(ctx, sources.Delivery(d))
	return delivery.Receipt(r), found, err
}
