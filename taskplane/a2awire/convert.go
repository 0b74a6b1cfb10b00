package a2awire

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/channels-dev/channels/taskplane"
)

// Extension URIs Channels supports. They are stable identifiers, documented in docs/a2a.md.
const (
	// ExtOutfitterTask adds a task locator to every Task a caller receives, under
	// metadata[ExtOutfitterTask]: the interface URL, binding, protocol version, tenant and task
	// id, so equal task ids from two servers never collide in a client.
	ExtOutfitterTask = "https://channels.dev/a2a/ext/outfitter-task/v1"
	// ExtElicitation carries a question's MCP-style requestedSchema as a data part of the
	// INPUT_REQUIRED status message, for callers that activated it. An executor asks for
	// structured input by putting {"requestedSchema": <JSON Schema>} under
	// metadata[ExtElicitation] of that status message; callers that did not activate the
	// extension see neither the metadata entry nor the data part.
	ExtElicitation = "https://channels.dev/a2a/ext/elicitation/v1"
)

// Extensions is a set of activated extension URIs, in a stable order.
type Extensions []string

// Has reports whether uri is activated.
func (e Extensions) Has(uri string) bool { return slices.Contains(e, uri) }

// Locator is the outfitter-task/v1 task locator.
type Locator struct {
	InterfaceURL    string `json:"interfaceUrl"`
	ProtocolBinding string `json:"protocolBinding"`
	ProtocolVersion string `json:"protocolVersion"`
	Tenant          string `json:"tenant,omitempty"`
	TaskID          string `json:"taskId"`
}

// View says how a task is shown to one caller.
type View struct {
	// History is how many of the most recent history messages to include; 0 omits history.
	History int
	// Artifacts includes the task's artifacts.
	Artifacts bool
	// Extensions are the caller's activated extensions.
	Extensions Extensions
	// Locator is the caller's interface, used when ExtOutfitterTask is activated (TaskID is
	// filled per task).
	Locator *Locator
}

var stateNames = map[taskplane.State]TaskState{
	taskplane.StateSubmitted:     TaskStateSubmitted,
	taskplane.StateWorking:       TaskStateWorking,
	taskplane.StateCompleted:     TaskStateCompleted,
	taskplane.StateFailed:        TaskStateFailed,
	taskplane.StateCanceled:      TaskStateCanceled,
	taskplane.StateInputRequired: TaskStateInputRequired,
	taskplane.StateRejected:      TaskStateRejected,
	taskplane.StateAuthRequired:  TaskStateAuthRequired,
}

// FromState returns the wire name of a domain state.
func FromState(s taskplane.State) TaskState {
	if w, ok := stateNames[s]; ok {
		return w
	}
	return TaskStateUnspecified
}

// ToState returns the domain state of a wire state; ok is false for UNSPECIFIED and unknown
// names.
func ToState(s TaskState) (taskplane.State, bool) {
	for d, w := range stateNames {
		if w == s {
			return d, true
		}
	}
	return "", false
}

// ToMessage converts a decoded wire message to the domain.
func ToMessage(m Message) taskplane.Message {
	out := taskplane.Message{
		ID:               m.MessageID,
		ContextID:        m.ContextID,
		TaskID:           m.TaskID,
		Metadata:         m.Metadata,
		Extensions:       m.Extensions,
		ReferenceTaskIDs: m.ReferenceTaskIDs,
		Parts:            make([]taskplane.Part, 0, len(m.Parts)),
	}
	switch m.Role {
	case RoleUser:
		out.Role = taskplane.RoleUser
	case RoleAgent:
		out.Role = taskplane.RoleAgent
	}
	for _, p := range m.Parts {
		dp := taskplane.Part{Filename: p.Filename, MediaType: p.MediaType, Metadata: p.Metadata}
		switch {
		case p.Data != nil:
			dp.Data = p.Data
		case p.URL != nil:
			dp.URL = *p.URL
		case p.Raw != nil:
			dp.Raw = p.Raw
		case p.Text != nil:
			dp.Text = *p.Text
		}
		out.Parts = append(out.Parts, dp)
	}
	return out
}

// FromMessage converts a domain message to the wire, applying the caller's extensions.
func FromMessage(m taskplane.Message, v View) Message {
	out := Message{
		MessageID:        m.ID,
		ContextID:        m.ContextID,
		TaskID:           m.TaskID,
		Role:             RoleUnspecified,
		Metadata:         m.Metadata,
		Extensions:       m.Extensions,
		ReferenceTaskIDs: m.ReferenceTaskIDs,
		Parts:            make([]Part, 0, len(m.Parts)+1),
	}
	switch m.Role {
	case taskplane.RoleUser:
		out.Role = RoleUser
	case taskplane.RoleAgent:
		out.Role = RoleAgent
	}
	for _, p := range m.Parts {
		out.Parts = append(out.Parts, FromPart(p))
	}
	if el, ok := m.Metadata[ExtElicitation]; ok {
		out.Metadata = maps.Clone(m.Metadata)
		if v.Extensions.Has(ExtElicitation) {
			if obj, ok := el.(map[string]any); ok {
				if schema, ok := obj["requestedSchema"]; ok {
					if data, err := json.Marshal(map[string]any{"requestedSchema": schema}); err == nil {
						out.Parts = append(out.Parts, Part{Data: data, MediaType: "application/json"})
					}
				}
			}
			if !slices.Contains(out.Extensions, ExtElicitation) {
				out.Extensions = append(slices.Clone(out.Extensions), ExtElicitation)
			}
		} else {
			delete(out.Metadata, ExtElicitation)
			if len(out.Metadata) == 0 {
				out.Metadata = nil
			}
		}
	}
	// A failure's reason is outfitter-task/v1 data: a caller that activated the extension gets it
	// with the URI listed on the message, others neither.
	if _, ok := out.Metadata[taskplane.MetaReason]; ok {
		if v.Extensions.Has(ExtOutfitterTask) {
			if !slices.Contains(out.Extensions, ExtOutfitterTask) {
				out.Extensions = append(slices.Clone(out.Extensions), ExtOutfitterTask)
			}
		} else {
			out.Metadata = maps.Clone(out.Metadata)
			delete(out.Metadata, taskplane.MetaReason)
			if len(out.Metadata) == 0 {
				out.Metadata = nil
			}
		}
	}
	return out
}

