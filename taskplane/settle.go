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

// ErrNotFinished is Settle's error for a task that is not in a terminal state.
var ErrNotFinished = errors.New("task is not finished")

// Validate checks a settlement's outcome token and feedback size (ErrInvalid).
func (s Settlement) Validate() error {
	if len(s.Outcome) > 64 || !outcomeToken.MatchString(s.Outcome) {
		return invalidf("outcome %q must match %s and be at most 64 bytes", s.Outcome, OutputNamePattern)
	}
	if len(s.Feedback) > MaxFeedback {
		return invalidf("feedback longer than %d bytes", MaxFeedback)
	}
	return nil
}

// Settle records an outcome and feedback on a finished task of the principal without changing its
// state (no status event; the version moves), and writes settled evidence under the task's
// source. A later Settle replaces the earlier one.
//
// An A2A send settles through Accept instead (Event.Settlement), so that the settlement is
// recorded under its messageId's claim, and its evidence under the source it came in on (a2a):
// it is that event's intake disposition.
func (p *Plane) Settle(ctx context.Context, principal, taskID string, s Settlement) (*Task, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var t *Task
	err := p.retryConcurrent(ctx, true, func() error {
		return p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			if t, err = getTask(ctx, tx, principal, taskID); err != nil {
				return err
			}
			return settleTx(ctx, tx, principal, t.Origin.Source, t, s, nil, p.clock())
		})
	})
	if err != nil {
		return nil, fmt.Errorf("settle task %s: %w", taskID, err)
	}
	return t, nil
}

// settleTx records s on t, a task of principal read in tx, if it is finished (ErrNotFinished otherwise), with
// settled evidence of source carrying detail besides the outcome and state.
func settleTx(ctx context.Context, tx store.Tx, principal, source string, t *Task, s Settlement, detail map[string]any, now time.Time) error {
	if !t.Status.State.Terminal() {
		return fmt.Errorf("%w: it is %s", ErrNotFinished, t.Status.State)
	}
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
	d := map[string]any{"outcome": s.Outcome, "state": t.Status.State}
	maps.Copy(d, detail)
	return evidence(ctx, tx, principal, source, EvidenceSettled, t.ID, d, now)
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

// SettledOutcome is the Acceptance outcome of an event that settled a finished task
// (Event.Settlement; the A2A bindings answer such a send with the task). A duplicate of it is
// Duplicate, with the task as it is.
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

// Redo names the finished or abandoned task(s) a new task redoes (Event.Redo).
type Redo struct {
	Supersedes string // RedoSupersedes
	RetryOf    string // RedoRetryOf
}

// links is r by its metadata keys, without the empty ones.
func (r *Redo) links() map[string]string {
	out := map[string]string{}
	if r == nil {
		return out
	}
	for k, id := range map[string]string{RedoSupersedes: r.Supersedes, RedoRetryOf: r.RetryOf} {
		if id != "" {
			out[k] = id
		}
	}
	return out
}

// RedoOf reads supersedes / retryOf from outfitter-task/v1 metadata of a send request, then of
// its message (each key from the first that names it). It returns nil when neither names one.
func RedoOf(mds ...map[string]any) *Redo {
	var r Redo
	for _, md := range mds {
		m, _ := md[ExtOutfitterTask].(map[string]any)
		if id, ok := m[RedoSupersedes].(string); ok && r.Supersedes == "" {
			r.Supersedes = id
		}
		if id, ok := m[RedoRetryOf].(string); ok && r.RetryOf == "" {
			r.RetryOf = id
		}
	}
	if r == (Redo{}) {
		return nil
	}
	return &r
}

// linkRedo records, inside the acceptance transaction, that the new task t redoes the task(s) its
// event names (Event.Redo): t gets the link and the chain of its predecessors, each predecessor
// the forward link. A predecessor the principal does not own is ErrTaskNotFound (nothing is
// accepted).
func linkRedo(ctx context.Context, tx store.Tx, ev *Event, t *Task, now time.Time) error {
	links := ev.Redo.links()
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
