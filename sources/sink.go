package sources

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/channels-dev/channels/checkpoint"
	matrix "github.com/channels-dev/channels/conformance-matrix"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// Sink is where a source hands what it received: events to accept, and the evidence of what it
// did not accept. It is safe for concurrent use. One Sink serves one source name; the Host gives
// each configured instance a Sink of its own, fixed to the instance's principal (ForPrincipal).
type Sink struct {
	plane     *taskplane.Plane
	row       matrix.Row
	now       func() time.Time
	log       *slog.Logger
	observe   func(Event, taskplane.Acceptance, error)
	counts    *counter
	principal string // when set, the only principal this Sink records for
}

// SinkOption configures a Sink.
type SinkOption func(*Sink)

// WithDeclaration gives the Sink a declaration instead of the matrix row: for tests of rows the
// matrix does not have (sourcetest.RunWithDeclaration). It reaches this Sink alone; a source kept
// outside this module declares its row with Declare instead, so that the executors' question
// policy, deliveries and reply anchors read it too. The row must be valid and name the Sink's
// source.
func WithDeclaration(row matrix.Row) SinkOption { return func(s *Sink) { s.row = row } }

// WithObserver calls fn after every Accept with the event and its result (tests, metrics).
func WithObserver(fn func(Event, taskplane.Acceptance, error)) SinkOption {
	return func(s *Sink) { s.observe = fn }
}

// WithClock sets the clock of evidence and count windows (tests).
func WithClock(now func() time.Time) SinkOption { return func(s *Sink) { s.now = now } }

// WithLogger sets the logger (nil: slog.Default()).
func WithLogger(l *slog.Logger) SinkOption {
	return func(s *Sink) {
		if l != nil {
			s.log = l
		}
	}
}

// ForPrincipal fixes the Sink to one principal: an event, evidence, a checkpoint (read or
// resync) or a reply anchor of another is refused (Rejected counts under this one), so a source
// that took a principal from what its provider sent cannot record or read anything of someone
// else.
func ForPrincipal(principal string) SinkOption { return func(s *Sink) { s.principal = principal } }

// ErrForeignPrincipal is returned for an event, evidence, checkpoint or anchor of a principal the
// Sink is not fixed to (a source's bug). It is not Permanent: nothing is recorded, and the source does not settle.
var ErrForeignPrincipal = errors.New("principal is not the one of this source instance")

// checkPrincipal refuses principal unless the Sink records for it.
func (s *Sink) checkPrincipal(principal string) error {
	if s.principal == "" || principal == s.principal {
		return nil
	}
	s.log.Error("a source asked its sink to act for another principal; nothing was recorded or read", "source", s.row.Source)
	return fmt.Errorf("%s sink: %w", s.row.Source, ErrForeignPrincipal)
}

// WithCountWindow sets how long counted evidence (non-work, rejected) is summed before one row
// per reason is written (default DefaultCountWindow).
func WithCountWindow(d time.Duration) SinkOption { return func(s *Sink) { s.counts.window = d } }

// NewSink returns the Sink of the named source over plane. Its declaration is the source's row of
// the conformance matrix (or WithDeclaration's).
func NewSink(plane *taskplane.Plane, name string, opts ...SinkOption) (*Sink, error) {
	s := &Sink{plane: plane, now: time.Now, log: slog.Default(), counts: newCounter()}
	for _, o := range opts {
		o(s)
	}
	if s.row.Source == "" {
		row, err := Declaration(name)
		if err != nil {
			return nil, err
		}
		s.row = row
	}
	if s.row.Source != name {
		return nil, fmt.Errorf("sink for %s: declaration is the row of %q", name, s.row.Source)
	}
	if err := s.row.Validate(); err != nil {
		return nil, fmt.Errorf("sink for %s: %w", name, err)
	}
	return s, nil
}

// Source returns the source name.
func (s *Sink) Source() string { return s.row.Source }

// Declaration returns the source's matrix row.
func (s *Sink) Declaration() matrix.Row { return s.row }

// Plane returns the task plane the Sink accepts into.
func (s *Sink) Plane() *taskplane.Plane { return s.plane }

