package taskplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/channels-dev/channels/internal/exactjson"
	"github.com/channels-dev/channels/taskplane/store"
)

// SourceA2A is the source name of A2A intake: its identity is the client's messageId.
const SourceA2A = "a2a"

// Evidence kinds written by the task plane.
const (
	EvidenceAccepted          = "accepted"
	EvidenceContinued         = "continued"
	EvidenceDuplicate         = "duplicate"
	EvidenceDuplicateConflict = "duplicate-conflict"
	EvidenceAnchorMiss        = "anchor-miss"
	EvidenceRetention         = "retention"
)

// Event is one unit of intake: a provider event turned into an A2A message by its source, or an
// A2A client's message.
type Event struct {
	// Principal owns everything the event touches.
	Principal string
	// Source is the registered source name ("a2a" for A2A intake).
	Source string
	// Identity is the event identity within (Principal, Source): a provider event id, or the A2A
	// messageId.
	Identity string
	// ConversationKey maps the event to a context: events with the same (Principal, Source,
	// ConversationKey) share one contextId. It never selects a Task.
	ConversationKey string
	// ContextID is a client-supplied contextId (A2A). It attaches only when the principal owns it;
	// otherwise the event gets a fresh context.
	ContextID string
	// TaskID is an explicit continuation, honoured only from a trusted caller that authenticated
	// Principal (the A2A bindings). Sources never set it: a taskId in a provider body is data.
	TaskID string
	// ReplyTo is the provider message id this event directly replies to, if the provider has a
	// per-message reply relation. It continues a task only through a verified reply anchor.
	ReplyTo string
	// Message is the A2A message built from the payload (role user).
	Message Message
	// Locator holds raw provider values for the origin; opaque to the task plane.
	Locator json.RawMessage
	// Checkpoint, if set, is advanced in the same transaction: the position of the source
	// instance it names (Checkpoint.Instance), which an event without one is refused for.
	Checkpoint *Checkpoint
	// Metadata is stored on a task this event creates.
	Metadata map[string]any
	// Reply, if set, makes the outcome a direct Message instead of a Task (the executor answered
	// without a task). It is recorded with the claim so a duplicate returns it verbatim.
	Reply *Message
	// PushConfigs are registered on the task the event creates or continues, in the same
	// transaction (see SetPushConfig). They are not part of the digest; a duplicate registers
	// nothing.
	PushConfigs []PushConfig
	// Settlement, if set, makes an explicit continuation (TaskID) of a finished task settle it
	// (see Settle) instead of being refused with ErrTaskTerminal: the state stays, the message is
	// not added to the history, and the claim records the task, so a duplicate returns it
	// (Duplicate) and a different payload under the same identity is a conflict. A task not
	// finished is continued as usual. It is read from the Metadata (or the message's), which the
	// digest covers.
	Settlement *Settlement
	// Redo, if set, links the task this event creates to the task(s) it redoes (supersedes,
	// retryOf; see docs/executors.md), each of which the principal must own, or nothing is
	// accepted (ErrTaskNotFound). Like Settlement, a caller reads it from the Metadata (or the
	// message's), which the digest covers (RedoOf).
	Redo *Redo
}

// Checkpoint is a source instance's intake position: opaque bytes and a sequence that orders
// them. Checkpoints are kept per (Principal, Source, Instance): two instances of one source for
// one principal (two mailboxes) each have their own.
type Checkpoint struct {
	// Instance is the configured source instance whose provider stream the position is in.
	Instance string
	Position []byte
	Seq      int64
}

// Outcome says what Accept did.
type Outcome string

// Accept outcomes.
const (
	Created   Outcome = "created"
	Continued Outcome = "continued"
	Duplicate Outcome = "duplicate"
)

// Acceptance is the result of Accept. Exactly one of Task and Message is set.
type Acceptance struct {
	Outcome Outcome
	// Task is the task as the event left it: created (SUBMITTED) or continued. When a Dispatcher
	// of this process was idle, the acceptance also granted it the task's first turn; that (the
	// move to WORKING) is the next event in the task's log.
	Task *Task
	// Settled is the task as its first turn left it, when that turn ran in the acceptance
	// itself (a running Dispatcher's InlineExecutor): terminal or interrupted, committed with the
	// acceptance. nil otherwise.
	Settled *Task
	Message *Message
	// ContextID is the context the event landed in.
	ContextID string
	// AnchorMiss names the anchor condition that failed when the event replied to something but
	// did not continue a task ("" otherwise).
	AnchorMiss string
}

