package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/channels-dev/channels/internal/exactjson"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// Operations a task asks of its source. Any other non-empty string is allowed too (a source's own
// operation, or the ID of a fixed operation).
const (
	// OpReply is an answer in the conversation the task came from.
	OpReply = "reply"
	// OpQuestion asks the person something; when it is delivered, its provider ID becomes a reply
	// anchor of the task, so a reply to exactly that message continues the task.
	OpQuestion = "question"
	// OpHandled is a handled marker (a reaction, a label).
	OpHandled = "handled"
)

// Recovery is a recovery class: what the engine does when a provider call's outcome is unknown
// (a crash, a timeout, a reset connection after the request was written).
type Recovery string

// The recovery classes of docs/delivery.md, declared per source in conformance-matrix/matrix.yaml.
const (
	// Idempotent: repeating the call is safe (the provider dedupes by the delivery ID).
	Idempotent Recovery = "idempotent"
	// Lookup: a Reconciler asks the provider whether the call happened; found → delivered, not
	// found → send. Without a Reconciler the delivery fails closed as ambiguous.
	Lookup Recovery = "lookup"
	// Ambiguous: no safe repeat and no lookup; fail closed with evidence, an operator resolves.
	Ambiguous Recovery = "ambiguous"
)

// State is the state of a delivery: prepared → sending → delivered | failed | ambiguous.
type State string

// Delivery states (the store's values).
const (
	StatePrepared  = State(store.DeliveryPrepared)
	StateSending   = State(store.DeliverySending)
	StateDelivered = State(store.DeliveryDelivered)
	StateFailed    = State(store.DeliveryFailed)
	StateAmbiguous = State(store.DeliveryAmbiguous)
)

// Settled reports whether the engine will do nothing more with a delivery in s on its own:
// delivered, failed, or ambiguous (waiting for an operator).
func (s State) Settled() bool {
	return s == StateDelivered || s == StateFailed || s == StateAmbiguous
}

// Valid reports whether s is one of the five states.
func (s State) Valid() bool {
	return s == StatePrepared || s == StateSending || s.Settled()
}

// Delivery is one outbound provider mutation as a Sender or Reconciler sees it. Its fields are
// exactly those of sources.Delivery, so either converts to the other.
type Delivery struct {
	// ID is the delivery ID: hash(task, source, operation, payload digest). A Sender passes it to
	// the provider where the provider can keep it (an idempotency key, message metadata, a hidden
	// marker, a mail header) so a Reconciler can find it.
	ID        string
	Principal string
	TaskID    string
	ContextID string
	// Operation is what to do: OpReply, OpQuestion, OpHandled, or a source's own.
	Operation string
	// State is the task state the delivery reports.
	State taskplane.State
	// Locator is the task's origin locator (where to answer).
	Locator json.RawMessage
	// Message is the content to send.
	Message taskplane.Message
}

// Receipt is what the provider returned for a Send, or what a Reconciler found.
type Receipt struct {
	// ProviderID is the provider's id of what was created (a Slack ts, a comment id, a
	// Message-ID). For a question it becomes a reply anchor.
	ProviderID string
}

// Sender makes one provider mutation. The engine calls Send at most once per attempt and never
// twice concurrently for one delivery ID, in any process sharing the store. Send reports failures
// as data: return Permanent, RetryAfter, Retryable or Indeterminate (an unclassified error counts
// as Indeterminate, the safe reading: the provider may have acted).
type Sender interface {
	Send(ctx context.Context, d Delivery) (Receipt, error)
}

// Reconciler is implemented by senders whose recovery class is Lookup: after an unknown outcome
// it asks the provider whether d already happened.
type Reconciler interface {
	// Lookup returns the receipt of d if the provider has it, and found=false only if it
	// certainly does not. An error means "could not tell"; the engine asks again later.
	Lookup(ctx context.Context, d Delivery) (r Receipt, found bool, err error)
}

// Laner is implemented by senders that name the rate lane of a delivery (a Slack channel, a GitHub
// token, a mail account). Deliveries of one lane start at most once per lane interval, across
// processes sharing a Postgres store; different lanes never wait for each other.
type Laner interface {
	Lane(d Delivery) string
}

