package taskplane

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/channels-dev/channels/internal/exactjson"
	"github.com/channels-dev/channels/taskplane/store"
)

// AnyVersion, given as the expected version to Apply, skips the optimistic-concurrency check. Only
// callers that already serialize their own writes (a turn holder, cancel) should use it.
const AnyVersion int64 = 0

// Change is one modification of a task applied by Apply. The implementations are SetStatus,
// AddArtifact, AddMessage and SetMetadata.
type Change interface{ isChange() }

// SetStatus moves the task to State, with an optional agent message (also appended to history).
type SetStatus struct {
	State    State
	Message  *Message
	Metadata map[string]any
}

// AddArtifact adds an artifact, or with Append extends the parts of the artifact with the same ID.
type AddArtifact struct {
	Artifact  Artifact
	Append    bool
	LastChunk bool
}

// AddMessage appends a message to the task's history.
type AddMessage struct {
	Message Message
}

// SetMetadata sets one key of the task's metadata, or deletes it when Value is nil. It appends no
// event (metadata is not part of a task's stream); executors keep their bookkeeping there, such as
// the remote agent's task id.
type SetMetadata struct {
	Key   string
	Value any
}

func (SetStatus) isChange()   {}
func (AddArtifact) isChange() {}
func (AddMessage) isChange()  {}
func (SetMetadata) isChange() {}