// Limits on an event's message; an event beyond them is refused with ErrInvalid.
const (
	MaxIdentityLen = 512
	MaxKeyLen      = 1024
)

// Validate reports, with an ErrInvalid error, what makes Accept refuse ev before it reads
// anything: a field missing or past its limit, an id no store can hold.
func (ev *Event) Validate() error {
	switch {
	case ev.Principal == "":
		return invalidf("event has no principal")
	case ev.Source == "":
		return invalidf("event has no source")
	case ev.Identity == "":
		return invalidf("event has no identity")
	case len(ev.Identity) > MaxIdentityLen:
		return invalidf("event identity longer than %d bytes", MaxIdentityLen)
	case len(ev.ConversationKey) > MaxKeyLen:
		return invalidf("conversation key longer than %d bytes", MaxKeyLen)
	case len(ev.Message.Parts) == 0:
		return invalidf("message has no parts")
	case ev.Message.Role != RoleUser:
		return invalidf("message role must be user")
	case ev.Checkpoint != nil && ev.Checkpoint.Instance == "":
		return invalidf("event checkpoint names no source instance")
	}
	for _, f := range []struct{ name, v string }{{"principal", ev.Principal}, {"source", ev.Source},
		{"identity", ev.Identity}, {"conversation key", ev.ConversationKey}, {"context id", ev.ContextID},
		{"task id", ev.TaskID}, {"reply-to id", ev.ReplyTo}} {
		if !storableKey(f.v) {
			return invalidf("event %s must be valid UTF-8 without NUL", f.name)
		}
	}
	return nil
}

// Claimed reports whether ev's identity has a claim: an event under it was accepted, and ev is its
// duplicate or conflicts with it. The A2A bindings ask before offering a new message to the
// executor's DirectResponder, so that a resend is answered from the claim without the agent
// working it again. An event Accept would refuse is refused here with the same error, before the
// agent is asked.
func (p *Plane) Claimed(ctx context.Context, ev Event) (bool, error) {
	if err := ev.Validate(); err != nil {
		return false, err
	}
	principal := ev.Principal
	c, err := p.store.GetClaim(ctx, principal, ev.Source, ev.Identity)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("claim: %w", err)
	case !namesTask(c):
		return true, nil
	}
	// A claim that outlived its task, which retention pruned, is new work again (as Accept has it).
	if _, err := p.store.GetTask(ctx, principal, c.TaskID); errors.Is(err, store.ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("claim's task: %w", err)
	}
	return true, nil
}

// Accept durably accepts ev in one transaction: claim and dedupe, context, continuation, task,
// history, evidence, wake and checkpoint. A caller acknowledges its provider only after Accept
// returns nil.
//
// A duplicate with the same digest returns the prior outcome (Outcome Duplicate). A duplicate
// with a different digest returns *ConflictError and records duplicate-conflict evidence. An
// explicit TaskID the principal does not own returns ErrTaskNotFound and persists nothing; one
// naming a terminal task returns ErrTaskTerminal, unless the event carries a Settlement, which it
// then records (SettledOutcome).
func (p *Plane) Accept(ctx context.Context, ev Event) (Acceptance, error) {
	if err := ev.Validate(); err != nil {
		return Acceptance{}, err
	}
	dg, err := ev.digest()
	if err != nil {
		return Acceptance{}, err
	}
	var (
		acc      Acceptance
		conflict bool
		// An idle claimer of this process, if any, gets the new task's first turn in this
		// transaction; it hears the outcome (a grant, or nil) once the transaction is over. Only
		// an event that can only make new work takes one.
		hand handOff
	)
	if hand.inline = p.inlineFor(&ev); hand.inline == nil && ev.TaskID == "" && ev.ReplyTo == "" && ev.Reply == nil {
		hand.c = p.takeClaimer()
	}
	// fnDone: the last run of the transaction's function succeeded, so if Update still failed,
	// the commit itself did, and its outcome may be unknown (a connection lost after COMMIT).
	var fnDone bool
	// A continuation racing another writer of the same task on a shared engine retries whole.
	err = p.retryConcurrent(ctx, true, func() error {
		return p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			hand.g, hand.held, hand.settled, fnDone = nil, store.Wake{}, nil, false
			if err := p.acceptTx(ctx, tx, &ev, dg, &acc, &conflict, &hand); err != nil {
				return err
			}
			fnDone = true
			return nil
		})
	})
	if err != nil && !(fnDone && hand.g != nil && p.grantCommitted(ctx, hand.g)) {
		hand.g = nil
	}
	if hand.c != nil {
		hand.c.grant <- hand.g
	}
	if err != nil {
		return Acceptance{}, fmt.Errorf("accept %s event %q: %w", ev.Source, ev.Identity, err)
	}
	if conflict {
		return Acceptance{}, &ConflictError{Source: ev.Source, Identity: ev.Identity}
	}
	acc.Settled = hand.settled
	if hand.settled != nil && hand.inline.kept != nil {
		hand.inline.kept(hand.elapsed) // the turn is committed: it counts
	}
	if acc.Task != nil && (acc.Outcome == Created || acc.Outcome == Continued) {
		p.broker.publish(ev.Principal, acc.Task.ID)
		if hand.g == nil && hand.settled == nil {
			p.pokeWakes() // a claimer must find the wake
		}
		if acc.Task.Status.State.Terminal() {
			// Refused by the admission bound: the failure notice goes home, held by a wake.
			p.sendHomeHeld(ctx, acc.Task, hand.held)
		}
	}
	return acc, nil
}