// Request asks for a delivery.
type Request struct {
	Principal string
	TaskID    string
	ContextID string
	// Source is the source name the answer goes to (the task's origin source).
	Source    string
	Operation string
	State     taskplane.State
	Locator   json.RawMessage
	Message   taskplane.Message
	// InputSeq is, for a question, the event sequence of the input request it asks
	// (Task.InputRequest when the question was made); its reply anchor carries it, so a question
	// delivered after its task moved on cannot answer a later one. It is kept with the delivery
	// but is not part of its identity (the payload digest). 0: the task's input request at the
	// time the question is delivered.
	InputSeq int64
	// Fixed declares the operation fixed: its delivery ID is hash(task, source, operation) alone,
	// so the operation happens at most once per task, and a later request with a different
	// payload is rejected with a *FixedConflictError instead of becoming a new delivery.
	Fixed bool
}

// payload is what a delivery row keeps of its request: everything the sender needs that is not
// already a column.
type payload struct {
	ContextID string            `json:"contextId,omitempty"`
	State     taskplane.State   `json:"state,omitempty"`
	Locator   json.RawMessage   `json:"locator,omitempty"`
	Message   taskplane.Message `json:"message"`
	InputSeq  int64             `json:"inputSeq,omitempty"`
}

// encode returns the payload bytes and their digest. The digest leaves InputSeq out: it is not
// what is sent, and a delivery's ID stays what it was before the payload carried it.
func (r Request) encode() ([]byte, string, error) {
	p := payload{ContextID: r.ContextID, State: r.State, Locator: r.Locator, Message: r.Message}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, "", fmt.Errorf("encode delivery payload: %w", err)
	}
	sum := sha256.Sum256(b)
	if r.InputSeq != 0 {
		p.InputSeq = r.InputSeq
		if b, err = json.Marshal(p); err != nil {
			return nil, "", fmt.Errorf("encode delivery payload: %w", err)
		}
	}
	return b, "sha256:" + hex.EncodeToString(sum[:]), nil
}

func (r Request) validate() error {
	switch {
	case r.Principal == "":
		return fmt.Errorf("%w: no principal", ErrInvalid)
	case r.TaskID == "":
		return fmt.Errorf("%w: no task", ErrInvalid)
	case r.Source == "":
		return fmt.Errorf("%w: no source", ErrInvalid)
	case r.Operation == "":
		return fmt.Errorf("%w: no operation", ErrInvalid)
	}
	return nil
}

// ID returns the delivery ID of a request: hash(task, source, operation, payload digest), or
// hash(task, source, operation) for a fixed operation. Revised text is a new delivery; the same
// request is always the same delivery.
func ID(r Request) (string, error) {
	_, digest, err := r.encode()
	if err != nil {
		return "", err
	}
	return deliveryID(r, digest), nil
}

func deliveryID(r Request, digest string) string {
	if r.Fixed {
		digest = "fixed"
	}
	h := sha256.New()
	for _, s := range []string{r.TaskID, r.Source, r.Operation, digest} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return "dlv_" + hex.EncodeToString(h.Sum(nil))[:32]
}

// payloadOf reads a stored row's payload.
func payloadOf(row store.Delivery) (payload, error) {
	var p payload
	if err := exactjson.Unmarshal(row.Payload, &p); err != nil {
		return payload{}, fmt.Errorf("decode delivery %s payload: %w", row.ID, err)
	}
	return p, nil
}

// decode rebuilds the Delivery a sender sees from a stored row.
func decode(row store.Delivery) (Delivery, error) {
	p, err := payloadOf(row)
	if err != nil {
		return Delivery{}, err
	}
	return Delivery{ID: row.ID, Principal: row.Principal, TaskID: row.TaskID, ContextID: p.ContextID,
		Operation: row.Operation, State: p.State, Locator: p.Locator, Message: p.Message}, nil
}

