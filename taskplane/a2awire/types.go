package a2awire

import (
	"encoding/base64"
	"encoding/json"
	"time"
)

// ProtocolVersion is the A2A protocol version Channels speaks (Major.Minor).
const ProtocolVersion = "1.0"

// Binding names as they appear in AgentInterface.protocolBinding.
const (
	BindingHTTPJSON = "HTTP+JSON"
	BindingJSONRPC  = "JSONRPC"
)

// Role is a message role, by its proto enum name.
type Role string

// Roles.
const (
	RoleUnspecified Role = "ROLE_UNSPECIFIED"
	RoleUser        Role = "ROLE_USER"
	RoleAgent       Role = "ROLE_AGENT"
)

var roleNumbers = []Role{RoleUnspecified, RoleUser, RoleAgent}

// TaskState is a task state, by its proto enum name.
type TaskState string

// Task states.
const (
	TaskStateUnspecified   TaskState = "TASK_STATE_UNSPECIFIED"
	TaskStateSubmitted     TaskState = "TASK_STATE_SUBMITTED"
	TaskStateWorking       TaskState = "TASK_STATE_WORKING"
	TaskStateCompleted     TaskState = "TASK_STATE_COMPLETED"
	TaskStateFailed        TaskState = "TASK_STATE_FAILED"
	TaskStateCanceled      TaskState = "TASK_STATE_CANCELED"
	TaskStateInputRequired TaskState = "TASK_STATE_INPUT_REQUIRED"
	TaskStateRejected      TaskState = "TASK_STATE_REJECTED"
	TaskStateAuthRequired  TaskState = "TASK_STATE_AUTH_REQUIRED"
)

// taskStateNumbers is indexed by the proto enum number.
var taskStateNumbers = []TaskState{TaskStateUnspecified, TaskStateSubmitted, TaskStateWorking,
	TaskStateCompleted, TaskStateFailed, TaskStateCanceled, TaskStateInputRequired,
	TaskStateRejected, TaskStateAuthRequired}

// Part is one piece of content. Exactly one of Text, Raw, URL and Data is set; Data holds any
// JSON value, including null (json.RawMessage("null")).
type Part struct {
	Text      *string
	Raw       []byte
	URL       *string
	Data      json.RawMessage
	Filename  string
	MediaType string
	Metadata  map[string]any
}