// grantCommitted reports whether g, made in an acceptance whose commit returned an error, was
// committed all the same: its wake is leased to g's owner until g's lease end. Then the claimer
// runs the turn now rather than the task waiting for the lease to run out. A read that fails
// counts as not committed (the lease's end then re-offers the wake, as before).
func (p *Plane) grantCommitted(ctx context.Context, g *Grant) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grantCheckTimeout)
	defer cancel()
	w, err := p.store.GetWake(ctx, g.Principal, g.WakeID)
	return err == nil && w.State == store.WakeActive && w.LeaseOwner == g.Owner && w.LeaseUntil.Equal(g.LeaseUntil)
}

// grantCheckTimeout bounds grantCommitted's read.
const grantCheckTimeout = 5 * time.Second

// handOff is an idle claimer an acceptance may grant its new task's first turn to, and the grant.
type handOff struct {
	c *idleClaimer
	g *Grant
	// held is the wake that holds the failure notice of a task the admission bound refused
	// (holdResultTx), released by the hand-off right after the commit.
	held store.Wake
	// inline, when set, runs the new task's first turn in the transaction instead (no claimer
	// is taken then); settled is the task as that turn left it.
	inline  *inlineTurn
	settled *Task
	elapsed time.Duration // how long the inline turn that settled it took
}

func (p *Plane) acceptTx(ctx context.Context, tx store.Tx, ev *Event, dg string, acc *Acceptance, conflict *bool, hand *handOff) error {
	*acc, *conflict = Acceptance{}, false
	now := p.clock()
	if ev.ConversationKey != "" && ev.TaskID == "" && ev.ReplyTo == "" {
		// New work in a conversation reads its claim and its context first: together, where the
		// store can (one round trip on Postgres).
		if err := store.PrefetchAcceptance(ctx, tx, ev.Principal, ev.Source, ev.Identity, ev.ConversationKey); err != nil {
			return fmt.Errorf("claim: %w", err)
		}
	}
	// The claim is read first and inserted last, with the outcome: one write. A concurrent
	// acceptance of the same identity on a shared engine, not visible to the read, makes the
	// insert fail, at once or when the driver sends it, and the acceptance runs again (see
	// acceptNew).
	claim, err := tx.GetClaim(ctx, ev.Principal, ev.Source, ev.Identity)
	switch {
	case err == nil:
		err = p.acceptDuplicate(ctx, tx, ev, dg, claim, now, acc, conflict)
		if err == nil && !*conflict {
			// A duplicate is settled: a pull source's position moves past it too, or it would
			// fetch the event again on every poll. (A conflict changes nothing here; the source's
			// sink moves the position with the conflict's evidence written.)
			return advanceCheckpoint(ctx, tx, ev, now)
		}
		if !errors.Is(err, errPrunedTask) {
			return err
		}
		// The claim outlived its task, which retention pruned: the identity is new work again.
		if _, err := tx.DeleteClaim(ctx, claim.Principal, claim.Source, claim.Identity, claim.TaskID); err != nil {
			return fmt.Errorf("claim: %w", err)
		}
	case !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("claim: %w", err)
	}
	claim = store.Claim{Principal: ev.Principal, Source: ev.Source, Identity: ev.Identity, Digest: dg, CreatedAt: now}
	a, err := p.acceptNew(ctx, tx, ev, claim, now, hand)
	if err != nil {
		return err
	}
	*acc = a
	return nil
}

