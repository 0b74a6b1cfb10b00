// Package store is the storage boundary of the task plane: one driver interface, two drivers
// (sqlite and postgres), and one suite (storetest) that every driver passes.
//
// The store knows rows, not A2A: a task's status message, history, artifacts and metadata travel
// as an opaque Body that the task plane encodes. The task plane's logic (Accept, updates,
// retention policy) is written once against Tx and runs unchanged on every driver.
//
// Every key starts with the principal, so the data partitions by principal.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors returned by every driver. Callers test them with errors.Is.
var (
	// ErrNotFound is returned when a row does not exist for the given principal. A row owned by
	// another principal is reported exactly like a missing one.
	ErrNotFound = errors.New("store: not found")
	// ErrConcurrentModification is returned by UpdateTask when the stored version differs from the
	// expected one.
	ErrConcurrentModification = errors.New("store: concurrent modification")
	// ErrInUse is returned by Open when another process holds an exclusive store (SQLite).
	ErrInUse = errors.New("store: in use by another process")
	// ErrNotSupported is returned by optional operations a driver lacks (see Capabilities).
	ErrNotSupported = errors.New("store: not supported by this driver")
	// ErrClosed is returned by Update after Close, and by Updates Close interrupted. Unavailable
	// reports it (and a read's failure on a closed store) as the store going away: 503, not 500.
	ErrClosed = errors.New("store: closed")
)

// TouchGranularity is how stale a context's LastEventAt may be left by TouchContext. Retention
// windows are days long; a minute of slack costs nothing there.
const TouchGranularity = time.Minute

// Capabilities tell shared code what a driver can do; shared code branches on these, never on the
// concrete driver type.
type Capabilities struct {
	// Name is the driver name ("sqlite", "postgres").
	Name string
	// Listen is true when Listen delivers task-event notifications committed by other processes.
	Listen bool
	// MultiProcess is true when several processes may share the store.
	MultiProcess bool
}

// Migrated is implemented by stores that report the schema version they found when Open
// migrated them, read under the migration lock: 0 for a new store; equal to the binary's latest
// when Open applied nothing (another process migrated first, or no migration was due).
type Migrated interface {
	MigratedFrom() int
}

// Clock is implemented by stores that several processes share. Now is the store's time as this
// process best knows it (its own clock moved onto the database's): a lease, a due time or a lane
// slot written by one process and compared by another then means the same instant to both,
// whatever the skew between their hosts' clocks.
type Clock interface {
	Now() time.Time
}

// NowFunc returns the clock that components writing leases and due times into s use by default:
// s's own when it has one (Clock), else time.Now.
func NowFunc(s any) func() time.Time {
	if c, ok := s.(Clock); ok {
		return c.Now
	}
	return time.Now
}