// Apply applies changes to a task in one transaction, guarded by expectVersion (a stale version is
// ErrConcurrentModification; AnyVersion skips the check). Each change appends one event to the
// task's log in the same transaction. A terminal task refuses every change (ErrTaskTerminal).
func (p *Plane) Apply(ctx context.Context, principal, taskID string, expectVersion int64, changes ...Change) (*Task, error) {
	var t *Task
	err := p.retryConcurrent(ctx, expectVersion == AnyVersion, func() error {
		return p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			t, err = applyTx(ctx, tx, principal, taskID, expectVersion, p.clock(), changes...)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("update task %s: %w", taskID, err)
	}
	p.broker.publish(principal, taskID)
	return t, nil
}

// applyTx is Apply inside a caller's transaction; the caller wakes this process's subscribers
// after its commit (p.broker.publish).
func applyTx(ctx context.Context, tx store.Tx, principal, taskID string, expectVersion int64, now time.Time, changes ...Change) (*Task, error) {
	t, err := getTask(ctx, tx, principal, taskID)
	if err != nil {
		return nil, err
	}
	if expectVersion != AnyVersion && t.Version != expectVersion {
		return nil, ErrConcurrentModification
	}
	return applyLoaded(ctx, tx, t, now, changes...)
}

// applyLoaded is applyTx on t, the task as this transaction has it (read or written in it); it
// changes t.
func applyLoaded(ctx context.Context, tx store.Tx, t *Task, now time.Time, changes ...Change) (*Task, error) {
	prev := t.Version
	row, err := applyChanges(ctx, tx, t, now, changes...)
	if err != nil {
		return nil, err
	}
	if err := tx.UpdateTask(ctx, row, prev); err != nil {
		return nil, err
	}
	return t, nil
}

// applyChanges applies changes to t and appends their events to its log, and returns t's new row
// (one version on) for the caller to write.
func applyChanges(ctx context.Context, tx eventAppender, t *Task, now time.Time, changes ...Change) (store.Task, error) {
	prev := t.Version
	for _, c := range changes {
		if t.Status.State.Terminal() {
			return store.Task{}, ErrTaskTerminal
		}
		if err := applyChange(ctx, tx, t, c, now); err != nil {
			return store.Task{}, err
		}
	}
	t.Version, t.UpdatedAt = prev+1, now
	row, err := encodeTask(t)
	if err != nil {
		return store.Task{}, err
	}
	if addsContent(changes) {
		if err := checkTaskSize(t, row); err != nil {
			return store.Task{}, err
		}
	}
	return row, nil
}

// addsContent reports whether changes add to a task's body beyond a status move: a message, an
// artifact, metadata, or a status that carries a message.
func addsContent(changes []Change) bool {
	for _, c := range changes {
		if st, ok := c.(SetStatus); !ok || st.Message != nil {
			return true
		}
	}
	return false
}

// statusTime is the timestamp of a new status of t at now: never before its current status's.
// Tasks are listed by status time, and a page token is a position in that order, so a task
// whose status time went back (the clock stepped back) would be listed again after a page that
// held it.
func statusTime(t *Task, now time.Time) time.Time {
	if now.Before(t.Status.Timestamp) {
		return t.Status.Timestamp
	}
	return now
}

func applyChange(ctx context.Context, tx eventAppender, t *Task, c Change, now time.Time) error {
	switch c := c.(type) {
	case SetStatus:
		if !c.State.Valid() {
			return invalidf("unknown state %q", c.State)
		}
		if !CanTransition(t.Status.State, c.State) {
			return fmt.Errorf("%w: %s to %s", ErrIllegalTransition, t.Status.State, c.State)
		}
		st := Status{State: c.State, Timestamp: statusTime(t, now)}
		if c.Message != nil {
			m := *c.Message
			m.TaskID, m.ContextID = t.ID, t.ContextID
			st.Message = &m
			t.History = append(t.History, m)
		}
		t.Status = st
		seq, err := appendEvent(ctx, tx, t, EventStatus, StatusUpdate{Status: st, Metadata: c.Metadata}, now)
		if err != nil {
			return err
		}
		if c.State.Interrupted() {
			t.InputRequest = seq
		} else {
			t.InputRequest = 0
		}
	case AddArtifact:
		if c.Artifact.ID == "" {
			return invalidf("artifact has no id")
		}
		merged := false
		for i := range t.Artifacts {
			if t.Artifacts[i].ID != c.Artifact.ID {
				continue
			}
			if c.Append {
				t.Artifacts[i].Parts = append(t.Artifacts[i].Parts, c.Artifact.Parts...)
			} else {
				t.Artifacts[i] = c.Artifact
			}
			merged = true
			break
		}
		if !merged {
			t.Artifacts = append(t.Artifacts, c.Artifact)
		}
		if _, err := appendEvent(ctx, tx, t, EventArtifact, ArtifactUpdate(c), now); err != nil {
			return err
		}
	case AddMessage:
		m := c.Message
		if len(m.Parts) == 0 {
			return invalidf("message has no parts")
		}
		m.TaskID, m.ContextID = t.ID, t.ContextID
		t.History = append(t.History, m)
		if _, err := appendEvent(ctx, tx, t, EventMessage, m, now); err != nil {
			return err
		}
	case SetMetadata:
		if c.Key == "" {
			return invalidf("metadata key is empty")
		}
		if c.Value == nil {
			delete(t.Metadata, c.Key)
			break
		}
		md := make(map[string]any, len(t.Metadata)+1)
		for k, v := range t.Metadata {
			md[k] = v
		}
		md[c.Key] = c.Value
		t.Metadata = md
	default:
		return invalidf("unknown change %T", c)
	}
	return nil
}

// retryConcurrent runs op again while it fails with ErrConcurrentModification and retry is true.
// Writers that did not pin a version (AnyVersion) lose a race on a shared engine only because
// another transaction committed between their read and their write; reading again is correct.
func (p *Plane) retryConcurrent(ctx context.Context, retry bool, op func() error) error {
	const attempts = 50
	for i := 0; ; i++ {
		err := op()
		if !retry || i == attempts-1 || !errors.Is(err, ErrConcurrentModification) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(rand.IntN(1+i)) * time.Millisecond):
		}
	}
}

// Cancel moves a non-terminal task to CANCELED and reports canceled true. Cancel is idempotent: a
// task already CANCELED is returned as it is, with canceled false (no event, no notice to its
// provider). Any other terminal task is ErrTaskNotCancelable.
func (p *Plane) Cancel(ctx context.Context, principal, taskID string, metadata map[string]any) (t *Task, canceled bool, err error) {
	var held store.Wake
	err = p.retryConcurrent(ctx, true, func() error {
		return p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			canceled, held = false, store.Wake{}
			cur, err := getTask(ctx, tx, principal, taskID)
			if err != nil {
				return err
			}
			switch {
			case cur.Status.State == StateCanceled:
				t, canceled = cur, false
				return nil
			case cur.Status.State.Terminal():
				return ErrTaskNotCancelable
			}
			now := p.clock()
			t, err = applyTx(ctx, tx, principal, taskID, cur.Version, now, SetStatus{State: StateCanceled, Metadata: metadata})
			if err != nil {
				return err
			}
			canceled = true
			held, err = p.holdResultTx(ctx, tx, t, now)
			return err
		})
	})
	if err != nil {
		return nil, false, fmt.Errorf("cancel task %s: %w", taskID, err)
	}
	if !canceled {
		return t, false, nil
	}
	p.broker.publish(principal, taskID)
	// A canceled native task tells its provider, as any other outcome does.
	p.sendHomeHeld(ctx, t, held)
	return t, true, nil
}

