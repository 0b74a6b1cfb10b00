// Package conformance is the agent the A2A conformance kit (a2a-tck) drives: its behaviour is
// chosen by the prefix of the user message's messageId, as written down in
// shared/tck-sut-contract.md. With it the whole A2A surface of Channels can be exercised by
// independent clients without any provider attached.
//
// The most specific prefix wins (tck-artifact-file-url before tck-artifact-file). A message that
// matches no prefix completes the task with "Unhandled messageId prefix: <id>". A follow-up
// message to an existing task is answered the same way, with the id of that latest message: the
// scenario of a task is set by the message that created it, and the kit's follow-ups expect a
// plain completion.
//
// Every step is its own Turn.Update, so each one is its own event in the task's log and its own
// event on a stream. tck-message-response is answered before any task exists, through
// RespondDirectly. Cancel needs nothing from the agent: the task plane moves the task to CANCELED
// and the dispatcher stops the turn.
package conformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/executor/echo"
)

// DefaultHold is how long test-resubscribe-message-id stays WORKING: long enough for a kit to
// disconnect and resubscribe while the task is live.
const DefaultHold = 4 * time.Second

// DefaultDelay is how long tck-delayed-complete stays WORKING: long enough for a send with
// returnImmediately to come back before the task completes, and for a blocking send to be seen
// waiting for it.
const DefaultDelay = 2 * time.Second

// ErrRejected is the error of tck-reject-task: the executor fails with the text "rejected", and
// the dispatcher records that as the task's FAILED status message.
var ErrRejected = errors.New("rejected")

// Texts and values the kit checks.
const (
	TextComplete = "Hello from TCK"
	TextDirect   = "Direct message response"
	TextDelayed  = "Done after delay"
	FileURL      = "https://example.com/output.txt"
	FileName     = "output.txt"
	FileType     = "text/plain"
	DataJSON     = `{"key":"value","count":42}`
	// UnhandledPrefix starts the completion message of an unknown messageId.
	UnhandledPrefix = "Unhandled messageId prefix: "
)

// Executor is the conformance agent. The zero value is ready to use.
type Executor struct {
	// Hold is how long test-resubscribe-message-id stays WORKING (0 means DefaultHold).
	Hold time.Duration
	// Delay is how long tck-delayed-complete stays WORKING (0 means DefaultDelay).
	Delay time.Duration
}

// New returns the conformance agent with the contract's timings.
func New() *Executor { return &Executor{} }

// step is what the agent does for one prefix.
type step func(ctx context.Context, e *Executor, turn *taskplane.Turn) error

type scenario struct {
	prefix string
	run    step
}

// scenarios is the contract's table, sorted longest prefix first so that the most specific
// prefix always wins over one it extends.
var scenarios = func() []scenario {
	s := []scenario{
		{"tck-complete-task", complete(TextComplete)},
		{"tck-artifact-text", artifactThenComplete(textPart("Generated text content"))},
		{"tck-artifact-file-url", artifactThenComplete(urlFilePart)},
		{"tck-artifact-file", artifactThenComplete(rawFilePart)},
		{"tck-artifact-data", artifactThenComplete(dataPart)},
		{"tck-message-response", complete(TextDirect)}, // only when no direct answer was asked for
		{"tck-input-required", setState(taskplane.StateInputRequired)},
		// Beyond the contract: newer kits (test_task_auth_required) expect AUTH_REQUIRED here.
		{"tck-auth-required", setState(taskplane.StateAuthRequired)},
		{"tck-reject-task", func(context.Context, *Executor, *taskplane.Turn) error { return ErrRejected }},
		{"tck-stream-001", stream(textPart("Stream hello from TCK"))},
		{"tck-stream-002", setState(taskplane.StateCompleted)},
		{"tck-stream-003", stream(textPart("Stream task lifecycle"))},
		{"tck-stream-ordering-001", stream(textPart("Ordered output"))},
		{"tck-stream-artifact-text", stream(textPart("Streamed text content"))},
		{"tck-stream-artifact-file", stream(rawFilePart)},
		{"tck-stream-artifact-chunked", chunked},
		{"test-resubscribe-message-id", holdThenComplete(func(e *Executor) time.Duration { return cmp.Or(e.Hold, DefaultHold) }, "")},
		// Beyond the contract: the kit's execution-mode tests (CORE-EXECUTION-MODE-001/002) tell
		// a blocking send from a non-blocking one by a task that completes after a delay.
		{"tck-delayed-complete", holdThenComplete(func(e *Executor) time.Duration { return cmp.Or(e.Delay, DefaultDelay) }, TextDelayed)},
	}
	sort.SliceStable(s, func(i, j int) bool { return len(s[i].prefix) > len(s[j].prefix) })
	return s
}()

// Prefixes lists the messageId prefixes the agent knows, most specific first.
func Prefixes() []string {
	out := make([]string, len(scenarios))
	for i, s := range scenarios {
		out[i] = s.prefix
	}
	return out
}

func match(messageID string) (scenario, bool) {
	for _, s := range scenarios {
		if strings.HasPrefix(messageID, s.prefix) {
			return s, true
		}
	}
	return scenario{}, false
}

