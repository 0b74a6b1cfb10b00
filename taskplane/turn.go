package taskplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"

	"gopkg.in/yaml.v3"

	matrix "github.com/channels-dev/channels/conformance-matrix"
)

// What every executor does with a turn, written once: record a declared output, complete with a
// response and outputs, reject with a reason, ask a question. The worker API, the exec executor
// and the remote A2A executor all go through these, so the rules are the same for each.

// Extension URIs the task plane writes into metadata. They equal the constants of package a2awire,
// which renders them on the wire.
const (
	// ExtOutfitterTask keys a task's outfitter-task/v1 metadata: the redo chain (supersedes,
	// retryOf, chain, supersededBy, retriedBy) and the dispatcher's settlement (outcome, feedback).
	ExtOutfitterTask = "https://channels.dev/a2a/ext/outfitter-task/v1"
	// ExtElicitation keys a question's {"requestedSchema": …} on its status message.
	ExtElicitation = "https://channels.dev/a2a/ext/elicitation/v1"
	// MetaRemoteAgent keys the a2a executor's link from a task to the task it started at the
	// downstream agent ({"agentUrl", "taskId", "contextId", "sent"}): the executor follows,
	// continues and cancels the task it names, so only the executor writes it (serverMetadata).
	MetaRemoteAgent = "https://channels.dev/a2a/ext/remote-agent/v1"
)

// serverMetadata are the task metadata keys only the server writes: an executor's record of its
// own state and a failure's reason. An event that carries one in its metadata is refused
// (ErrInvalid) rather than stored: a caller that set the a2a executor's link would have the
// executor read, continue and cancel a downstream task that is not the caller's.
var serverMetadata = []string{MetaRemoteAgent, MetaReason}

// outputName is the pattern of a workflow output name.
var outputName = regexp.MustCompile(`^[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*$`)

// OutputNamePattern is the pattern every workflow output name matches.
const OutputNamePattern = `^[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*$`

// Output is one workflow output: a named JSON object. It becomes the artifact "output:<name>",
// streamed to subscribers as an artifactUpdate; recording a name again replaces it.
type Output struct {
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
}

// OutputDecl declares one output in a workflow manifest.
type OutputDecl struct {
	Name        string `json:"name" yaml:"name"`
	Description string `json:"description,omitempty" yaml:"description,omitempty"`
}

// Manifest is a workflow manifest: the outputs an agent may record. Without one, any name that
// matches OutputNamePattern is accepted.
type Manifest struct {
	Outputs []OutputDecl `json:"outputs" yaml:"outputs"`
}

// LoadManifest reads a manifest file (YAML, or JSON, which is YAML too).
func LoadManifest(path string) (*Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read workflow manifest: %w", err)
	}
	var m Manifest
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("parse workflow manifest %s: %w", path, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("workflow manifest %s: %w", path, err)
	}
	return &m, nil
}

// Validate checks that every declared name matches OutputNamePattern and appears once.
func (m *Manifest) Validate() error {
	seen := map[string]bool{}
	for _, o := range m.Outputs {
		if !outputName.MatchString(o.Name) {
			return invalidf("output name %q does not match %s", o.Name, OutputNamePattern)
		}
		if seen[o.Name] {
			return invalidf("output %q is declared twice", o.Name)
		}
		seen[o.Name] = true
	}
	return nil
}

// Declares reports whether the manifest declares name (a nil manifest declares every valid name).
func (m *Manifest) Declares(name string) bool {
	if m == nil {
		return true
	}
	return slices.ContainsFunc(m.Outputs, func(o OutputDecl) bool { return o.Name == name })
}

// WithManifest sets the workflow manifest outputs are checked against (default: none, any valid
// name).
func WithManifest(m *Manifest) Option { return func(p *Plane) { p.manifest = m } }

// WithQuestionPolicy sets how the plane decides whether a task's source can take a question
// (default: the source's continuation method in conformance-matrix/matrix.yaml). The function
// returns an error wrapping ErrContinuationNotAllowed to refuse.
func WithQuestionPolicy(f func(source string) error) Option {
	return func(p *Plane) { p.queue.questions = f }
}

// Manifest returns the workflow manifest (nil when none is configured).
func (p *Plane) Manifest() *Manifest { return p.manifest }

// ValidateOutput checks an output: a valid, declared name and a JSON object value.
func (p *Plane) ValidateOutput(o Output) error {
	if !outputName.MatchString(o.Name) {
		return invalidf("output name %q does not match %s", o.Name, OutputNamePattern)
	}
	if !p.manifest.Declares(o.Name) {
		return invalidf("output %q is not declared in the workflow manifest", o.Name)
	}
	v := bytes.TrimSpace(o.Value)
	var obj map[string]any
	if len(v) == 0 || v[0] != '{' || json.Unmarshal(v, &obj) != nil {
		return invalidf("output %q: the value must be a JSON object", o.Name)
	}
	return nil
}