type partJSON struct {
	Text      *string         `json:"text,omitempty"`
	Raw       *string         `json:"raw,omitempty"`
	URL       *string         `json:"url,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	Filename  string          `json:"filename,omitempty"`
	MediaType string          `json:"mediaType,omitempty"`
	Metadata  map[string]any  `json:"metadata,omitempty"`
}

// MarshalJSON writes the part with its single content member.
func (p Part) MarshalJSON() ([]byte, error) {
	j := partJSON{Filename: p.Filename, MediaType: p.MediaType, Metadata: p.Metadata}
	switch {
	case p.Data != nil:
		j.Data = p.Data
	case p.URL != nil:
		j.URL = p.URL
	case p.Raw != nil:
		s := base64.StdEncoding.EncodeToString(p.Raw)
		j.Raw = &s
	default:
		t := ""
		if p.Text != nil {
			t = *p.Text
		}
		j.Text = &t
	}
	return json.Marshal(j)
}

// Message is an A2A Message.
type Message struct {
	MessageID        string         `json:"messageId"`
	ContextID        string         `json:"contextId,omitempty"`
	TaskID           string         `json:"taskId,omitempty"`
	Role             Role           `json:"role"`
	Parts            []Part         `json:"parts"`
	Metadata         map[string]any `json:"metadata,omitempty"`
	Extensions       []string       `json:"extensions,omitempty"`
	ReferenceTaskIDs []string       `json:"referenceTaskIds,omitempty"`
}

// Artifact is an A2A Artifact.
type Artifact struct {
	ArtifactID  string         `json:"artifactId"`
	Name        string         `json:"name,omitempty"`
	Description string         `json:"description,omitempty"`
	Parts       []Part         `json:"parts"`
	Metadata    map[string]any `json:"metadata,omitempty"`
	Extensions  []string       `json:"extensions,omitempty"`
}

// TaskStatus is a task's state with its optional message and timestamp (RFC 3339, UTC,
// milliseconds).
type TaskStatus struct {
	State     TaskState `json:"state"`
	Message   *Message  `json:"message,omitempty"`
	Timestamp string    `json:"timestamp,omitempty"`
}

// Task is an A2A Task.
type Task struct {
	ID        string         `json:"id"`
	ContextID string         `json:"contextId,omitempty"`
	Status    TaskStatus     `json:"status"`
	Artifacts []Artifact     `json:"artifacts,omitempty"`
	History   []Message      `json:"history,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// TaskStatusUpdateEvent is a stream event announcing a status change.
type TaskStatusUpdateEvent struct {
	TaskID    string         `json:"taskId"`
	ContextID string         `json:"contextId"`
	Status    TaskStatus     `json:"status"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// TaskArtifactUpdateEvent is a stream event carrying an artifact or a chunk of one.
type TaskArtifactUpdateEvent struct {
	TaskID    string         `json:"taskId"`
	ContextID string         `json:"contextId"`
	Artifact  Artifact       `json:"artifact"`
	Append    bool           `json:"append,omitempty"`
	LastChunk bool           `json:"lastChunk,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// StreamResponse is one stream event; exactly one member is set.
type StreamResponse struct {
	Task           *Task                    `json:"task,omitempty"`
	Message        *Message                 `json:"message,omitempty"`
	StatusUpdate   *TaskStatusUpdateEvent   `json:"statusUpdate,omitempty"`
	ArtifactUpdate *TaskArtifactUpdateEvent `json:"artifactUpdate,omitempty"`
}

// SendMessageResponse is the answer of SendMessage: a Task or a direct Message.
type SendMessageResponse struct {
	Task    *Task    `json:"task,omitempty"`
	Message *Message `json:"message,omitempty"`
}

// SendMessageConfiguration is the configuration member of SendMessageRequest.
type SendMessageConfiguration struct {
	AcceptedOutputModes []string
	// HistoryLength is nil when absent (proto3 optional).
	HistoryLength     *int
	ReturnImmediately bool
	// PushConfig reports whether taskPushNotificationConfig was given.
	PushConfig bool
	// PushNotificationConfig is the decoded taskPushNotificationConfig (nil when absent), to be
	// registered on the task in the acceptance.
	PushNotificationConfig *TaskPushNotificationConfig
}

// SendMessageRequest is the request of SendMessage and SendStreamingMessage.
type SendMessageRequest struct {
	Tenant        string
	Message       Message
	Configuration SendMessageConfiguration
	Metadata      map[string]any
}

// GetTaskRequest is the request of GetTask.
type GetTaskRequest struct {
	Tenant        string
	ID            string
	HistoryLength *int
}

// ListTasksRequest is the request of ListTasks.
type ListTasksRequest struct {
	Tenant               string
	ContextID            string
	Status               TaskState // "" or TaskStateUnspecified: no filter
	PageSize             *int
	PageToken            string
	HistoryLength        *int
	StatusTimestampAfter time.Time // zero: no filter
	IncludeArtifacts     bool
}

// ListTasksResponse is the answer of ListTasks. All four members are always emitted.
type ListTasksResponse struct {
	Tasks         []Task `json:"tasks"`
	NextPageToken string `json:"nextPageToken"`
	PageSize      int    `json:"pageSize"`
	TotalSize     int    `json:"totalSize"`
}

// CancelTaskRequest is the request of CancelTask.
type CancelTaskRequest struct {
	Tenant   string
	ID       string
	Metadata map[string]any
}

// SubscribeToTaskRequest is the request of SubscribeToTask.
type SubscribeToTaskRequest struct {
	Tenant string
	ID     string
}

// TenantRequest is a request that carries nothing but a tenant (GetExtendedAgentCard) or whose
// other members Channels does not read (the push-config methods, refused).
type TenantRequest struct {
	Tenant string
}

// FormatTime formats t as the spec prefers: RFC 3339, UTC, millisecond precision, "Z".
func FormatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}
