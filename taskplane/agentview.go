package taskplane

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// AgentView is a task as an out-of-process agent reads it (the worker API, the exec executor's
// stdin). Everything a person or a provider wrote is untrusted: each user message is marked
// Untrusted and its text parts are wrapped in untrusted-content markers carrying a per-read
// nonce, so an agent (or the model behind it) can tell instructions from content, and content
// cannot forge the closing marker.
type AgentView struct {
	ID        string         `json:"id"`
	ContextID string         `json:"contextId"`
	State     State          `json:"state"`
	Source    string         `json:"source"`
	History   []ViewMessage  `json:"history"`
	Artifacts []Artifact     `json:"artifacts,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
	// Nonce is the value of the markers' id attribute in this view.
	Nonce string `json:"untrustedNonce"`
	// Outputs lists the workflow outputs the manifest declares (none: any valid name).
	Outputs []OutputDecl `json:"declaredOutputs,omitempty"`
	// CanAsk says whether RequireInput is allowed: the source declares a continuation method.
	CanAsk bool `json:"canRequireInput"`
	// UpdatedAt is when the task last changed.
	UpdatedAt time.Time `json:"updatedAt"`
}

// ViewMessage is one history message of an AgentView.
type ViewMessage struct {
	ID        string `json:"messageId"`
	Role      Role   `json:"role"`
	Untrusted bool   `json:"untrusted,omitempty"`
	Parts     []Part `json:"parts"`
}

// UntrustedOpen and UntrustedClose format the markers around untrusted text; %s is the nonce.
const (
	UntrustedOpen  = `<untrusted-content id="%s">`
	UntrustedClose = `</untrusted-content id="%s">`
)

// WrapUntrusted wraps text in untrusted-content markers with the given nonce.
func WrapUntrusted(text, nonce string) string {
	return fmt.Sprintf(UntrustedOpen, nonce) + "\n" + text + "\n" + fmt.Sprintf(UntrustedClose, nonce)
}

// View returns the agent's view of t, with a fresh nonce.
func (p *Plane) View(t *Task) AgentView {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	nonce := hex.EncodeToString(b)
	v := AgentView{ID: t.ID, ContextID: t.ContextID, State: t.Status.State, Source: t.Origin.Source,
		Artifacts: t.Artifacts, Metadata: t.Metadata, Nonce: nonce, CanAsk: p.QuestionAllowed(t.Origin.Source) == nil,
		UpdatedAt: t.UpdatedAt, History: make([]ViewMessage, 0, len(t.History))}
	if p.manifest != nil {
		v.Outputs = p.manifest.Outputs
	}
	for _, m := range t.History {
		vm := ViewMessage{ID: m.ID, Role: m.Role, Untrusted: m.Role != RoleAgent, Parts: make([]Part, len(m.Parts))}
		for i, part := range m.Parts {
			if vm.Untrusted && part.Text != "" {
				part.Text = WrapUntrusted(part.Text, nonce)
			}
			vm.Parts[i] = part
		}
		v.History = append(v.History, vm)
	}
	return v
}