// advanceCheckpoint advances the checkpoint of the event's source instance to the event's
// position, if it carries one (never backwards: the store ignores an older one).
func advanceCheckpoint(ctx context.Context, tx store.Tx, ev *Event, now time.Time) error {
	if ev.Checkpoint == nil {
		return nil
	}
	if _, err := tx.AdvanceCheckpoint(ctx, store.Checkpoint{
		Principal: ev.Principal, Source: ev.Source, Instance: ev.Checkpoint.Instance,
		Position: ev.Checkpoint.Position, Seq: ev.Checkpoint.Seq, UpdatedAt: now,
	}); err != nil {
		return fmt.Errorf("advance checkpoint: %w", err)
	}
	return nil
}

// namesTask reports whether c's outcome is a task (not a direct Message, not pending): one
// retention may have pruned while the claim stayed (errPrunedTask).
func namesTask(c store.Claim) bool {
	return c.State == store.ClaimDone && c.OutcomeKind != "message"
}

// errPrunedTask: a claim names a task that retention has pruned (retention deletes a task's
// claims with it, but an older build, or one sharing a Postgres store during an upgrade, may have
// left one behind).
var errPrunedTask = errors.New("the claim's task was pruned")

func (p *Plane) acceptDuplicate(ctx context.Context, tx store.Tx, ev *Event, dg string, claim store.Claim, now time.Time, acc *Acceptance, conflict *bool) error {
	var prior *Task
	if namesTask(claim) {
		t, err := getTask(ctx, tx, ev.Principal, claim.TaskID)
		if errors.Is(err, ErrTaskNotFound) {
			return errPrunedTask
		}
		if err != nil {
			return fmt.Errorf("prior task: %w", err)
		}
		prior = t
	}
	if !ev.matchesDigest(claim.Digest, dg) {
		*conflict = true
		return evidence(ctx, tx, ev.Principal, ev.Source, EvidenceDuplicateConflict, claim.TaskID,
			map[string]any{"identity": ev.Identity}, now)
	}
	if claim.State != store.ClaimDone {
		// The plane inserts claims done, with their outcome; a pending one was written by
		// something else sharing the store (an older release inserted claims pending first).
		return ErrClaimPending
	}
	*acc = Acceptance{Outcome: Duplicate, ContextID: claim.ContextID, Task: prior}
	if claim.OutcomeKind == "message" {
		var m Message
		if err := exactjson.Unmarshal(claim.Message, &m); err != nil {
			return fmt.Errorf("decode prior message: %w", err)
		}
		acc.Message = &m
	}
	return evidence(ctx, tx, ev.Principal, ev.Source, EvidenceDuplicate, claim.TaskID,
		map[string]any{"identity": ev.Identity}, now)
}