// OutputArtifact is the artifact an output becomes.
func OutputArtifact(o Output) Artifact {
	return Artifact{ID: "output:" + o.Name, Name: o.Name,
		Parts:    []Part{{Data: json.RawMessage(bytes.TrimSpace(o.Value)), MediaType: "application/json"}},
		Metadata: map[string]any{ExtOutfitterTask: map[string]any{"output": o.Name}}}
}

// QuestionAllowed returns nil if a task from source may be put in INPUT_REQUIRED or
// AUTH_REQUIRED: its source declares a continuation method, so an answer can reach the task. It
// returns an error wrapping ErrContinuationNotAllowed otherwise.
func (p *Plane) QuestionAllowed(source string) error {
	if p.queue.questions != nil {
		return p.queue.questions(source)
	}
	return matrixQuestionPolicy(source)
}

// matrixQuestionPolicy reads the source's continuation method from the conformance matrix.
func matrixQuestionPolicy(source string) error {
	if source == SourceA2A {
		return nil // explicit-task-id: the caller continues with the taskId
	}
	row, ok, err := matrix.Find(source)
	if err != nil {
		return fmt.Errorf("conformance matrix: %w", err)
	}
	if !ok {
		return fmt.Errorf("source %q has no row in the conformance matrix: %w", source, ErrContinuationNotAllowed)
	}
	if row.Continuation.Method == "" || row.Continuation.Method == matrix.NoContinuation {
		return fmt.Errorf("source %q declares continuation %q: %w", source, row.Continuation.Method, ErrContinuationNotAllowed)
	}
	return nil
}

// RecordOutput records a workflow output while the task is WORKING.
func (t *Turn) RecordOutput(ctx context.Context, o Output) error {
	if err := t.plane.ValidateOutput(o); err != nil {
		return err
	}
	if st := t.Task.Status.State; st != StateWorking {
		return invalidf("outputs are recorded while the task is WORKING; it is %s", st)
	}
	return t.Update(ctx, AddArtifact{Artifact: OutputArtifact(o)})
}

// Complete records outputs and completes the task with an optional response, in one transaction.
func (t *Turn) Complete(ctx context.Context, response *Message, outputs ...Output) error {
	changes := make([]Change, 0, len(outputs)+1)
	for _, o := range outputs {
		if err := t.plane.ValidateOutput(o); err != nil {
			return err
		}
		changes = append(changes, AddArtifact{Artifact: OutputArtifact(o)})
	}
	if response != nil {
		response = agentMessage(t.plane, *response)
	}
	return t.Update(ctx, append(changes, SetStatus{State: StateCompleted, Message: response})...)
}

// Reject moves the task to REJECTED with the reason as the agent's status message.
func (t *Turn) Reject(ctx context.Context, reason string) error {
	if reason == "" {
		return invalidf("a rejection needs a reason")
	}
	msg := &Message{ID: t.plane.newID(), Role: RoleAgent, Parts: []Part{TextPart(reason)},
		Metadata: map[string]any{MetaReason: "rejected"}}
	return t.Update(ctx, SetStatus{State: StateRejected, Message: msg})
}

// Question is what RequireInput asks.
type Question struct {
	// Text is the question; Parts, if set, are sent after it.
	Text  string
	Parts []Part
	// RequestedSchema, if set, is an MCP-style JSON Schema (an object) of the answer: callers that
	// activated the elicitation extension receive it as a data part.
	RequestedSchema json.RawMessage
	// Auth asks for authentication (AUTH_REQUIRED) instead of input.
	Auth bool
}

// RequireInput puts the task in INPUT_REQUIRED (AUTH_REQUIRED with q.Auth) with the question as
// the agent's status message. It is refused with ErrContinuationNotAllowed when the task's
// source declares no continuation method: the answer could never reach the task.
func (t *Turn) RequireInput(ctx context.Context, q Question) error {
	if err := t.plane.QuestionAllowed(t.Task.Origin.Source); err != nil {
		return err
	}
	msg, err := questionMessage(t.plane, q)
	if err != nil {
		return err
	}
	state := StateInputRequired
	if q.Auth {
		state = StateAuthRequired
	}
	return t.Update(ctx, SetStatus{State: state, Message: msg})
}

func questionMessage(p *Plane, q Question) (*Message, error) {
	var parts []Part
	if q.Text != "" {
		parts = append(parts, TextPart(q.Text))
	}
	parts = append(parts, q.Parts...)
	if len(parts) == 0 {
		return nil, invalidf("a question needs text or parts")
	}
	msg := &Message{ID: p.newID(), Role: RoleAgent, Parts: parts}
	if len(bytes.TrimSpace(q.RequestedSchema)) > 0 {
		var schema map[string]any
		if err := json.Unmarshal(q.RequestedSchema, &schema); err != nil {
			return nil, invalidf("requestedSchema must be a JSON object")
		}
		msg.Metadata = map[string]any{ExtElicitation: map[string]any{"requestedSchema": schema}}
	}
	return msg, nil
}

// agentMessage completes a message an executor built: an id, the agent role.
func agentMessage(p *Plane, m Message) *Message {
	if m.ID == "" {
		m.ID = p.newID()
	}
	m.Role = RoleAgent
	return &m
}