// Store is a durable store. All methods are safe for concurrent use.
type Store interface {
	Reader

	// Update runs fn in one write transaction and commits it. fn must have no effects outside tx:
	// it may be run again (Postgres retries serialization failures), and it may share one physical
	// transaction with other callers' fns (group commit) inside its own savepoint, so it must never
	// wait for another Update of the same store. Update returns only after the commit holding fn's
	// writes is durable, or an error; if fn returns an error, none of its writes are kept and
	// Update returns that error. A Tx may send a write whose result it does not report later than
	// the call (pipelining); that write's error is then returned by a later call of fn's Tx, or by
	// Update, so fn must return the errors its Tx calls return.
	Update(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error

	// Listen calls fn for every task event appended and committed by any process sharing the
	// store, until ctx ends. Drivers without the Listen capability return ErrNotSupported at once.
	// Notifications are hints: a listener re-reads the event log by sequence. reconnected, if not
	// nil, is called each time Listen listens again after its connection was lost (or could not
	// be made at first): any notification sent meanwhile is lost, so whatever the caller follows
	// should be re-read. fn and reconnected are called in Listen's goroutine.
	Listen(ctx context.Context, fn func(principal, taskID string), reconnected func()) error

	// Capabilities reports what the driver supports.
	Capabilities() Capabilities

	// Close releases the store. Pending Updates fail.
	Close() error

	// Done is closed when Close is called, so that whatever waits on the store for a change (a
	// follower of a task's events) stops instead of waiting for one that cannot come.
	Done() <-chan struct{}
}

// Reader holds the read operations, available on the Store and inside a transaction.
type Reader interface {
	DeliveryReader
	WakeReader
	SummaryReader
	PushReader

	GetTask(ctx context.Context, principal, id string) (Task, error)
	// ListTasks returns the principal's tasks matching f, ordered by StatusTime descending then ID
	// descending, at most f.Limit rows, and the number of matching rows ignoring the cursor and limit.
	ListTasks(ctx context.Context, principal string, f TaskFilter) (tasks []Task, total int, err error)
	// TaskEvents returns the events of a task with Seq > after, in Seq order, at most limit (0 = no
	// limit).
	TaskEvents(ctx context.Context, principal, taskID string, after int64, limit int) ([]TaskEvent, error)
	GetClaim(ctx context.Context, principal, source, identity string) (Claim, error)
	GetContext(ctx context.Context, principal, contextID string) (Context, error)
	GetAnchor(ctx context.Context, principal, source, providerID string) (Anchor, error)
	// GetCheckpoint returns the checkpoint of (principal, source, instance). While instance has
	// none of its own, it returns the checkpoint (principal, source) kept from before checkpoints
	// were per instance (Instance "", see Checkpoint), if there is one; else ErrNotFound.
	GetCheckpoint(ctx context.Context, principal, source, instance string) (Checkpoint, error)
	// ListEvidence returns evidence matching f, newest first (oldest first with f.Forward).
	ListEvidence(ctx context.Context, f EvidenceFilter) ([]Evidence, error)
	// ListWakes returns wakes in the given state, oldest first (FIFO: CreatedAt, then insertion
	// order), at most limit.
	ListWakes(ctx context.Context, state WakeState, limit int) ([]Wake, error)
}

// Tx is a write transaction. A wake read with its GetWake, or a delivery with its GetDelivery, is
// held against other writers until the transaction ends (Postgres locks the row; SQLite's single
// writer holds everything), so a SaveWake or UpdateDelivery that follows acts on the row as read,
// never over another writer's change.
type Tx interface {
	Reader
	DeliveryTx
	WakeTx
	PushTx

	// InsertClaim inserts c unless a claim with the same (Principal, Source, Identity) exists, in
	// which case it returns the existing claim and inserted=false. On Postgres a concurrent
	// uncommitted claim makes this wait for that transaction. (InsertNewClaim is the form for a
	// claim the caller has found absent.)
	InsertClaim(ctx context.Context, c Claim) (existing Claim, inserted bool, err error)
	// DeleteClaim deletes the claim of (principal, source, identity) if it still names taskID (the
	// claim of a task retention has pruned, whose identity is new work again); deleted reports
	// whether it did.
	DeleteClaim(ctx context.Context, principal, source, identity, taskID string) (deleted bool, err error)

	// EnsureContext returns the context id for (principal, source, conversationKey), creating it
	// with candidateID if none exists (atomic upsert: concurrent callers get one id). It records
	// activity at now in a context that already existed, as TouchContext does, so the caller
	// need not touch it again. An empty conversationKey is an error: a context without a key is
	// InsertContext's to make.
	EnsureContext(ctx context.Context, principal, source, conversationKey, candidateID string, now time.Time) (contextID string, err error)
	// InsertContext inserts a context with no conversation key (e.g. an A2A context). A context
	// of the same principal and id that exists already (another writer inserted it first) is
	// ErrConcurrentModification, reported by this call or by the Update that ran it.
	InsertContext(ctx context.Context, c Context) error
	// TouchContext records activity in a context (retention measures from LastEventAt). It never
	// moves LastEventAt backwards, and may skip a touch less than TouchGranularity newer than the
	// stored time (so that the events of one busy conversation do not serialize on its row).
	TouchContext(ctx context.Context, principal, contextID string, at time.Time) error

	// InsertTask inserts a new task: t as the inserting transaction leaves it, so t.Version is 1
	// plus the changes that transaction made to it, and t.LastSeq the sequence of the last event
	// it appended to the task's log (0 if none).
	InsertTask(ctx context.Context, t Task) error
	// UpdateTask writes t's ContextID-independent mutable fields (State, StatusTime, Body,
	// UpdatedAt, LastSeq) and sets Version to expectVersion+1, only if the stored version equals
	// expectVersion; otherwise ErrConcurrentModification.
	UpdateTask(ctx context.Context, t Task, expectVersion int64) error
	// AppendTaskEvent stores an event in the task's log under seq, which the caller allocates:
	// one more than the LastSeq of the task as it read it (or the seq of its previous append in
	// this transaction). The caller writes the task with the new LastSeq in the same transaction
	// (InsertTask, or UpdateTask guarded by the version it read), so the log stays gap-free and
	// two writers of one task cannot both take a seq: the second meets the first's event and
	// gets ErrConcurrentModification (on Postgres, once the first commits; if it rolls back,
	// the second proceeds). Commits of one task's events therefore come in seq order, and a
	// reader that has seen seq N never later finds a newly committed seq below N. The store
	// does not check that the task exists: the caller reads or inserts it in the same
	// transaction. On drivers with Listen it also notifies other processes at commit.
	AppendTaskEvent(ctx context.Context, principal, taskID string, seq int64, kind string, payload []byte, at time.Time) error

	// PutAnchor inserts or replaces the anchor (Principal, Source, ProviderID). Its task
	// (Principal, TaskID) must exist, else it is ErrNotFound and writes nothing: retention deletes
	// anchors only with their tasks. The transaction holds the task against a concurrent Prune
	// until it ends.
	PutAnchor(ctx context.Context, a Anchor) error

	InsertEvidence(ctx context.Context, e Evidence) error
	InsertWake(ctx context.Context, w Wake) error
	// UpdateWake stores w's State, Attempts, UpdatedAt and Detail.
	UpdateWake(ctx context.Context, w Wake) error

	// AdvanceCheckpoint stores c if (c.Principal, c.Source, c.Instance) has no checkpoint or c.Seq
	// > the stored Seq; it never moves a checkpoint backwards. It returns the stored checkpoint
	// after the call. An instance without a checkpoint of its own first takes over the one kept
	// from before checkpoints were per instance (Instance ""), if there is one, and advances from
	// it: the old position belongs to one instance from then on, never to two.
	AdvanceCheckpoint(ctx context.Context, c Checkpoint) (Checkpoint, error)

	// Prune deletes, for contexts whose LastEventAt is before cutoff: terminal tasks (State in
	// terminal) last changed (UpdatedAt) before cutoff and with no wake pending or active (a result
	// still to be handed off), with their events, anchors, wakes and push configs (tokens and
	// credentials included); done claims older than cutoff whose task
	// (if any) no longer exists after this call; and contexts left with no task and no pending
	// claim. It never deletes a non-terminal task, a context such a task references, a claim whose
	// task still exists, or a pending claim. It deletes at most limit tasks per call and reports
	// how many rows of each kind went. It never touches deliveries (see PruneDeliveries): a
	// delivery in sending outlives its task's retention.
	Prune(ctx context.Context, cutoff time.Time, terminal []string, limit int) (PruneResult, error)

	// PruneEvidence deletes at most limit (0 = no limit) evidence records created before cutoff,
	// oldest first, and reports how many went.
	PruneEvidence(ctx context.Context, cutoff time.Time, limit int) (deleted int, err error)
}

// Task is a task row. Body is the task plane's encoding of status message, history, artifacts,
// metadata and origin locator.
type Task struct {
	Principal  string
	ID         string
	ContextID  string
	Source     string
	State      string
	StatusTime time.Time
	Version    int64
	LastSeq    int64
	Body       []byte
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// TaskFilter selects tasks for ListTasks.
type TaskFilter struct {
	ContextID   string
	Source      string    // "" = any: the source the task came from
	State       string    // "" = any
	StatusAfter time.Time // zero = any; inclusive (StatusTime >= StatusAfter)
	// Cursor: when CursorID != "", return only rows strictly after (CursorTime, CursorID) in the
	// ordering (StatusTime DESC, ID DESC).
	CursorTime time.Time
	CursorID   string
	Limit      int
	// MaxBytes, when > 0, stops the listing early: once two or more rows have been read and
	// their bodies together pass MaxBytes, no more are read (the last row returned is the one
	// that passed it, so a caller bounding a page by size knows the page ends there).
	MaxBytes int
}

// ReadTasks reads the rows of a listing filtered by f, next moving to a row and scan reading it,
// and stops early once f.MaxBytes is passed (see TaskFilter.MaxBytes). The drivers share it.
func ReadTasks(f TaskFilter, next func() bool, scan func() (Task, error)) ([]Task, error) {
	var tasks []Task
	read := 0 // the bodies' bytes
	for next() {
		t, err := scan()
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, t)
		if read += len(t.Body); f.MaxBytes > 0 && len(tasks) > 1 && read > f.MaxBytes {
			break
		}
	}
	return tasks, nil
}

// TaskEvent is one entry of a task's event log.
type TaskEvent struct {
	Principal string
	TaskID    string
	Seq       int64
	Kind      string
	Payload   []byte
	CreatedAt time.Time
}

// ClaimState is the state of an idempotency claim.
type ClaimState string

const (
	ClaimPending ClaimState = "pending"
	ClaimDone    ClaimState = "done"
)

// Claim is an idempotency record keyed by (Principal, Source, Identity). For A2A intake Source is
// "a2a" and Identity the messageId.
type Claim struct {
	Principal string
	Source    string
	Identity  string
	Digest    string
	State     ClaimState
	// Outcome: "task" (TaskID set) or "message" (Message holds the encoded direct message).
	OutcomeKind string
	TaskID      string
	ContextID   string
	Message     []byte
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Context is a conversation context. ConversationKey is empty for contexts not tied to a provider
// conversation.
type Context struct {
	Principal       string
	ID              string
	Source          string
	ConversationKey string
	CreatedAt       time.Time
	LastEventAt     time.Time
}

// Anchor is a reply anchor: the provider ID of a response we sent for a task. A reply to exactly
// that provider message may continue the task.
type Anchor struct {
	Principal  string
	Source     string
	ProviderID string
	TaskID     string
	// InputSeq is the task event sequence of the input request the anchored response carried.
	InputSeq  int64
	CreatedAt time.Time
}

// Checkpoint is an intake position per (Principal, Source, Instance). Position is opaque to the
// store; Seq orders positions (a checkpoint never moves to a smaller or equal Seq); Version counts
// advances.
type Checkpoint struct {
	Principal string
	Source    string
	// Instance is the configured source instance whose provider stream the position is in: two
	// mailboxes of one principal keep two positions. "" is a checkpoint stored before checkpoints
	// were per instance (schema version 6 kept those under ""): GetCheckpoint returns it to an
	// instance that has none yet, and that instance's first AdvanceCheckpoint takes it over.
	Instance  string
	Position  []byte
	Seq       int64
	Version   int64
	UpdatedAt time.Time
}

// Evidence is one durable record of something that happened at intake, wake or delivery.
type Evidence struct {
	ID        int64 // assigned by the store
	Principal string
	Source    string
	Kind      string
	TaskID    string
	Detail    []byte // JSON object; never holds secrets
	CreatedAt time.Time
}

// EvidenceFilter selects evidence. Zero fields match anything.
type EvidenceFilter struct {
	Principal string
	Source    string
	Kind      string
	TaskID    string
	Since     time.Time
	Until     time.Time // only evidence created at or before Until
	AfterID   int64     // only evidence with ID > AfterID (for --follow)
	// Forward lists oldest first, so that Limit keeps the oldest: a follower pages forward from
	// AfterID and misses nothing when more than a page arrived between two reads.
	Forward bool
	// Follow makes the read a follower's: it stops short of an id that may still be in flight
	// (Postgres, where transactions commit out of id order), so that reading on after the
	// largest id it returned never steps over a record committed later.
	Follow bool
	Limit  int
}

// WakeState is the state of a wake row.
type WakeState string

const (
	WakePending WakeState = "pending"
	WakeActive  WakeState = "active"
	WakeDone    WakeState = "done"
	WakeFailed  WakeState = "failed"
)

// Wake is a body-free request to run a task's executor: it names the task and the activation (the
// task event sequence that caused it), never the message body.
type Wake struct {
	ID         string
	Principal  string
	TaskID     string
	Activation int64
	State      WakeState
	Attempts   int
	Detail     string
	// LeaseOwner and LeaseUntil: who holds the wake (its turn) until when; zero LeaseUntil means
	// not leased. DueAt is when a pending wake may next be claimed (a re-offer waits). They are
	// written by InsertWake (a wake may be inserted already leased), ClaimWakes and SaveWake
	// (wakes.go).
	LeaseOwner string
	LeaseUntil time.Time
	DueAt      time.Time
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// PruneResult counts what Prune deleted.
type PruneResult struct {
	Tasks    int
	Events   int
	Claims   int
	Contexts int
	Anchors  int
	Wakes    int
	// PushConfigs counts the push-notification configs deleted with their tasks.
	PushConfigs int
}

// NewClaimInserter is a Tx that can insert a claim the caller has found absent without waiting for
// the outcome (see InsertNewClaim): the Postgres driver holds the write back and sends it with the
// transaction's next statement, a round trip fewer per acceptance.
type NewClaimInserter interface {
	// InsertNewClaim inserts c. If a claim of c's identity exists, or a concurrent transaction
	// commits one first, the error wraps ErrConcurrentModification: from this call, or, when
	// the write is held back, from the statement that sends it or from the commit, so the Update
	// fails either way and nothing of it commits.
	InsertNewClaim(ctx context.Context, c Claim) error
}

// InsertNewClaim inserts c, a claim the caller found absent earlier in tx, with
// NewClaimInserter when tx has it and InsertClaim otherwise. A claim of c's identity that exists
// after all (a concurrent transaction committed it) is an error wrapping
// ErrConcurrentModification, returned here or by the Update (see NewClaimInserter).
func InsertNewClaim(ctx context.Context, tx Tx, c Claim) error {
	if n, ok := tx.(NewClaimInserter); ok {
		return n.InsertNewClaim(ctx, c)
	}
	_, inserted, err := tx.InsertClaim(ctx, c)
	if err != nil {
		return err
	}
	if !inserted {
		return ClaimTaken(c)
	}
	return nil
}

// ClaimTaken is the error of InsertNewClaim for c when a claim of its identity exists.
func ClaimTaken(c Claim) error {
	return fmt.Errorf("claim %s/%s taken by a concurrent transaction: %w", c.Source, c.Identity, ErrConcurrentModification)
}

// AcceptPrefetcher is a Tx that can read, in one round trip, what an acceptance of new work reads
// first: the claim of its identity and the context of its conversation (locked as EnsureContext
// locks it). Each result serves the first GetClaim, or EnsureContext, for the same key that
// follows in the same fn, once; later calls read again.
type AcceptPrefetcher interface {
	PrefetchAcceptance(ctx context.Context, principal, source, identity, conversationKey string) error
}

// PrefetchAcceptance asks tx to prefetch an acceptance's first reads when it is an
// AcceptPrefetcher; otherwise it does nothing.
func PrefetchAcceptance(ctx context.Context, tx Tx, principal, source, identity, conversationKey string) error {
	if p, ok := tx.(AcceptPrefetcher); ok {
		return p.PrefetchAcceptance(ctx, principal, source, identity, conversationKey)
	}
	return nil
}
