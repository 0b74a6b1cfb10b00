// Package echo is the built-in agent of the no-config quickstart: it completes every task with an
// agent message that repeats the text of the user's latest message.
//
//	d := &taskplane.Dispatcher{Plane: plane, Executor: echo.New()}
package echo

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/channels-dev/channels/taskplane"
)

// Executor echoes the text parts of the latest user message.
type Executor struct{}

// New returns the echo executor.
func New() *Executor { return &Executor{} }

// Execute completes the task with an agent message holding the text parts of the latest user
// message. A message with no text part is answered with a note saying so, so the task still
// completes.
func (*Executor) Execute(ctx context.Context, turn *taskplane.Turn) error {
	if err := turn.Update(ctx, reply(turn.Task)...); err != nil {
		return fmt.Errorf("echo: complete task %s: %w", turn.Task.ID, err)
	}
	return nil
}

// Inline returns the turn Execute records, for the plane to run in the acceptance of a new A2A
// task (taskplane.InlineExecutor): the echo needs nothing but the task.
func (*Executor) Inline() taskplane.InlineFunc {
	return func(t *taskplane.Task) ([]taskplane.Change, bool) { return reply(t), true }
}

// reply is the echo's turn on t: COMPLETED, with the agent's message.
func reply(t *taskplane.Task) []taskplane.Change {
	var parts []taskplane.Part
	if m := LatestUserMessage(t); m != nil {
		for _, p := range m.Parts {
			if p.Text != "" {
				parts = append(parts, taskplane.TextPart(p.Text))
			}
		}
	}
	if len(parts) == 0 {
		parts = []taskplane.Part{taskplane.TextPart("(the message had no text to echo)")}
	}
	msg := &taskplane.Message{ID: uuid.NewString(), Role: taskplane.RoleAgent, Parts: parts}
	return []taskplane.Change{taskplane.SetStatus{State: taskplane.StateCompleted, Message: msg}}
}

// LatestUserMessage returns the last message of the task's history written by the user, or nil.
func LatestUserMessage(t *taskplane.Task) *taskplane.Message {
	for i := len(t.History) - 1; i >= 0; i-- {
		if t.History[i].Role == taskplane.RoleUser {
			return &t.History[i]
		}
	}
	return nil
}
