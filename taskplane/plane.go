package taskplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/channels-dev/channels/internal/exactjson"
	"github.com/channels-dev/channels/taskplane/store"
)

// DefaultRetention is how long a conversation's terminal tasks and idempotency claims are kept
// after its last event.
const DefaultRetention = 30 * 24 * time.Hour

// Plane is the durable task plane: acceptance, task updates, reads and event-log subscriptions
// over one store. It is safe for concurrent use.
type Plane struct {
	store     store.Store
	broker    *broker
	now       func() time.Time
	newID     func() string
	log       *slog.Logger
	retention time.Duration
	// followOutage bounds the retries of a follower's failed reads (follow.go).
	followOutage time.Duration
	// queue holds the wake queue's settings and its change signal (wakequeue.go).
	queue queueConfig
	// manifest declares the workflow outputs executors may record (turn.go); nil allows any.
	manifest *Manifest
}

// Option configures a Plane.
type Option func(*Plane)

// WithClock sets the clock (tests).
func WithClock(now func() time.Time) Option { return func(p *Plane) { p.now = now } }

// WithIDs sets the id generator for tasks, contexts and wakes (tests).
func WithIDs(newID func() string) Option { return func(p *Plane) { p.newID = newID } }

// WithLogger sets the logger (nil: slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(p *Plane) {
		if l != nil {
			p.log = l
		}
	}
}

// WithRetention sets the retention window (default DefaultRetention; zero or less keeps the
// default). It is used as given: a window shorter than the hours a provider redelivers an event
// for (channels serve refuses less than a day) forgets claims a redelivery still needs, and the
// redelivery becomes new work.
func WithRetention(d time.Duration) Option {
	return func(p *Plane) {
		if d > 0 {
			p.retention = d
		}
	}
}