// Accept durably accepts ev through the task plane. The source acknowledges its provider only
// when Accept returns nil; on a Permanent error it settles the event without acceptance (the
// evidence is already written); on any other error it leaves the event unacknowledged so the
// provider delivers it again.
//
// The Sink, not the source, decides what may select a Task: it clears every task and context id
// the message carries, and passes ReplyTo on only when the row declares the reply-anchor method.
//
// An event's Checkpoint must name the source instance it was read by (Position.Instance): one
// that does not is refused with checkpoint.ErrNoInstance, not Permanent, and nothing is written.
func (s *Sink) Accept(ctx context.Context, ev Event) (taskplane.Acceptance, error) {
	err := s.checkPrincipal(ev.Principal)
	if err == nil && ev.Checkpoint != nil && ev.Checkpoint.Instance == "" {
		err = fmt.Errorf("accept %s event %q: %w", s.row.Source, ev.Identity, checkpoint.ErrNoInstance)
	}
	if err != nil {
		if s.observe != nil {
			s.observe(ev, taskplane.Acceptance{}, err)
		}
		return taskplane.Acceptance{}, err
	}
	msg := ev.Message
	msg.TaskID, msg.ContextID, msg.ReferenceTaskIDs = "", "", nil
	tev := taskplane.Event{
		Principal: ev.Principal, Source: s.row.Source, Identity: ev.Identity,
		ConversationKey: ev.ConversationKey, Message: msg, Locator: ev.Locator, Metadata: ev.Metadata,
	}
	if s.row.Continuation.Method == matrix.ReplyAnchor {
		tev.ReplyTo = ev.ReplyTo
	}
	if ev.Checkpoint != nil {
		tev.Checkpoint = ev.Checkpoint.Taskplane()
	}
	acc, err := s.plane.Accept(ctx, tev)
	var conflict *taskplane.ConflictError
	if errors.As(err, &conflict) && ev.Checkpoint != nil {
		// A conflict is settled with its evidence written, but the acceptance changed nothing:
		// the position moves past the event here, or a pull source would fetch it on every poll.
		if cerr := s.plane.Store().Update(ctx, func(ctx context.Context, tx store.Tx) error {
			_, _, err := checkpoint.AdvanceTx(ctx, tx, ev.Principal, s.row.Source, *ev.Checkpoint, s.clock())
			return err
		}); cerr != nil {
			err = fmt.Errorf("conflicting event's position not recorded (%v): %w", err, cerr) // not Permanent: fetched again
		}
	}
	if err != nil && errors.Is(err, taskplane.ErrInvalid) {
		// The source built an event the task plane refuses: a malformed envelope, recorded then
		// settled. If recording fails, the event stays unacknowledged.
		if merr := s.Malformed(ctx, ev.Principal, "invalid-event", ev.Checkpoint,
			map[string]any{"identity": ev.Identity, "error": err.Error()}); merr != nil {
			// Not Permanent: the invalid event is not settled until its evidence is written.
			err = fmt.Errorf("invalid event not recorded (%v): %w", err, merr)
		}
	}
	if s.observe != nil {
		s.observe(ev, acc, err)
	}
	return acc, err
}

// Permanent reports whether an Accept error settles the event: redelivering it cannot succeed
// (a different payload under a claimed identity, an invalid event) and its evidence is written.
// A source acknowledges such an event (or answers 4xx) instead of asking for a redelivery.
func Permanent(err error) bool {
	var conflict *taskplane.ConflictError
	return errors.As(err, &conflict) || errors.Is(err, taskplane.ErrInvalid)
}

// NonWork counts an event that carries no work (our own bot's message, a ping) under reason. It
// makes no Task. Without a position the count is summed in memory and written as one non-work row
// per reason per window (a bounded counter: a flood of non-work writes a row per window, not per
// event). With a position (of the instance that read the event), the evidence and the checkpoint
// advance are written now, together, and an error means the event must stay unacknowledged.
func (s *Sink) NonWork(ctx context.Context, principal, reason string, pos *checkpoint.Position) error {
	if err := s.checkPrincipal(principal); err != nil {
		return err
	}
	if pos != nil {
		return s.classify(ctx, principal, EvidenceNonWork, reason, *pos, nil)
	}
	s.count(ctx, principal, EvidenceNonWork, reason)
	return nil
}