// Record is a delivery as the engine and operators see it.
type Record struct {
	Principal     string    `json:"principal"`
	ID            string    `json:"id"`
	TaskID        string    `json:"taskId"`
	Source        string    `json:"source"`
	Operation     string    `json:"operation"`
	Recovery      Recovery  `json:"recovery"`
	Lane          string    `json:"lane,omitempty"`
	PayloadDigest string    `json:"payloadDigest"`
	State         State     `json:"state"`
	Attempts      int       `json:"attempts"`
	Reconciles    int       `json:"reconciles,omitempty"`
	NextAttemptAt time.Time `json:"nextAttemptAt"`
	LeaseOwner    string    `json:"leaseOwner,omitempty"`
	LeaseUntil    time.Time `json:"leaseUntil,omitzero"`
	ProviderID    string    `json:"providerId,omitempty"`
	LastError     string    `json:"lastError,omitempty"`
	CreatedAt     time.Time `json:"createdAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
}

func toRecord(d store.Delivery) Record {
	return Record{
		Principal: d.Principal, ID: d.ID, TaskID: d.TaskID, Source: d.Source, Operation: d.Operation,
		Recovery: Recovery(d.Recovery), Lane: d.Lane, PayloadDigest: d.PayloadDigest, State: State(d.State),
		Attempts: d.Attempts, Reconciles: d.Reconciles, NextAttemptAt: d.NextAttemptAt, LeaseOwner: d.LeaseOwner,
		LeaseUntil: d.LeaseUntil, ProviderID: d.ProviderID, LastError: d.LastError, CreatedAt: d.CreatedAt,
		UpdatedAt: d.UpdatedAt,
	}
}

// Attempt is the evidence of one step taken on a delivery.
type Attempt struct {
	Attempt        int           `json:"attempt"`
	Kind           string        `json:"kind"`
	Outcome        string        `json:"outcome"`
	Error          string        `json:"error,omitempty"`
	ProviderStatus string        `json:"providerStatus,omitempty"`
	RetryAfter     time.Duration `json:"retryAfter,omitempty"`
	Owner          string        `json:"owner,omitempty"`
	Time           time.Time     `json:"time"`
}

// Errors of the engine. Test them with errors.Is.
var (
	// ErrInvalid: a request lacks a principal, task, source or operation, or an operator
	// resolution is malformed.
	ErrInvalid = errors.New("invalid delivery request")
	// ErrFixedConflict: a fixed operation was requested again with a different payload. The
	// concrete error is *FixedConflictError.
	ErrFixedConflict = errors.New("fixed delivery operation requested with a different payload")
	// ErrNoRoute: this engine has no route (sender) for the delivery's source.
	ErrNoRoute = errors.New("no delivery route for source")
	// ErrNotFound: no such delivery for the principal.
	ErrNotFound = errors.New("delivery not found")
	// ErrNotResolvable: an operator resolution of a delivery that is not ambiguous, failed or
	// stuck in sending (in sending with its lease run out).
	ErrNotResolvable = errors.New("delivery is not ambiguous, failed or stuck in sending")
	// ErrAlreadyResolved: an operator resolution the delivery already carries (abandoned again,
	// delivered again under the same provider ID, retried again before any attempt): Resolve
	// changes nothing, writes no evidence, and returns the delivery with it.
	ErrAlreadyResolved = errors.New("delivery already resolved so")
	// ErrClosed: the engine was closed.
	ErrClosed = errors.New("delivery engine closed")
)

// FixedConflictError is returned when a fixed operation is requested again with another payload.
// Nothing changed but the conflict evidence.
type FixedConflictError struct {
	ID        string
	Operation string
}

func (e *FixedConflictError) Error() string {
	return fmt.Sprintf("%s: operation %q (delivery %s)", ErrFixedConflict, e.Operation, e.ID)
}

// Unwrap makes errors.Is(err, ErrFixedConflict) true.
func (e *FixedConflictError) Unwrap() error { return ErrFixedConflict }

// RequestFor returns the request to send msg for task t back to where t came from: its origin
// principal, source and locator, its context and current state, and for a question the input
// request it asks (InputSeq).
func RequestFor(t *taskplane.Task, operation string, msg taskplane.Message) Request {
	r := Request{Principal: t.Origin.Principal, TaskID: t.ID, ContextID: t.ContextID, Source: t.Origin.Source,
		Operation: operation, State: t.Status.State, Locator: t.Origin.Locator, Message: msg}
	if operation == OpQuestion {
		r.InputSeq = t.InputRequest
	}
	return r
}