// GetTask returns the principal's task; another principal's task is ErrTaskNotFound.
func (p *Plane) GetTask(ctx context.Context, principal, taskID string) (*Task, error) {
	return getTask(ctx, p.store, principal, taskID)
}

// ListQuery selects tasks for ListTasks.
type ListQuery struct {
	ContextID   string
	State       State
	StatusAfter time.Time
	PageSize    int
	PageToken   string
	// MaxBytes bounds a page by the stored size of its tasks: once the tasks taken pass it, the
	// page ends there and NextPageToken continues after them (a page always holds one task).
	// 0 leaves pages bounded by PageSize alone.
	MaxBytes int
}

// List page sizes.
const (
	DefaultPageSize = 50
	MaxPageSize     = 100
)

// TaskPage is one page of ListTasks. NextPageToken is "" on the last page.
type TaskPage struct {
	Tasks         []*Task
	NextPageToken string
	PageSize      int
	TotalSize     int
}

type pageToken struct {
	T  time.Time `json:"t"`
	ID string    `json:"i"`
}

// ListTasks lists the principal's tasks, newest status first, a page at a time. PageSize 0 means
// DefaultPageSize; outside 1..MaxPageSize is ErrInvalid; a malformed token is ErrInvalid.
func (p *Plane) ListTasks(ctx context.Context, principal string, q ListQuery) (TaskPage, error) {
	size := q.PageSize
	if size == 0 {
		size = DefaultPageSize
	}
	if size < 1 || size > MaxPageSize {
		return TaskPage{}, invalidf("pageSize must be between 1 and %d", MaxPageSize)
	}
	if q.State != "" && !q.State.Valid() {
		return TaskPage{}, invalidf("unknown state %q", q.State)
	}
	if !storableKey(q.ContextID) {
		// No context has such an id.
		return TaskPage{PageSize: size}, nil
	}
	// Status times are kept to the microsecond: a bound between two microseconds starts at the
	// next one, or it would take a task stamped before it.
	after := q.StatusAfter
	if us := after.Truncate(time.Microsecond); us.Before(after) {
		after = us.Add(time.Microsecond)
	}
	f := store.TaskFilter{ContextID: q.ContextID, State: string(q.State), StatusAfter: after, Limit: size + 1,
		MaxBytes: q.MaxBytes}
	if q.PageToken != "" {
		var tok pageToken
		if err := decodeToken(q.PageToken, &tok); err != nil || tok.ID == "" || tok.T.IsZero() || !storableKey(tok.ID) {
			return TaskPage{}, invalidf("malformed pageToken")
		}
		f.CursorTime, f.CursorID = tok.T, tok.ID
	}
	rows, total, err := p.store.ListTasks(ctx, principal, f)
	if err != nil {
		return TaskPage{}, fmt.Errorf("list tasks: %w", err)
	}
	page := TaskPage{PageSize: size, TotalSize: total}
	taken := 0 // the stored size of the tasks in the page
	for i, r := range rows {
		if i == size || (i > 0 && q.MaxBytes > 0 && taken+len(r.Body) > q.MaxBytes) {
			last := rows[i-1]
			page.NextPageToken = encodeToken(pageToken{T: last.StatusTime, ID: last.ID})
			break
		}
		taken += len(r.Body)
		t, err := decodeTask(r)
		if err != nil {
			return TaskPage{}, err
		}
		page.Tasks = append(page.Tasks, t)
	}
	return page, nil
}