// RespondDirectly answers tck-message-response with a direct agent Message and no Task. Every
// other message, and any message to an existing task, gets a Task.
func (*Executor) RespondDirectly(_ context.Context, _ string, msg taskplane.Message) (*taskplane.Message, bool) {
	if msg.TaskID != "" || !strings.HasPrefix(msg.ID, "tck-message-response") {
		return nil, false
	}
	return &taskplane.Message{ID: uuid.NewString(), Role: taskplane.RoleAgent, ContextID: msg.ContextID,
		Parts: []taskplane.Part{taskplane.TextPart(TextDirect)}}, true
}

// Execute runs the scenario of the task's latest user message.
func (e *Executor) Execute(ctx context.Context, turn *taskplane.Turn) error {
	m := echo.LatestUserMessage(turn.Task)
	if m == nil {
		return complete(UnhandledPrefix)(ctx, e, turn)
	}
	if followUp(turn.Task) {
		return complete(UnhandledPrefix+m.ID)(ctx, e, turn)
	}
	s, ok := match(m.ID)
	if !ok {
		return complete(UnhandledPrefix+m.ID)(ctx, e, turn)
	}
	if err := s.run(ctx, e, turn); err != nil {
		if errors.Is(err, ErrRejected) {
			return err
		}
		return fmt.Errorf("conformance scenario %s on task %s: %w", s.prefix, turn.Task.ID, err)
	}
	return nil
}

// followUp reports whether the task holds more than one user message: a continuation.
func followUp(t *taskplane.Task) bool {
	n := 0
	for _, m := range t.History {
		if m.Role == taskplane.RoleUser {
			n++
		}
	}
	return n > 1
}

func agentText(s string) *taskplane.Message {
	return &taskplane.Message{ID: uuid.NewString(), Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart(s)}}
}

func complete(text string) step {
	return func(ctx context.Context, _ *Executor, turn *taskplane.Turn) error {
		return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted, Message: agentText(text)})
	}
}

func setState(s taskplane.State) step {
	return func(ctx context.Context, _ *Executor, turn *taskplane.Turn) error {
		return turn.Update(ctx, taskplane.SetStatus{State: s})
	}
}

func textPart(s string) func() taskplane.Part {
	return func() taskplane.Part { return taskplane.TextPart(s) }
}

func urlFilePart() taskplane.Part {
	return taskplane.Part{URL: FileURL, Filename: FileName, MediaType: FileType}
}

func rawFilePart() taskplane.Part {
	return taskplane.Part{Raw: []byte("tck"), Filename: FileName, MediaType: FileType}
}

func dataPart() taskplane.Part { return taskplane.Part{Data: []byte(DataJSON)} }

func newArtifact(p taskplane.Part) taskplane.Artifact {
	return taskplane.Artifact{ID: uuid.NewString(), Parts: []taskplane.Part{p}}
}

// artifactThenComplete adds one artifact, then completes: two updates, two events.
func artifactThenComplete(part func() taskplane.Part) step {
	return func(ctx context.Context, _ *Executor, turn *taskplane.Turn) error {
		if err := turn.Update(ctx, taskplane.AddArtifact{Artifact: newArtifact(part())}); err != nil {
			return err
		}
		return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted})
	}
}

// working puts the task in WORKING unless the turn's grant already did (it always does when the
// wake queue offered the task), so a stream shows one WORKING event.
func working(ctx context.Context, turn *taskplane.Turn) error {
	if turn.Task.Status.State == taskplane.StateWorking {
		return nil
	}
	return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateWorking})
}

// stream is WORKING, one artifact, COMPLETED.
func stream(part func() taskplane.Part) step {
	return func(ctx context.Context, _ *Executor, turn *taskplane.Turn) error {
		if err := working(ctx, turn); err != nil {
			return err
		}
		if err := turn.Update(ctx, taskplane.AddArtifact{Artifact: newArtifact(part())}); err != nil {
			return err
		}
		return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted})
	}
}

// chunked is WORKING, two appended chunks of one artifact (the second the last), COMPLETED.
func chunked(ctx context.Context, _ *Executor, turn *taskplane.Turn) error {
	if err := working(ctx, turn); err != nil {
		return err
	}
	id := uuid.NewString()
	for i, text := range []string{"chunk-1 ", "chunk-2"} {
		a := taskplane.Artifact{ID: id, Parts: []taskplane.Part{taskplane.TextPart(text)}}
		if err := turn.Update(ctx, taskplane.AddArtifact{Artifact: a, Append: true, LastChunk: i == 1}); err != nil {
			return err
		}
	}
	return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted})
}

// holdThenComplete stays WORKING for hold(e), then completes, with an agent message of text if
// it is not empty. A cancel (or shutdown) ends the wait.
func holdThenComplete(hold func(*Executor) time.Duration, text string) step {
	return func(ctx context.Context, e *Executor, turn *taskplane.Turn) error {
		if err := working(ctx, turn); err != nil {
			return err
		}
		t := time.NewTimer(hold(e))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		done := taskplane.SetStatus{State: taskplane.StateCompleted}
		if text != "" {
			done.Message = agentText(text)
		}
		return turn.Update(ctx, done)
	}
}
