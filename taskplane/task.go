package taskplane

import (
	"encoding/json"
	"maps"
	"slices"
	"time"
)

// State is a task state. The eight values are the A2A v1 states; the wire names
// (TASK_STATE_WORKING …) belong to the bindings.
type State string

// The A2A task states.
const (
	StateSubmitted     State = "submitted"
	StateWorking       State = "working"
	StateInputRequired State = "input-required"
	StateAuthRequired  State = "auth-required"
	StateCompleted     State = "completed"
	StateFailed        State = "failed"
	StateCanceled      State = "canceled"
	StateRejected      State = "rejected"
)

// States lists every state, in A2A enum order.
var States = []State{StateSubmitted, StateWorking, StateCompleted, StateFailed, StateCanceled,
	StateInputRequired, StateRejected, StateAuthRequired}

// Valid reports whether s is one of the eight states.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Terminal reports whether no further change is allowed.
func (s State) Terminal() bool {
	switch s {
	case StateCompleted, StateFailed, StateCanceled, StateRejected:
		return true
	}
	return false
}

// Interrupted reports whether the task waits for the caller: it settles a blocking send, stays
// subscribable and can be continued.
func (s State) Interrupted() bool {
	return s == StateInputRequired || s == StateAuthRequired
}

// terminalStates is the list the store's Prune takes.
func terminalStates() []string {
	var out []string
	for _, s := range States {
		if s.Terminal() {
			out = append(out, string(s))
		}
	}
	return out
}

// transitions is the table of legal moves. A move to the same state is allowed for the active
// and interrupted states (a new status message). Terminal states have no entry: they are final.
var transitions = map[State][]State{
	StateSubmitted:     {StateSubmitted, StateWorking, StateInputRequired, StateAuthRequired, StateCompleted, StateFailed, StateCanceled, StateRejected},
	StateWorking:       {StateWorking, StateInputRequired, StateAuthRequired, StateCompleted, StateFailed, StateCanceled, StateRejected},
	StateInputRequired: {StateInputRequired, StateSubmitted, StateWorking, StateCompleted, StateFailed, StateCanceled, StateRejected},
	StateAuthRequired:  {StateAuthRequired, StateSubmitted, StateWorking, StateCompleted, StateFailed, StateCanceled, StateRejected},
}

// CanTransition reports whether a task in state from may move to state to.
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Role says who wrote a message.
type Role string

// Message roles.
const (
	RoleUser  Role = "user"
	RoleAgent Role = "agent"
)

// Part is one piece of message or artifact content. Exactly one of Text, Raw, URL or Data is set
// (HasData distinguishes a JSON null datum from no datum).
type Part struct {
	Text      string          `json:"text,omitempty"`
	Raw       []byte          `json:"raw,omitzero"` // an empty file stays a file: only nil is left out
	URL       string          `json:"url,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	Filename  string          `json:"filename,omitempty"`
	MediaType string          `json:"mediaType,omitempty"`
	Metadata  map[string]any  `json:"metadata,omitempty"`
}

// TextPart returns a text part.
func TextPart(s string) Part { return Part{Text: s} }

// Message is a conversation turn.
type Message struct {
	ID               string         `json:"id"`
	Role             Role           `json:"role"`
	Parts            []Part         `json:"parts"`
	ContextID        string         `json:"contextId,omitempty"`
	TaskID           string         `json:"taskId,omitempty"`
	Metadata         map[string]any `json:"metadata,omitempty"`
	Extensions       []string       `json:"extensions,omitempty"`
	ReferenceTaskIDs []string       `json:"referenceTaskIds,omitempty"`
}

// Artifact is an output of a task.
type Artifact struct {
	ID          string         `json:"id"`
	Name        string         `json:"name,omitempty"`
	Description string         `json:"description,omitempty"`
	Parts       []Part         `json:"parts"`
	Metadata    map[string]any `json:"metadata,omitempty"`
	Extensions  []string       `json:"extensions,omitempty"`
}

// Status is a task's current state with its optional message.
type Status struct {
	State     State     `json:"state"`
	Message   *Message  `json:"message,omitempty"`
	Timestamp time.Time `json:"timestamp"`
}

// Origin says where a task came from. Locator holds the source's raw provider values; nothing in
// it is trusted as an ID.
type Origin struct {
	Principal string          `json:"principal"`
	Source    string          `json:"source"`
	Identity  string          `json:"identity,omitempty"`
	Locator   json.RawMessage `json:"locator,omitempty"`
}

// Task is a unit of work.
type Task struct {
	ID        string         `json:"id"`
	ContextID string         `json:"contextId"`
	Status    Status         `json:"status"`
	History   []Message      `json:"history,omitempty"`
	Artifacts []Artifact     `json:"artifacts,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
	Origin    Origin         `json:"origin"`
	// InputRequest is the event sequence of the unanswered input request, or 0. It is set when
	// the task enters an interrupted state and cleared when a continuation arrives.
	InputRequest int64 `json:"inputRequest,omitempty"`

	// Version is the optimistic-concurrency version; LastSeq the last event-log sequence. Both
	// come from the store row, not the body.
	Version   int64     `json:"-"`
	LastSeq   int64     `json:"-"`
	CreatedAt time.Time `json:"-"`
	UpdatedAt time.Time `json:"-"`
}

// clone returns a copy of t that changes (applyChange) can make without touching t: its own
// history, artifacts (and their parts) and metadata.
func (t *Task) clone() *Task {
	cp := *t
	cp.History, cp.Artifacts, cp.Metadata = slices.Clone(t.History), slices.Clone(t.Artifacts), maps.Clone(t.Metadata)
	for i := range cp.Artifacts {
		cp.Artifacts[i].Parts = slices.Clone(cp.Artifacts[i].Parts)
	}
	return &cp
}

// taskBody is what the store keeps in a task row's Body.
type taskBody struct {
	Status       Status         `json:"status"`
	History      []Message      `json:"history,omitempty"`
	Artifacts    []Artifact     `json:"artifacts,omitempty"`
	Metadata     map[string]any `json:"metadata,omitempty"`
	Origin       Origin         `json:"origin"`
	InputRequest int64          `json:"inputRequest,omitempty"`
}

// Event kinds in a task's event log.
const (
	EventTask     = "task"     // the task was created; payload is the Task snapshot
	EventStatus   = "status"   // payload is StatusUpdate
	EventArtifact = "artifact" // payload is ArtifactUpdate
	EventMessage  = "message"  // a message was appended to history; payload is Message
)

// StatusUpdate is the payload of a status event.
type StatusUpdate struct {
	Status   Status         `json:"status"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// ArtifactUpdate is the payload of an artifact event.
type ArtifactUpdate struct {
	Artifact  Artifact `json:"artifact"`
	Append    bool     `json:"append,omitempty"`
	LastChunk bool     `json:"lastChunk,omitempty"`
}

// TaskEvent is one entry of a task's durable event log, decoded.
type TaskEvent struct {
	TaskID    string
	ContextID string
	Seq       int64
	Kind      string
	Task      *Task           // EventTask
	Status    *StatusUpdate   // EventStatus
	Artifact  *ArtifactUpdate // EventArtifact
	Message   *Message        // EventMessage
	Time      time.Time
}
