package a2aagent

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/channels-dev/channels/internal/exactjson"
	"github.com/channels-dev/channels/taskplane"
)

// Conversions between the task plane's domain types and a2a-go's. Parts keep their content kind,
// filename, media type and metadata; data parts travel as JSON.

func toPart(p taskplane.Part) *a2a.Part {
	var out *a2a.Part
	switch {
	case p.Data != nil:
		var v any
		if err := exactjson.Unmarshal(p.Data, &v); err != nil {
			v = string(p.Data)
		}
		out = a2a.NewDataPart(v)
	case p.URL != "":
		out = &a2a.Part{Content: a2a.URL(p.URL)}
	case p.Raw != nil:
		out = a2a.NewRawPart(p.Raw)
	default:
		out = a2a.NewTextPart(p.Text)
	}
	out.Filename, out.MediaType, out.Metadata = p.Filename, p.MediaType, p.Metadata
	return out
}

func fromPart(p *a2a.Part) taskplane.Part {
	out := taskplane.Part{Filename: p.Filename, MediaType: p.MediaType, Metadata: p.Metadata}
	switch c := p.Content.(type) {
	case a2a.Text:
		out.Text = string(c)
	case a2a.Raw:
		out.Raw = []byte(c)
	case a2a.URL:
		out.URL = string(c)
	case a2a.Data:
		b, err := json.Marshal(c.Value)
		if err != nil {
			b = []byte("null")
		}
		out.Data = b
	}
	return out
}

func fromParts(ps []*a2a.Part) []taskplane.Part {
	out := make([]taskplane.Part, 0, len(ps))
	for _, p := range ps {
		if p != nil {
			out = append(out, fromPart(p))
		}
	}
	return out
}

// fromMessage converts a downstream agent message; remote records where it came from.
func fromMessage(m *a2a.Message, remote map[string]any) *taskplane.Message {
	if m == nil {
		return nil
	}
	md := maps.Clone(m.Metadata)
	if md == nil {
		md = map[string]any{}
	}
	md[MetaRemote] = remote
	return &taskplane.Message{ID: m.ID, Role: taskplane.RoleAgent, Parts: fromParts(m.Parts), Metadata: md,
		Extensions: slices.Clone(m.Extensions)}
}

func fromArtifact(a *a2a.Artifact) taskplane.Artifact {
	return taskplane.Artifact{ID: string(a.ID), Name: a.Name, Description: a.Description, Parts: fromParts(a.Parts),
		Metadata: a.Metadata, Extensions: slices.Clone(a.Extensions)}
}

// question turns a downstream INPUT_REQUIRED / AUTH_REQUIRED status message into our question. An
// elicitation schema (in the message's metadata, or as a {"requestedSchema": …} data part) is
// kept as the question's requestedSchema.
func question(m *a2a.Message, auth bool) taskplane.Question {
	q := taskplane.Question{Auth: auth}
	if m == nil {
		q.Text = "The agent needs more input to continue."
		if auth {
			q.Text = "The agent needs you to authenticate to continue."
		}
		return q
	}
	if el, ok := m.Metadata[taskplane.ExtElicitation].(map[string]any); ok {
		if s, ok := el["requestedSchema"]; ok {
			q.RequestedSchema, _ = json.Marshal(s)
		}
	}
	for _, p := range m.Parts {
		if p == nil {
			continue
		}
		if d, ok := p.Content.(a2a.Data); ok && q.RequestedSchema == nil {
			if obj, ok := d.Value.(map[string]any); ok && len(obj) == 1 && obj["requestedSchema"] != nil {
				q.RequestedSchema, _ = json.Marshal(obj["requestedSchema"])
				continue
			}
		}
		q.Parts = append(q.Parts, fromPart(p))
	}
	if len(q.Parts) == 0 {
		q.Text = "The agent needs more input to continue."
	}
	return q
}
