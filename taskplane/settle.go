package taskplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// Settle and redo. The dispatcher of a task (its A2A caller, or a resident agent through the
// worker API) may record how a finished task turned out without changing its state, and a new
// task may name the one it redoes. Both live in the task's outfitter-task/v1 metadata, so a GET
// shows them:
//
//	metadata["https://channels.dev/a2a/ext/outfitter-task/v1"] = {
//	  "outcome": "accepted", "feedback": "…", "settledAt": "…",    // Settle
//	  "supersedes": "t1" | "retryOf": "t1", "chain": ["t0", "t1"],  // this task redoes t1
//	  "supersededBy": ["t3"], "retriedBy": ["t4"]                   // later tasks redo this one
//	}

// Settlement is what Settle records.
type Settlement struct {
	// Outcome is a short token: "accepted", "rejected", "partial", … (OutputNamePattern, at most
	// 64 bytes).
	Outcome string `json:"outcome"`
	// Feedback is free text, at most MaxFeedback bytes.
	Feedback string `json:"feedback,omitempty"`
}

// MaxFeedback bounds a settlement's feedback.
const MaxFeedback = 8 << 10

// Redo links, as keys of the outfitter-task/v1 metadata.
const (
	RedoSupersedes = "supersedes"
	RedoRetryOf    = "retryOf"
)

var outcomeToken = regexp.MustCompile(`^[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*$`)

// ErrNotFinished: Settle of a task that is not in a terminal state.
var ErrNotFinished = errors.New("task is not finished")

// Settle records an outcome and feedback on a finished task of the principal without changing its
// state (no status event; the version moves), and writes settled evidence. A later Settle
// replaces the earlier one.
func (p *Plane) Settle(ctx context.Context, principal, taskID string, s Settlement) (*Task, error) {
	if len(s.Outcome) > 64 || !outcomeToken.MatchString(s.Outcome) {
		return nil, invalidf("outcome %q must match %s and be at most 64 bytes", s.Outcome, OutputNamePattern)
	}
	if len(s.Feedback) > MaxFeedback {
		return nil, invalidf("feedback longer than %d bytes", MaxFeedback)
	}
	var t *Task
	err := p.retryConcurrent(ctx, true, func() error {
		return p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			if t, err = getTask(ctx, tx, principal, taskID); err != nil {
				return err
			}
			if !t.Status.State.Terminal() {
				return fmt.Errorf("%w: it is %s", ErrNotFinished, t.Status.State)
			}
			now := p.clock()
			m := outfitter(t)
			m["outcome"], m["settledAt"] = s.Outcome, now.Format(time.RFC3339Nano)
			if s.Feedback != "" {
				m["feedback"] = s.Feedback
			} else {
				delete(m, "feedback")
			}
			if err := writeTaskRow(ctx, tx, t, now); err != nil {
				return err
			}
			return evidence(ctx, tx, principal, t.Origin.Source, EvidenceSettled, t.ID,
				map[string]any{"outcome": s.Outcome, "state": t.Status.State}, now)
		})
	})
	if err != nil {
		return nil, fmt.Errorf("settle task %s: %w", taskID, err)
	}
	return t, nil
}

// outfitter returns the task's outfitter-task/v1 metadata object, creating it.
func outfitter(t *Task) map[string]any {
	if t.Metadata == nil {
		t.Metadata = map[string]any{}
	}
	m, ok := t.Metadata[ExtOutfitterTask].(map[string]any)
	if !ok {
		m = map[string]any{}
		t.Metadata[ExtOutfitterTask] = m
	}
	return m
}

// writeTaskRow stores t's body (a metadata change: no event) and bumps its version.
func writeTaskRow(ctx context.Context, tx store.Tx, t *Task, now time.Time) error {
	prev := t.Version
	t.Version, t.UpdatedAt = prev+1, now
	row, err := encodeTask(t)
	if err != nil {
		return err
	}
	return tx.UpdateTask(ctx, row, prev)
}

// SettledOutcome is the Acceptance outcome of a send that settled a finished task (the A2A
// bindings answer such a send with the task).
const SettledOutcome Outcome = "settled"

// SettlementOf reads a settlement from outfitter-task/v1 metadata of a send request, then of its
// message: {"outcome": "…", "feedback": "…"}. ok is false when neither names an outcome.
func SettlementOf(mds ...map[string]any) (Settlement, bool) {
	for _, md := range mds {
		m, _ := md[ExtOutfitterTask].(map[string]any)
		if o, ok := m["outcome"].(string); ok && o != "" {
			f, _ := m["feedback"].(string)
			return Settlement{Outcome: o, Feedback: f}, true
		}
	}
	return Settlement{}, false
}

// redoLinks reads supersedes / retryOf from an event's outfitter-task/v1 metadata (the request's,
// then the message's).
func redoLinks(ev *Event) map[string]string {
	out := map[string]string{}
	for _, md := range []map[string]any{ev.Metadata, ev.Message.Metadata} {
		m, _ := md[ExtOutfitterTask].(map[string]any)
		for _, k := range []string{RedoSupersedes, RedoRetryOf} {
			if id, ok := m[k].(string); ok && id != "" && out[k] == "" {
				out[k] = id
			}
		}
	}
	return out
}

// linkRedo records, inside the acceptance transaction, that the new task t redoes the task(s) its
// event names: t gets the link and the chain of its predecessors, each predecessor the forward
// link. A predecessor the principal does not own is ErrTaskNotFound (nothing is accepted).
func linkRedo(ctx context.Context, tx store.Tx, ev *Event, t *Task, now time.Time) error {
	links := redoLinks(ev)
	if len(links) == 0 {
		return nil
	}
	back := map[string]string{RedoSupersedes: "supersededBy", RedoRetryOf: "retriedBy"}
	// The task's metadata is the event's map: copy before writing into it.
	t.Metadata = maps.Clone(t.Metadata)
	if inner, ok := t.Metadata[ExtOutfitterTask].(map[string]any); ok {
		t.Metadata[ExtOutfitterTask] = maps.Clone(inner)
	}
	m := outfitter(t)
	var chain []string
	for _, k := range []string{RedoSupersedes, RedoRetryOf} {
		id := links[k]
		if id == "" {
			continue
		}
		prev, err := getTask(ctx, tx, ev.Principal, id)
		if err != nil {
			return fmt.Errorf("%s %s: %w", k, id, err)
		}
		m[k] = id
		for _, c := range anyStrings(outfitter(prev)["chain"]) {
			if !slices.Contains(chain, c) {
				chain = append(chain, c)
			}
		}
		if !slices.Contains(chain, id) {
			chain = append(chain, id)
		}
		pm := outfitter(prev)
		pm[back[k]] = append(anyStrings(pm[back[k]]), t.ID)
		if err := writeTaskRow(ctx, tx, prev, now); err != nil {
			return fmt.Errorf("link %s %s: %w", k, id, err)
		}
	}
	m["chain"] = chain
	return nil
}

// anyStrings reads a JSON array of strings ([]any after decoding, []string before).
func anyStrings(v any) []string {
	switch v := v.(type) {
	case []string:
		return slices.Clone(v)
	case []any:
		out := make([]string, 0, len(v))
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