func (p *Plane) acceptNew(ctx context.Context, tx store.Tx, ev *Event, claim store.Claim, now time.Time, hand *handOff) (Acceptance, error) {
	var (
		acc     Acceptance
		cont    *Task
		touched bool        // the context has this event's activity already
		newRow  *store.Task // a created task's row, not inserted yet
		err     error
	)
	switch {
	case ev.TaskID != "":
		cont, err = getTask(ctx, tx, ev.Principal, ev.TaskID)
		if err != nil {
			return acc, err
		}
		if cont.Status.State.Terminal() && ev.Settlement != nil {
			return p.settleNew(ctx, tx, ev, claim, cont, now)
		}
		if cont.Status.State.Terminal() {
			return acc, ErrTaskTerminal
		}
		if ev.ContextID != "" && ev.ContextID != cont.ContextID {
			return acc, ErrContextMismatch
		}
	case ev.ReplyTo != "":
		cont, acc.AnchorMiss, err = p.verifyAnchor(ctx, tx, ev)
		if err != nil {
			return acc, err
		}
	}

	msg := ev.Message
	if cont != nil {
		cmsg := msg
		cmsg.TaskID, cmsg.ContextID = cont.ID, cont.ContextID
		err := p.continueTask(ctx, tx, cont, cmsg, now)
		switch {
		case errors.Is(err, errTaskFull) && ev.TaskID == "":
			// A verified reply to a task that cannot hold it: like any anchor that fails, it
			// makes a new task (nothing was written for the continuation).
			cont, acc.AnchorMiss = nil, AnchorTaskFull
		case err != nil:
			return acc, err
		default:
			acc.Outcome, acc.ContextID, acc.Task = Continued, cont.ContextID, cont
		}
	}
	if cont == nil {
		acc.ContextID, touched, err = p.resolveContext(ctx, tx, ev, now)
		if err != nil {
			return acc, err
		}
		msg.ContextID, msg.TaskID = acc.ContextID, ""
		if ev.Reply != nil {
			reply := *ev.Reply
			reply.ContextID, reply.TaskID = acc.ContextID, ""
			acc.Outcome, acc.Message = Created, &reply
		} else {
			acc.Outcome = Created
			var row store.Task
			if acc.Task, row, err = p.createTask(ctx, tx, ev, acc.ContextID, msg, now); err != nil {
				return acc, err
			}
			newRow = &row
		}
	}
	if !touched {
		if err := tx.TouchContext(ctx, ev.Principal, acc.ContextID, now); err != nil {
			return acc, fmt.Errorf("touch context: %w", err)
		}
	}

	// Evidence, wake, checkpoint, and the claim's outcome: all in this transaction.
	taskID := ""
	kind := EvidenceAccepted
	if acc.Outcome == Continued {
		kind = EvidenceContinued
	}
	if acc.Task != nil {
		taskID = acc.Task.ID
	}
	if acc.AnchorMiss != "" {
		if err := evidence(ctx, tx, ev.Principal, ev.Source, EvidenceAnchorMiss, taskID,
			map[string]any{"identity": ev.Identity, "condition": acc.AnchorMiss}, now); err != nil {
			return acc, err
		}
	}
	detail := map[string]any{"identity": ev.Identity, "contextId": acc.ContextID}
	if acc.Message != nil {
		detail["outcome"] = "message"
	}
	if err := evidence(ctx, tx, ev.Principal, ev.Source, kind, taskID, detail, now); err != nil {
		return acc, err
	}
	if acc.Task != nil {
		// A created task's row is inserted once its wake is admitted or refused. The first turn,
		// granted here to an idle claimer, is the next step of the task's log, and the row is
		// inserted as that turn made it (WORKING): one write. acc.Task stays the task as the
		// event made it (SUBMITTED), which subscribers and push configs start after.
		if newRow != nil && hand.inline != nil {
			if hand.settled, hand.elapsed, err = p.inlineTurnTx(ctx, tx, hand.inline.f, acc.Task, now); err != nil {
				return acc, err
			}
		}
		var ready func(w *store.Wake, admitted, first bool) error
		if newRow != nil {
			submitted := acc.Task
			ready = func(w *store.Wake, admitted, first bool) error {
				row := *newRow
				// Only while no earlier wake waits (hints cover this process's; on a shared store,
				// the count every process's): the queue is served oldest first.
				if admitted && first && hand.c != nil {
					var err error
					if hand.g, row, err = p.grantNewTx(ctx, tx, hand.c, w, submitted, now); err != nil {
						return err
					}
				}
				if err := tx.InsertTask(ctx, row); err != nil {
					return fmt.Errorf("insert task: %w", err)
				}
				return nil
			}
		}
		// Past the admission bound the task comes back FAILED (reason overflow), with evidence,
		// and a wake holds its failure notice until the hand-off after the commit. A task its
		// first turn settled inline needs no wake.
		if hand.settled == nil {
			if acc.Task, err = p.enqueueWake(ctx, tx, ev.Source, acc.Task, now, ready); err != nil {
				return acc, err
			}
			if acc.Task.Status.State.Terminal() {
				if hand.held, err = p.holdResultTx(ctx, tx, acc.Task, now); err != nil {
					return acc, err
				}
			}
		}
		if err := p.registerPushConfigs(ctx, tx, acc.Task, ev.PushConfigs, now); err != nil {
			return acc, err
		}
	}
	if err := advanceCheckpoint(ctx, tx, ev, now); err != nil {
		return acc, err
	}
	claim.State, claim.ContextID, claim.UpdatedAt = store.ClaimDone, acc.ContextID, now
	if acc.Message != nil {
		b, err := json.Marshal(acc.Message)
		if err != nil {
			return acc, fmt.Errorf("encode direct message: %w", err)
		}
		claim.OutcomeKind, claim.Message = "message", b
	} else {
		claim.OutcomeKind, claim.TaskID = "task", acc.Task.ID
	}
	// Another acceptance of this identity that committed since the read fails this one with
	// ErrConcurrentModification (here, or when the driver sends the held-back write): it rolls
	// back and Accept runs it again (retryConcurrent), when it finds that claim.
	if err := store.InsertNewClaim(ctx, tx, claim); err != nil {
		return acc, fmt.Errorf("claim: %w", err)
	}
	return acc, nil
}