// FromPart converts a domain part to the wire.
func FromPart(p taskplane.Part) Part {
	out := Part{Filename: p.Filename, MediaType: p.MediaType, Metadata: p.Metadata}
	switch {
	case p.Data != nil:
		out.Data = p.Data
	case p.URL != "":
		u := p.URL
		out.URL = &u
	case p.Raw != nil:
		out.Raw = p.Raw
	default:
		t := p.Text
		out.Text = &t
	}
	return out
}

// FromArtifact converts a domain artifact to the wire.
func FromArtifact(a taskplane.Artifact) Artifact {
	out := Artifact{ArtifactID: a.ID, Name: a.Name, Description: a.Description, Metadata: a.Metadata,
		Extensions: a.Extensions, Parts: make([]Part, 0, len(a.Parts))}
	for _, p := range a.Parts {
		out.Parts = append(out.Parts, FromPart(p))
	}
	return out
}

// FromStatus converts a domain status to the wire.
func FromStatus(s taskplane.Status, v View) TaskStatus {
	out := TaskStatus{State: FromState(s.State), Timestamp: FormatTime(s.Timestamp)}
	if s.Message != nil {
		m := FromMessage(*s.Message, v)
		out.Message = &m
	}
	return out
}

// FromTask converts a domain task to the wire as the view says.
func FromTask(t *taskplane.Task, v View) *Task {
	out := &Task{ID: t.ID, ContextID: t.ContextID, Status: FromStatus(t.Status, v), Metadata: t.Metadata}
	if v.History > 0 && len(t.History) > 0 {
		h := t.History
		if len(h) > v.History {
			h = h[len(h)-v.History:]
		}
		out.History = make([]Message, 0, len(h))
		for _, m := range h {
			out.History = append(out.History, FromMessage(m, v))
		}
	}
	if v.Artifacts && len(t.Artifacts) > 0 {
		out.Artifacts = make([]Artifact, 0, len(t.Artifacts))
		for _, a := range t.Artifacts {
			out.Artifacts = append(out.Artifacts, FromArtifact(a))
		}
	}
	if v.Locator != nil && v.Extensions.Has(ExtOutfitterTask) {
		loc := *v.Locator
		loc.TaskID = t.ID
		out.Metadata = maps.Clone(t.Metadata)
		if out.Metadata == nil {
			out.Metadata = map[string]any{}
		}
		if prior, ok := t.Metadata[ExtOutfitterTask].(map[string]any); ok {
			// The task's own outfitter-task metadata (redo chain, settlement) keeps its keys;
			// the locator's fields join them.
			merged := maps.Clone(prior)
			merged["interfaceUrl"], merged["protocolBinding"], merged["protocolVersion"] = loc.InterfaceURL, loc.ProtocolBinding, loc.ProtocolVersion
			merged["taskId"] = loc.TaskID
			if loc.Tenant != "" {
				merged["tenant"] = loc.Tenant
			}
			out.Metadata[ExtOutfitterTask] = merged
		} else {
			out.Metadata[ExtOutfitterTask] = loc
		}
	}
	return out
}

// FromEvent converts one task event-log entry to a stream event. Entries that are not stream
// events (messages appended to history) return nil.
func FromEvent(ev taskplane.TaskEvent, v View) *StreamResponse {
	switch ev.Kind {
	case taskplane.EventTask:
		if ev.Task == nil {
			return nil
		}
		t := ev.Task
		if t.ContextID == "" {
			t.ContextID = ev.ContextID
		}
		return &StreamResponse{Task: FromTask(t, v)}
	case taskplane.EventStatus:
		if ev.Status == nil {
			return nil
		}
		return &StreamResponse{StatusUpdate: &TaskStatusUpdateEvent{
			TaskID: ev.TaskID, ContextID: ev.ContextID, Status: FromStatus(ev.Status.Status, v), Metadata: ev.Status.Metadata,
		}}
	case taskplane.EventArtifact:
		if ev.Artifact == nil {
			return nil
		}
		return &StreamResponse{ArtifactUpdate: &TaskArtifactUpdateEvent{
			TaskID: ev.TaskID, ContextID: ev.ContextID, Artifact: FromArtifact(ev.Artifact.Artifact),
			Append: ev.Artifact.Append, LastChunk: ev.Artifact.LastChunk,
		}}
	}
	return nil
}