// Rejected counts a request refused before it could be trusted (a bad signature, a stale
// timestamp, an oversize or unreadable body: see ReadBody). Like NonWork it is a bounded counter: an unauthenticated sender
// cannot make the store grow by one row per request.
func (s *Sink) Rejected(ctx context.Context, principal, reason string) {
	if s.principal != "" {
		principal = s.principal
	}
	s.count(ctx, principal, EvidenceRejected, reason)
}

// Malformed records a malformed envelope from a trusted sender (a verified request whose body
// cannot be read as an event), one row each, before the source settles it. With a position the
// checkpoint of its instance moves past it in the same transaction. An error means nothing was
// recorded and the event must stay unacknowledged.
func (s *Sink) Malformed(ctx context.Context, principal, reason string, pos *checkpoint.Position, detail map[string]any) error {
	if err := s.checkPrincipal(principal); err != nil {
		return err
	}
	if pos != nil {
		return s.classify(ctx, principal, EvidenceMalformed, reason, *pos, detail)
	}
	d := map[string]any{"reason": reason}
	for k, v := range detail {
		d[k] = v
	}
	return s.plane.Store().Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return insertEvidence(ctx, tx, principal, s.row.Source, EvidenceMalformed, "", d, s.clock())
	})
}

func (s *Sink) classify(ctx context.Context, principal, kind, reason string, pos checkpoint.Position, detail map[string]any) error {
	d := map[string]any{"reason": reason, "count": 1}
	for k, v := range detail {
		d[k] = v
	}
	err := s.plane.Store().Update(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := checkpoint.ClassifyTx(ctx, tx, principal, s.row.Source, pos, kind, d, s.clock())
		return err
	})
	if err != nil {
		return fmt.Errorf("%s %s event at seq %d: %w", s.row.Source, kind, pos.Seq, err)
	}
	return nil
}

// Checkpoint returns the stored intake position of the instance of this source that principal
// configured (sources.Config.Instance): where the instance resumes. See checkpoint.Get, also for
// a position stored before positions were kept per instance.
func (s *Sink) Checkpoint(ctx context.Context, principal, instance string) (checkpoint.Checkpoint, error) {
	if err := s.checkPrincipal(principal); err != nil {
		return checkpoint.Checkpoint{}, err
	}
	return checkpoint.Get(ctx, s.plane.Store(), principal, s.row.Source, instance)
}

// Resync moves the position of principal's instance pos.Instance to pos after a discontinuity (a
// changed UIDVALIDITY) and records checkpoint-resync evidence; see checkpoint.Resync.
func (s *Sink) Resync(ctx context.Context, principal string, pos checkpoint.Position, reason string) (checkpoint.Checkpoint, error) {
	if err := s.checkPrincipal(principal); err != nil {
		return checkpoint.Checkpoint{}, err
	}
	return checkpoint.Resync(ctx, s.plane.Store(), principal, s.row.Source, pos, reason, s.clock())
}

// RecordAnchor stores providerID, the id of a question this source delivered for taskID, as a
// reply anchor. A source whose row declares no reply-anchor continuation is refused with
// taskplane.ErrContinuationNotAllowed: an anchor it recorded would let a reply select a Task on a
// provider that has no per-message reply relation.
func (s *Sink) RecordAnchor(ctx context.Context, principal, providerID, taskID string) error {
	if err := s.checkPrincipal(principal); err != nil {
		return err
	}
	if err := AllowsAnchors(s.row); err != nil {
		return err
	}
	return s.plane.RecordAnchor(ctx, principal, s.row.Source, providerID, taskID)
}

// Flush writes the counted evidence now (Run calls it every window and when it stops).
func (s *Sink) Flush(ctx context.Context) error {
	return s.counts.flush(ctx, s)
}

func (s *Sink) clock() time.Time { return s.now().UTC().Truncate(time.Microsecond) }
