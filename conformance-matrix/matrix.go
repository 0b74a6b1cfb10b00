// Package matrix loads the conformance matrix, conformance-matrix/matrix.yaml: one row per source
// stating its event identity, conversation key, checkpoint, ack point, continuation method,
// response operation and delivery recovery class.
//
// The matrix is data the code reads, not prose: package sources gives every registered source
// its declaration from its row, the drift tests fail when a registered source has no row or a row
// has no source, and docs/a2a-source-conformance.md is rendered from it (Render, `channels
// matrix`).
package matrix

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

//go:embed matrix.yaml
var embedded []byte

// Status says who implements a row.
type Status string

// Row statuses.
const (
	// Built: a registered Source plugin implements the row.
	Built Status = "built"
	// Planned: the row is the design; no source implements it yet.
	Planned Status = "planned"
	// Binding: intake through the A2A bindings, not a Source plugin.
	Binding Status = "binding"
)

// Continuation methods: how an event may continue an existing Task.
const (
	// ReplyAnchor: the provider has a per-message reply relation; a reply to the exact response
	// we sent (a verified reply anchor) continues the waiting Task.
	ReplyAnchor = "reply-anchor"
	// ExplicitTaskID: an authenticated caller names the Task (A2A only).
	ExplicitTaskID = "explicit-task-id"
	// NoContinuation: every event is new work; recording an anchor is refused.
	NoContinuation = "none"
)

// Delivery recovery classes: what happens when a crash leaves a delivery in "sending".
const (
	Idempotent = "idempotent" // repeat the operation; the provider dedupes it
	Lookup     = "lookup"     // a Reconciler asks the provider whether it already happened
	Ambiguous  = "ambiguous"  // fail closed with evidence; an operator resolves it
)

// None is the value of a field that does not apply (a checkpoint position of a push source).
const None = "none"

// Matrix is the whole conformance matrix.
type Matrix struct {
	Version int   `yaml:"version" json:"version"`
	Sources []Row `yaml:"sources" json:"sources"`
}

// Row is one source's declaration.
type Row struct {
	Source               string           `yaml:"source" json:"source"`
	Status               Status           `yaml:"status" json:"status"`
	Summary              string           `yaml:"summary" json:"summary"`
	Capability           Capability       `yaml:"capability" json:"capability"`
	EventIdentity        List             `yaml:"event_identity" json:"eventIdentity"`
	NativeObjectIdentity List             `yaml:"native_object_identity" json:"nativeObjectIdentity"`
	ConversationKey      List             `yaml:"conversation_key" json:"conversationKey"`
	Checkpoint           CheckpointDecl   `yaml:"checkpoint" json:"checkpoint"`
	Ack                  AckDecl          `yaml:"ack" json:"ack"`
	Continuation         ContinuationDecl `yaml:"continuation" json:"continuation"`
	Response             ResponseDecl     `yaml:"response" json:"response"`
	DeliveryRecovery     string           `yaml:"delivery_recovery" json:"deliveryRecovery"`
	Receipt              string           `yaml:"receipt" json:"receipt"`
	TerminalOutcomes     TerminalOutcomes `yaml:"terminal_outcomes" json:"terminalOutcomes"`
	Tests                List             `yaml:"tests" json:"tests"`
}

// Capability lists the provider event kinds of a source by class.
type Capability struct {
	WorkProducing List `yaml:"work_producing" json:"workProducing"`
	NonWork       List `yaml:"non_work" json:"nonWork"`
	FollowOn      List `yaml:"follow_on" json:"followOn"`
	AuditPending  List `yaml:"audit_pending" json:"auditPending"`
}

// CheckpointDecl says what position a source keeps and when it is committed.
type CheckpointDecl struct {
	Position    string `yaml:"position" json:"position"`
	CommitPoint string `yaml:"commit_point" json:"commitPoint"`
}

// Declared reports whether the source keeps a checkpoint.
func (c CheckpointDecl) Declared() bool { return c.Position != None && c.Position != "" }

// AckDecl says how the provider is acknowledged and when.
type AckDecl struct {
	Operation string `yaml:"operation" json:"operation"`
	Point     string `yaml:"point" json:"point"`
}

// ContinuationDecl says how an event may continue a Task.
type ContinuationDecl struct {
	Method   string `yaml:"method" json:"method"`
	Relation string `yaml:"relation" json:"relation"`
}

// ResponseDecl says how a Task's answer goes back to the provider.
type ResponseDecl struct {
	Operation string `yaml:"operation" json:"operation"`
}

// TerminalOutcomes says what the provider sees for each terminal task state.
type TerminalOutcomes struct {
	Completed string `yaml:"completed" json:"completed"`
	Failed    string `yaml:"failed" json:"failed"`
	Canceled  string `yaml:"canceled" json:"canceled"`
	Rejected  string `yaml:"rejected" json:"rejected"`
}

// List is a list field that must be stated in the YAML even when it is empty ("[]"), so a
// forgotten field is told apart from a deliberately empty one.
type List struct {
	Items  []string
	stated bool
}

// UnmarshalYAML records that the field was stated.
func (l *List) UnmarshalYAML(n *yaml.Node) error {
	l.stated = true
	return n.Decode(&l.Items)
}

// MarshalJSON writes the items (never null).
func (l List) MarshalJSON() ([]byte, error) {
	if l.Items == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(l.Items)
}

// Stated reports whether the field appeared in the YAML.
func (l List) Stated() bool { return l.stated }

// String joins the items for display.
func (l List) String() string { return strings.Join(l.Items, "; ") }

