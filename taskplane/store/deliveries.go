package store

import (
	"context"
	"time"
)

// Outbound deliveries (docs/delivery.md; invariant 8 of docs/architecture.md). The delivery package owns the
// state machine; the store keeps its rows, hands out leases, and keeps the rate lanes. These
// interfaces are embedded in Reader and Tx.

// DeliveryState is the state of a delivery row.
type DeliveryState string

// Delivery states. prepared → sending → delivered | failed | ambiguous; a delivery the provider
// certainly did not take may go back from sending to prepared (a retry, a Retry-After snooze, a
// lookup that found nothing).
const (
	// DeliveryPrepared: recorded, not yet handed to the provider (or certainly not taken by it).
	DeliveryPrepared DeliveryState = "prepared"
	// DeliverySending: a provider call may have happened; the outcome is not yet recorded. The
	// lease says who is working on it; an expired lease means the worker died or gave up and
	// the delivery must be reconciled.
	DeliverySending DeliveryState = "sending"
	// DeliveryDelivered: the provider took it; ProviderID names what it created.
	DeliveryDelivered DeliveryState = "delivered"
	// DeliveryFailed: the provider refused it for good, or attempts ran out while every outcome
	// was known.
	DeliveryFailed DeliveryState = "failed"
	// DeliveryAmbiguous: the outcome is unknown and no safe repeat exists; an operator resolves it.
	DeliveryAmbiguous DeliveryState = "ambiguous"
)