// New returns a Plane over s. The caller keeps ownership of s.
func New(s store.Store, opts ...Option) *Plane {
	p := &Plane{
		store:     s,
		broker:    newBroker(),
		now:       store.NowFunc(s),
		newID:     func() string { return uuid.Must(uuid.NewV7()).String() },
		log:       slog.Default(),
		retention: DefaultRetention,

		followOutage: DefaultFollowOutage,
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Store returns the underlying store.
func (p *Plane) Store() store.Store { return p.store }

// clock returns the current time as the store keeps it: UTC, microseconds.
func (p *Plane) clock() time.Time { return p.now().UTC().Truncate(time.Microsecond) }

// decodeTask turns a store row into a Task.
func decodeTask(r store.Task) (*Task, error) {
	var b taskBody
	if err := exactjson.Unmarshal(r.Body, &b); err != nil {
		return nil, fmt.Errorf("decode task %s: %w", r.ID, err)
	}
	return &Task{
		ID:           r.ID,
		ContextID:    r.ContextID,
		Status:       b.Status,
		History:      b.History,
		Artifacts:    b.Artifacts,
		Metadata:     b.Metadata,
		Origin:       b.Origin,
		InputRequest: b.InputRequest,
		Version:      r.Version,
		LastSeq:      r.LastSeq,
		CreatedAt:    r.CreatedAt,
		UpdatedAt:    r.UpdatedAt,
	}, nil
}

// MaxTaskBytes bounds a task's stored body (its history, artifacts, metadata and status, encoded):
// a change that adds content — the first message, a continuation, a message, an artifact, metadata
// — and would leave the task over it is refused with ErrInvalid, so one conversation cannot grow a
// row without bound (each change rewrites the body). A change that adds no content (a bare status
// move, such as a claim's WORKING) or that ends the task is never refused, so a full task can
// still be worked, fail or complete.
const MaxTaskBytes = 8 << 20

// checkTaskSize refuses row, the encoding of t after a change that added content, when it is over
// MaxTaskBytes and t is not ending.
func checkTaskSize(t *Task, row store.Task) error {
	if len(row.Body) > MaxTaskBytes && !t.Status.State.Terminal() {
		return fmt.Errorf("%w (%w): task %s would hold %d bytes, more than the limit of %d: start a new task",
			ErrInvalid, errTaskFull, t.ID, len(row.Body), MaxTaskBytes)
	}
	return nil
}

// errTaskFull marks checkTaskSize's refusal.
var errTaskFull = errors.New("task full")

// encodeTask turns a Task into a store row (Version and LastSeq as held by t).
func encodeTask(t *Task) (store.Task, error) {
	body, err := json.Marshal(taskBody{
		Status:       t.Status,
		History:      t.History,
		Artifacts:    t.Artifacts,
		Metadata:     t.Metadata,
		Origin:       t.Origin,
		InputRequest: t.InputRequest,
	})
	if err != nil { // a value of the caller's that JSON cannot hold (a NaN, raw data not JSON)
		return store.Task{}, fmt.Errorf("%w: encode task %s: %w", ErrInvalid, t.ID, err)
	}
	return store.Task{
		Principal:  t.Origin.Principal,
		ID:         t.ID,
		ContextID:  t.ContextID,
		Source:     t.Origin.Source,
		State:      string(t.Status.State),
		StatusTime: t.Status.Timestamp,
		Version:    t.Version,
		LastSeq:    t.LastSeq,
		Body:       body,
		CreatedAt:  t.CreatedAt,
		UpdatedAt:  t.UpdatedAt,
	}, nil
}

// storableKey reports whether s can be a key the store holds: valid UTF-8 without NUL. Postgres
// text refuses NUL and invalid UTF-8 (SQLSTATE 22021), so a client's id that is not storable is
// refused (or not found: no store can hold it) before it reaches a query, on every driver alike,
// instead of failing as an internal error. Other control characters are stored as they are (rows
// earlier builds wrote hold them); what prints them to a terminal escapes them.
func storableKey(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// getTask reads and decodes a task; a missing or foreign task is ErrTaskNotFound, as is an id
// (or principal) no store can hold.
func getTask(ctx context.Context, r store.Reader, principal, id string) (*Task, error) {
	if !storableKey(principal) || !storableKey(id) {
		return nil, ErrTaskNotFound
	}
	row, err := r.GetTask(ctx, principal, id)
	if err != nil {
		if isNotFound(err) {
			return nil, ErrTaskNotFound
		}
		return nil, fmt.Errorf("get task %s: %w", id, err)
	}
	return decodeTask(row)
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, store.ErrNotFound) }

// appendEvent writes one event to t's log under the sequence after t.LastSeq, advances t.LastSeq
// to it and returns it. The caller writes t's row (InsertTask, or UpdateTask guarded by the
// version it read) in the same transaction: that stores the new LastSeq.
func appendEvent(ctx context.Context, tx eventAppender, t *Task, kind string, payload any, at time.Time) (int64, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return 0, fmt.Errorf("%w: encode %s event: %w", ErrInvalid, kind, err)
	}
	seq := t.LastSeq + 1
	if err := tx.AppendTaskEvent(ctx, t.Origin.Principal, t.ID, seq, kind, b, at); err != nil {
		return 0, fmt.Errorf("append %s event to task %s: %w", kind, t.ID, err)
	}
	t.LastSeq = seq
	return seq, nil
}

// eventAppender is the part of store.Tx that appendEvent writes to; preparedUpdate records into
// one outside any transaction.
type eventAppender interface {
	AppendTaskEvent(ctx context.Context, principal, taskID string, seq int64, kind string, payload []byte, at time.Time) error
}

// evidence writes an evidence record; detail must hold no secrets or message bodies.
func evidence(ctx context.Context, tx store.Tx, principal, source, kind, taskID string, detail map[string]any, at time.Time) error {
	var b []byte
	if detail != nil {
		var err error
		if b, err = json.Marshal(detail); err != nil {
			return fmt.Errorf("encode %s evidence: %w", kind, err)
		}
	}
	if err := tx.InsertEvidence(ctx, store.Evidence{
		Principal: principal, Source: source, Kind: kind, TaskID: taskID, Detail: b, CreatedAt: at,
	}); err != nil {
		return fmt.Errorf("write %s evidence: %w", kind, err)
	}
	return nil
}