// Parse decodes and validates a matrix. Unknown fields are errors.
func Parse(b []byte) (*Matrix, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var m Matrix
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("parse conformance matrix: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

var defaultMatrix = sync.OnceValues(func() (*Matrix, error) { return Parse(embedded) })

// Default returns the matrix embedded in the binary (conformance-matrix/matrix.yaml).
func Default() (*Matrix, error) { return defaultMatrix() }

// MustDefault is Default for callers that cannot go on without the matrix; the embedded matrix
// is validated by this package's tests, so it panics only on a broken build.
func MustDefault() *Matrix {
	m, err := Default()
	if err != nil {
		panic(err)
	}
	return m
}

// Raw returns the embedded matrix.yaml.
func Raw() []byte { return bytes.Clone(embedded) }

// Row returns the row of the named source.
func (m *Matrix) Row(source string) (Row, bool) {
	for _, r := range m.Sources {
		if r.Source == source {
			return r, true
		}
	}
	return Row{}, false
}

// Names lists the sources that have a row, sorted.
func (m *Matrix) Names() []string {
	out := make([]string, 0, len(m.Sources))
	for _, r := range m.Sources {
		out = append(out, r.Source)
	}
	sort.Strings(out)
	return out
}

// Validate checks every row and that no source has two rows. The error lists every problem.
func (m *Matrix) Validate() error {
	var errs []error
	if m.Version != 1 {
		errs = append(errs, fmt.Errorf("version %d: want 1", m.Version))
	}
	seen := map[string]bool{}
	for i, r := range m.Sources {
		if seen[r.Source] {
			errs = append(errs, fmt.Errorf("source %q: two rows", r.Source))
		}
		seen[r.Source] = true
		if err := r.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("row %d: %w", i+1, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("conformance matrix: %w", err)
	}
	return nil
}

// Validate checks that every field the row must state is stated and every enumerated field has
// a known value.
func (r Row) Validate() error {
	var missing []string
	str := func(name, v string) {
		if strings.TrimSpace(v) == "" {
			missing = append(missing, name)
		}
	}
	// nonEmpty lists must have items; stated lists may be "[]" but must appear.
	nonEmpty := func(name string, l List) {
		if len(l.Items) == 0 {
			missing = append(missing, name)
		}
	}
	stated := func(name string, l List) {
		if !l.Stated() {
			missing = append(missing, name)
		}
	}
	str("source", r.Source)
	str("status", string(r.Status))
	str("summary", r.Summary)
	nonEmpty("capability.work_producing", r.Capability.WorkProducing)
	stated("capability.non_work", r.Capability.NonWork)
	stated("capability.follow_on", r.Capability.FollowOn)
	stated("capability.audit_pending", r.Capability.AuditPending)
	nonEmpty("event_identity", r.EventIdentity)
	nonEmpty("native_object_identity", r.NativeObjectIdentity)
	nonEmpty("conversation_key", r.ConversationKey)
	str("checkpoint.position", r.Checkpoint.Position)
	str("checkpoint.commit_point", r.Checkpoint.CommitPoint)
	str("ack.operation", r.Ack.Operation)
	str("ack.point", r.Ack.Point)
	str("continuation.method", r.Continuation.Method)
	str("continuation.relation", r.Continuation.Relation)
	str("response.operation", r.Response.Operation)
	str("delivery_recovery", r.DeliveryRecovery)
	str("receipt", r.Receipt)
	str("terminal_outcomes.completed", r.TerminalOutcomes.Completed)
	str("terminal_outcomes.failed", r.TerminalOutcomes.Failed)
	str("terminal_outcomes.canceled", r.TerminalOutcomes.Canceled)
	str("terminal_outcomes.rejected", r.TerminalOutcomes.Rejected)
	stated("tests", r.Tests)
	if r.Status != Planned {
		nonEmpty("tests", r.Tests)
	}

	var errs []error
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("required fields empty or not stated: %s", strings.Join(missing, ", ")))
	}
	switch r.Status {
	case Built, Planned, Binding, "":
	default:
		errs = append(errs, fmt.Errorf("status %q: want built, planned or binding", r.Status))
	}
	switch r.Continuation.Method {
	case ReplyAnchor, ExplicitTaskID, NoContinuation, "":
	default:
		errs = append(errs, fmt.Errorf("continuation.method %q: want %s, %s or %s", r.Continuation.Method, ReplyAnchor, ExplicitTaskID, NoContinuation))
	}
	if r.Continuation.Method == ExplicitTaskID && r.Status != Binding {
		// A taskId in a provider body is data: only an authenticated A2A caller names a Task.
		errs = append(errs, fmt.Errorf("continuation.method %s is only for the A2A bindings", ExplicitTaskID))
	}
	switch r.DeliveryRecovery {
	case Idempotent, Lookup, Ambiguous, "":
	default:
		errs = append(errs, fmt.Errorf("delivery_recovery %q: want %s, %s or %s", r.DeliveryRecovery, Idempotent, Lookup, Ambiguous))
	}
	for _, t := range r.Tests.Items {
		if _, _, err := SplitTest(t); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		name := r.Source
		if name == "" {
			name = "(unnamed)"
		}
		return fmt.Errorf("source %s: %w", name, err)
	}
	return nil
}

// SplitTest splits a tests entry "path/to/pkg.TestName" into the package directory (relative to
// the module root) and the test function name.
func SplitTest(entry string) (dir, name string, err error) {
	i := strings.LastIndex(entry, ".")
	if i <= 0 || i == len(entry)-1 || !strings.HasPrefix(entry[i+1:], "Test") {
		return "", "", fmt.Errorf("tests entry %q: want package-path.TestName", entry)
	}
	return entry[:i], entry[i+1:], nil
}