// Delivery is one outbound provider mutation, keyed by (Principal, ID). The delivery package
// derives ID from (TaskID, Source, Operation, PayloadDigest), so a repeated request finds the
// same row.
type Delivery struct {
	Principal string
	ID        string
	TaskID    string
	Source    string
	// Operation is what is sent ("reply", "question", "handled", or a fixed operation's id).
	Operation string
	// Recovery is the recovery class the delivery was prepared under: "idempotent", "lookup" or
	// "ambiguous".
	Recovery string
	// Lane is the rate-lane key ("" for none); rows of one lane are sent at most once per lane
	// interval, across processes.
	Lane          string
	PayloadDigest string
	// Payload is the delivery package's encoding of what to send; opaque to the store.
	Payload []byte
	State   DeliveryState
	// Attempts counts provider mutations started; a Retry-After snooze gives its attempt back.
	Attempts int
	// Reconciles counts consecutive failed lookups of a delivery left in sending.
	Reconciles int
	// NextAttemptAt is when the delivery is next due (a retry, a snooze, a reconcile).
	NextAttemptAt time.Time
	// LeaseOwner and LeaseUntil: who works on the row until when. Zero LeaseUntil = not leased.
	LeaseOwner string
	LeaseUntil time.Time
	ProviderID string
	LastError  string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// DeliveryAttempt is the evidence of one step taken on a delivery: a provider call, a lookup, a
// recovery decision or an operator resolution.
type DeliveryAttempt struct {
	Principal  string
	DeliveryID string
	// Seq is assigned by the store: increasing per store, so a delivery's attempts list in order.
	Seq int64
	// Attempt is the delivery's Attempts counter when the step was taken.
	Attempt int
	// Kind is what was done: "send", "lookup", "recover", "resolve".
	Kind string
	// Outcome is what came of it ("delivered", "retry", "retry-after", "failed", "unknown",
	// "found", "not-found", "ambiguous", …).
	Outcome string
	Error   string
	// ProviderStatus is the provider's own status for the step, when it gave one (an HTTP status,
	// a Slack error code, an SMTP reply code).
	ProviderStatus string
	// RetryAfter is the wait the provider asked for (0 if none).
	RetryAfter time.Duration
	// Owner is the engine instance that took the step ("operator" for a resolution).
	Owner     string
	CreatedAt time.Time
}

// The per-attempt evidence of an operator's resolution: Kind AttemptResolve, and Outcome
// OutcomeAbandoned when the operator abandoned the delivery (it is then failed, and no step
// follows unless an operator resolves it again).
const (
	AttemptResolve   = "resolve"
	OutcomeAbandoned = "abandoned"
)

// DeliveryFilter selects deliveries for ListDeliveries. Zero fields match anything.
type DeliveryFilter struct {
	Principal string
	ID        string
	TaskID    string
	Source    string
	State     DeliveryState
	// OmitAbandoned leaves out the deliveries an operator abandoned: those whose latest attempt
	// is an AttemptResolve with OutcomeAbandoned. The operator has settled them.
	OmitAbandoned bool
	// LeaseRanOutBefore, when set, keeps only the deliveries under a lease (LeaseUntil not zero)
	// that ran out before it: with State sending, those stuck there (their engine is gone). It
	// applies before Limit, so rows leased by live engines cannot crowd them out.
	LeaseRanOutBefore time.Time
	// UnleasedIdleBefore, when set, keeps only the deliveries under no lease (LeaseUntil zero)
	// created before it with no attempt recorded since it: with State sending, those released
	// after an unknown outcome that no engine has worked since (their source no longer routed).
	// It applies before Limit, so rows being repeated cannot crowd them out.
	UnleasedIdleBefore time.Time
	Limit              int // 0 = no limit
}

// DeliveryClaim asks ClaimDeliveries for due deliveries.
type DeliveryClaim struct {
	// Owner names the claimer; it is written to LeaseOwner.
	Owner string
	// Now is the claimer's clock. A row is due when NextAttemptAt <= Now and it is prepared, or
	// it is sending with LeaseUntil <= Now (its worker died or left it for reconciliation).
	Now time.Time
	// LeaseUntil is the lease expiry written to claimed rows.
	LeaseUntil time.Time
	// Principal and ID, when ID is set, claim at most that one delivery, due or not for its
	// lane (the caller reserves the lane).
	Principal string
	ID        string
	// Sources, when not empty, restricts the claim to deliveries of these sources (the ones this
	// process can send to).
	Sources []string
	// Limit bounds the rows claimed (at least 1) when ID is empty.
	Limit int
}

// DeliveryReader holds the delivery reads; Reader embeds it.
type DeliveryReader interface {
	GetDelivery(ctx context.Context, principal, id string) (Delivery, error)
	// ListDeliveries returns deliveries matching f, newest first (CreatedAt then ID descending).
	ListDeliveries(ctx context.Context, f DeliveryFilter) ([]Delivery, error)
	// ListDeliveryAttempts returns a delivery's attempts in the order they were recorded.
	ListDeliveryAttempts(ctx context.Context, principal, deliveryID string) ([]DeliveryAttempt, error)
	// NextDeliveryDue returns the earliest time a prepared or sending delivery of one of sources
	// (any source when sources is empty) becomes claimable (NextAttemptAt, pushed back by the lease
	// of a sending row and by its lane's next allowed time), and ok=false when none is pending.
	NextDeliveryDue(ctx context.Context, sources []string) (due time.Time, ok bool, err error)
}

// DeliveryTx holds the delivery writes; Tx embeds it.
type DeliveryTx interface {
	// InsertDelivery inserts d unless a delivery with the same (Principal, ID) exists, in which
	// case it returns the existing row and inserted=false.
	InsertDelivery(ctx context.Context, d Delivery) (existing Delivery, inserted bool, err error)
	// UpdateDelivery stores d's State, Attempts, Reconciles, NextAttemptAt, LeaseOwner,
	// LeaseUntil, ProviderID, LastError and UpdatedAt; a missing row is ErrNotFound.
	UpdateDelivery(ctx context.Context, d Delivery) error
	// ClaimDeliveries leases due deliveries to c.Owner until c.LeaseUntil and returns them as they
	// are after the claim (State unchanged). A row leased by anyone (lease not expired) is never
	// returned, so one delivery has one worker at a time. Without an ID it returns at most one row
	// per lane, skips lanes whose next allowed time is after c.Now, and orders by NextAttemptAt
	// then CreatedAt. On Postgres, rows locked by other transactions are skipped (FOR UPDATE SKIP
	// LOCKED), so concurrent claimers in several processes never share a row.
	ClaimDeliveries(ctx context.Context, c DeliveryClaim) ([]Delivery, error)
	// InsertDeliveryAttempt appends a to its delivery's evidence (Seq is assigned).
	InsertDeliveryAttempt(ctx context.Context, a DeliveryAttempt) error
	// ReserveLane takes the next slot of the lane (principal, lane): if the lane's next allowed
	// time is not after now (or the lane is new), it becomes next and granted is true; otherwise
	// nothing changes and nextAllowed says when to come back. The row is locked until the
	// transaction ends, so processes sharing a Postgres store take slots one at a time.
	ReserveLane(ctx context.Context, principal, lane string, now, next time.Time) (granted bool, nextAllowed time.Time, err error)
	// DelayLane pushes the lane's next allowed time to until, never earlier than it is (a
	// provider's Retry-After applies to the whole lane).
	DelayLane(ctx context.Context, principal, lane string, until time.Time) error
	// PruneDeliveries deletes at most limit (0 = no limit) delivered and failed deliveries whose
	// UpdatedAt is before cutoff, with their attempts, and lanes idle since before cutoff. It never
	// deletes a prepared, sending or ambiguous delivery, nor one of a task still stored in a
	// state not in terminal (a task still going on: the same delivery asked for again must find
	// it, not be sent twice; a finished task asks for nothing more). Tx.Prune never touches
	// deliveries.
	PruneDeliveries(ctx context.Context, cutoff time.Time, terminal []string, limit int) (deleted int, err error)
}