// settleNew settles t, the finished task ev names, with ev.Settlement, and records the claim of
// ev's identity with the task as its outcome: a duplicate returns the task, a conflict is refused.
// A contextId that is not the task's is ErrContextMismatch, and nothing is written. The settled
// evidence is the event's intake disposition: it is written under ev.Source, the source the event
// came in on (as its duplicate will be), whichever source the task came from.
func (p *Plane) settleNew(ctx context.Context, tx store.Tx, ev *Event, claim store.Claim, t *Task, now time.Time) (Acceptance, error) {
	if ev.ContextID != "" && ev.ContextID != t.ContextID {
		return Acceptance{}, ErrContextMismatch
	}
	if err := ev.Settlement.Validate(); err != nil {
		return Acceptance{}, err
	}
	if err := settleTx(ctx, tx, ev.Principal, ev.Source, t, *ev.Settlement, map[string]any{"identity": ev.Identity}, now); err != nil {
		return Acceptance{}, err
	}
	// A webhook the send carries is registered as on any send: on a finished task it gets the
	// task as it now stands.
	if err := p.registerPushConfigs(ctx, tx, t, ev.PushConfigs, now); err != nil {
		return Acceptance{}, err
	}
	if err := advanceCheckpoint(ctx, tx, ev, now); err != nil {
		return Acceptance{}, err
	}
	claim.State, claim.ContextID, claim.UpdatedAt = store.ClaimDone, t.ContextID, now
	claim.OutcomeKind, claim.TaskID = "task", t.ID
	if err := store.InsertNewClaim(ctx, tx, claim); err != nil {
		return Acceptance{}, fmt.Errorf("claim: %w", err)
	}
	return Acceptance{Outcome: SettledOutcome, Task: t, ContextID: t.ContextID}, nil
}

// resolveContext finds or makes the context of a non-continuation event. touched reports that the
// context records the event's activity already (it was made or ensured at now).
func (p *Plane) resolveContext(ctx context.Context, tx store.Tx, ev *Event, now time.Time) (id string, touched bool, err error) {
	if ev.ConversationKey != "" {
		id, err := tx.EnsureContext(ctx, ev.Principal, ev.Source, ev.ConversationKey, p.newID(), now)
		if err != nil {
			return "", false, fmt.Errorf("context: %w", err)
		}
		return id, true, nil
	}
	if ev.ContextID != "" {
		c, err := tx.GetContext(ctx, ev.Principal, ev.ContextID)
		if err == nil {
			return c.ID, false, nil
		}
		if !isNotFound(err) {
			return "", false, fmt.Errorf("context: %w", err)
		}
	}
	id = p.newID()
	if ev.ContextID != "" {
		// A contextId the caller has no context under (never issued, or another principal's)
		// names a fresh context of the caller's own, under the id the client chose: A2A forbids
		// substituting another, and contexts are keyed by principal, so it joins no one's work.
		// A concurrent first use of the same id inserts first (ErrConcurrentModification): Accept
		// runs again and joins it.
		id = ev.ContextID
	}
	if err := tx.InsertContext(ctx, store.Context{
		Principal: ev.Principal, ID: id, Source: ev.Source, CreatedAt: now, LastEventAt: now,
	}); err != nil {
		return "", false, fmt.Errorf("context: %w", err)
	}
	return id, true, nil
}