// Events returns the task's events with Seq > after, decoded, in order.
func (p *Plane) Events(ctx context.Context, principal, taskID string, after int64, limit int) ([]TaskEvent, error) {
	t, err := getTask(ctx, p.store, principal, taskID)
	if err != nil {
		return nil, err
	}
	rows, err := p.store.TaskEvents(ctx, principal, taskID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read events of task %s: %w", taskID, err)
	}
	out := make([]TaskEvent, 0, len(rows))
	for _, r := range rows {
		ev, err := decodeEvent(r, t.ContextID)
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, nil
}

func decodeEvent(r store.TaskEvent, contextID string) (TaskEvent, error) {
	ev := TaskEvent{TaskID: r.TaskID, ContextID: contextID, Seq: r.Seq, Kind: r.Kind, Time: r.CreatedAt}
	var dst any
	switch r.Kind {
	case EventTask:
		ev.Task = &Task{}
		dst = ev.Task
	case EventStatus:
		ev.Status = &StatusUpdate{}
		dst = ev.Status
	case EventArtifact:
		ev.Artifact = &ArtifactUpdate{}
		dst = ev.Artifact
	case EventMessage:
		ev.Message = &Message{}
		dst = ev.Message
	default:
		return ev, fmt.Errorf("task %s event %d: unknown kind %q", r.TaskID, r.Seq, r.Kind)
	}
	if err := exactjson.Unmarshal(r.Payload, dst); err != nil {
		return ev, fmt.Errorf("task %s event %d: %w", r.TaskID, r.Seq, err)
	}
	return ev, nil
}

// preparedUpdate is a task change worked out outside the writer: changes applied to a copy of a
// task as a turn last saw it, its new row encoded and its events recorded. write stores it in a
// transaction if the stored task is still the version it was prepared from.
type preparedUpdate struct {
	task   *Task      // the task after the changes
	row    store.Task // its row, one version on from the version it was prepared from
	events []preparedEvent
}

type preparedEvent struct {
	seq     int64
	kind    string
	payload []byte
	at      time.Time
}

// AppendTaskEvent records the event (preparedUpdate is the eventAppender of prepareUpdate).
func (u *preparedUpdate) AppendTaskEvent(_ context.Context, _, _ string, seq int64, kind string, payload []byte, at time.Time) error {
	u.events = append(u.events, preparedEvent{seq, kind, payload, at})
	return nil
}

// prepareUpdate applies changes to t (which it takes over) at now, outside any transaction: the
// JSON of the task and its events is encoded off the single writer.
func prepareUpdate(t *Task, now time.Time, changes ...Change) (*preparedUpdate, error) {
	u := &preparedUpdate{task: t}
	row, err := applyChanges(context.Background(), u, t, now, changes...)
	if err != nil {
		return nil, err
	}
	u.row = row
	return u, nil
}

// write stores u in tx, guarded by the version u was prepared from: ErrConcurrentModification
// if the task changed since (the caller then applies its changes to the task as stored). The
// events go first and the task row last, the order every other writer of a task uses (applyTx):
// on Postgres a writer racing this one then waits on the first event's seq rather than holding
// the row this one needs, and no two writers of one task deadlock.
func (u *preparedUpdate) write(ctx context.Context, tx store.Tx) error {
	if err := u.appendEvents(ctx, tx); err != nil {
		return err
	}
	return tx.UpdateTask(ctx, u.row, u.row.Version-1)
}

// writeNew stores u's events and row, the row of a task this transaction creates (inserted, not
// updated: it is not stored yet).
func (u *preparedUpdate) writeNew(ctx context.Context, tx store.Tx, row store.Task) error {
	if err := u.appendEvents(ctx, tx); err != nil {
		return err
	}
	if err := tx.InsertTask(ctx, row); err != nil {
		return fmt.Errorf("insert task: %w", err)
	}
	return nil
}

func (u *preparedUpdate) appendEvents(ctx context.Context, tx store.Tx) error {
	for _, e := range u.events {
		if err := tx.AppendTaskEvent(ctx, u.task.Origin.Principal, u.task.ID, e.seq, e.kind, e.payload, e.at); err != nil {
			return fmt.Errorf("append %s event to task %s: %w", e.kind, u.task.ID, err)
		}
	}
	return nil
}