// createTask makes the task of a new event and appends its first event to the log. It returns the
// task's row for the caller to insert: acceptNew inserts it once it knows whether the task's first
// turn is granted in the same transaction, so that the row is written once.
func (p *Plane) createTask(ctx context.Context, tx store.Tx, ev *Event, contextID string, msg Message, now time.Time) (*Task, store.Task, error) {
	// The event's metadata becomes the task's: not the keys the server writes (serverMetadata).
	// A continuation's is not stored, and a client may echo its task's metadata there.
	for _, k := range serverMetadata {
		if _, ok := ev.Metadata[k]; ok {
			return nil, store.Task{}, invalidf("metadata key %s is the server's to write", k)
		}
	}
	t := &Task{
		ID:        p.newID(),
		ContextID: contextID,
		Status:    Status{State: StateSubmitted, Timestamp: now},
		Metadata:  ev.Metadata,
		Origin: Origin{Principal: ev.Principal, Source: ev.Source, Identity: ev.Identity,
			Locator: ev.Locator},
		Version:   1,
		CreatedAt: now,
		UpdatedAt: now,
	}
	msg.TaskID = t.ID
	t.History = []Message{msg}
	if err := linkRedo(ctx, tx, ev, t, now); err != nil {
		return nil, store.Task{}, err
	}
	row, err := encodeTask(t)
	if err != nil {
		return nil, store.Task{}, err
	}
	if err := checkTaskSize(t, row); err != nil {
		return nil, store.Task{}, err
	}
	if row.LastSeq, err = appendEvent(ctx, tx, t, EventTask, t, now); err != nil {
		return nil, store.Task{}, err
	}
	return t, row, nil
}

// continueTask appends msg to an interrupted or active task and clears its input request; an
// interrupted task returns to SUBMITTED so it is woken again.
//
// A task the message would take past MaxTaskBytes is refused (errTaskFull, an ErrInvalid) before
// anything is written, and t is left as it was.
func (p *Plane) continueTask(ctx context.Context, tx store.Tx, t *Task, msg Message, now time.Time) error {
	prev, before := t.Version, *t
	wasInterrupted := t.Status.State.Interrupted()
	t.History = append(t.History, msg)
	t.InputRequest = 0
	if wasInterrupted {
		t.Status = Status{State: StateSubmitted, Timestamp: statusTime(t, now)}
	}
	t.Version, t.UpdatedAt = prev+1, now
	row, err := encodeTask(t)
	if err == nil {
		err = checkTaskSize(t, row)
	}
	if err != nil {
		*t = before
		return err
	}
	if _, err := appendEvent(ctx, tx, t, EventMessage, msg, now); err != nil {
		return err
	}
	if wasInterrupted {
		if _, err := appendEvent(ctx, tx, t, EventStatus, StatusUpdate{Status: t.Status}, now); err != nil {
			return err
		}
	}
	row.LastSeq = t.LastSeq // the body does not hold it
	if err := tx.UpdateTask(ctx, row, prev); err != nil {
		return fmt.Errorf("continue task %s: %w", t.ID, err)
	}
	return nil
}

// Anchor conditions, as named in anchor-miss evidence.
const (
	AnchorNotStored      = "anchor-not-stored"      // the replied-to id is not a stored anchor (of this principal)
	AnchorTaskMissing    = "anchor-task-missing"    // the anchored task no longer exists
	AnchorNotInterrupted = "task-not-interrupted"   // the task is not INPUT_REQUIRED / AUTH_REQUIRED
	AnchorNotOurResponse = "response-not-delivered" // the anchor was not a response sent for this task's source
	AnchorNoInputRequest = "no-input-request"       // no unanswered input request is recorded
	AnchorTaskFull       = "task-full"              // the task cannot hold the reply (MaxTaskBytes)
)

// verifyAnchor checks the six conditions of a reply anchor. It returns the task to continue, or
// nil and the first failed condition.
//
// The conditions: the task is INPUT_REQUIRED or AUTH_REQUIRED; we sent a provider response for it
// (the anchor was recorded by a delivery to the task's own source); that response's id is stored
// as an anchor; the event directly replies to that id (ReplyTo, looked up exactly); same
// principal; and the anchor carries the task's current, unanswered input request. Same principal
// has no check of its own: both reads are scoped to the event's principal, so another principal's
// anchor is not stored (AnchorNotStored), and the store refuses an anchor naming a task of a
// principal other than its own (PutAnchor).
func (p *Plane) verifyAnchor(ctx context.Context, tx store.Tx, ev *Event) (*Task, string, error) {
	a, err := tx.GetAnchor(ctx, ev.Principal, ev.Source, ev.ReplyTo)
	if err != nil {
		if isNotFound(err) {
			return nil, AnchorNotStored, nil
		}
		return nil, "", fmt.Errorf("anchor: %w", err)
	}
	t, err := getTask(ctx, tx, ev.Principal, a.TaskID)
	if err != nil {
		if errors.Is(err, ErrTaskNotFound) {
			return nil, AnchorTaskMissing, nil
		}
		return nil, "", err
	}
	switch {
	case !t.Status.State.Interrupted():
		return nil, AnchorNotInterrupted, nil
	case t.Origin.Source != a.Source:
		return nil, AnchorNotOurResponse, nil
	case t.InputRequest == 0 || a.InputSeq != t.InputRequest:
		return nil, AnchorNoInputRequest, nil
	}
	return t, "", nil
}

// RecordAnchor stores providerResponseID, a response delivered to source for taskID, as a reply
// anchor carrying the task's current input request.
func (p *Plane) RecordAnchor(ctx context.Context, principal, source, providerResponseID, taskID string) error {
	return p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return RecordAnchorTx(ctx, tx, principal, source, providerResponseID, taskID, 0, p.clock())
	})
}

// RecordAnchorTx is RecordAnchor inside a caller's transaction, for the input request at event
// sequence inputSeq: the one the delivered question asked (the delivery engine records it in the
// transaction that marks the question delivered). 0 means the task's current input request. A
// question delivered after its task moved on to another one keeps its own: a reply to it does
// not answer the later question (the anchor fails its input-request condition).
func RecordAnchorTx(ctx context.Context, tx store.Tx, principal, source, providerResponseID, taskID string, inputSeq int64, now time.Time) error {
	if providerResponseID == "" {
		return invalidf("anchor has no provider response id")
	}
	if !storableKey(providerResponseID) || len(providerResponseID) > MaxIdentityLen {
		// A receipt's id no reply could name (and Postgres text cannot hold): refused as the
		// plane's decision, which the delivery engine records as evidence, not a failed send.
		return invalidf("anchor provider response id must be valid UTF-8 without NUL, at most %d bytes", MaxIdentityLen)
	}
	t, err := getTask(ctx, tx, principal, taskID)
	if err != nil {
		return fmt.Errorf("record anchor: %w", err)
	}
	if inputSeq == 0 {
		inputSeq = t.InputRequest
	}
	if err := tx.PutAnchor(ctx, store.Anchor{
		Principal: principal, Source: source, ProviderID: providerResponseID, TaskID: t.ID,
		InputSeq: inputSeq, CreatedAt: now,
	}); err != nil {
		return fmt.Errorf("record anchor: %w", err)
	}
	return nil
}

// CreateTask makes an empty SUBMITTED task for a trusted caller (no message, no claim) in
// contextID if the principal owns it, else in a fresh context.
func (p *Plane) CreateTask(ctx context.Context, principal, contextID string) (*Task, error) {
	if principal == "" {
		return nil, invalidf("no principal")
	}
	var t *Task
	// A concurrent first use of the same new contextId inserts its context first: run again
	// and join it.
	err := p.retryConcurrent(ctx, true, func() error {
		return p.createTaskTx(ctx, principal, contextID, &t)
	})
	if err != nil {
		return nil, fmt.Errorf("create task: %w", err)
	}
	p.broker.publish(principal, t.ID)
	return t, nil
}

func (p *Plane) createTaskTx(ctx context.Context, principal, contextID string, out **Task) error {
	return p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		now := p.clock()
		ev := &Event{Principal: principal, Source: SourceA2A, ContextID: contextID}
		cid, touched, err := p.resolveContext(ctx, tx, ev, now)
		if err != nil {
			return err
		}
		t := &Task{
			ID: p.newID(), ContextID: cid, Status: Status{State: StateSubmitted, Timestamp: now},
			Origin: Origin{Principal: principal, Source: SourceA2A}, Version: 1, CreatedAt: now, UpdatedAt: now,
		}
		*out = t
		row, err := encodeTask(t)
		if err != nil {
			return err
		}
		if row.LastSeq, err = appendEvent(ctx, tx, t, EventTask, t, now); err != nil {
			return err
		}
		if err := tx.InsertTask(ctx, row); err != nil {
			return fmt.Errorf("insert task: %w", err)
		}
		if touched {
			return nil
		}
		return tx.TouchContext(ctx, principal, cid, now)
	})
}
