package taskplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/channels-dev/channels/taskplane/store"
)

// Sentinel errors of the task plane. Bindings map them to protocol errors with errors.Is.
var (
	// ErrTaskNotFound: the task does not exist for this principal (another principal's task looks
	// exactly the same).
	ErrTaskNotFound = errors.New("task not found")
	// ErrTaskTerminal: the task is in a terminal state and cannot change or take messages.
	ErrTaskTerminal = errors.New("task is in a terminal state")
	// ErrTaskNotCancelable: cancel of a task that is already terminal.
	ErrTaskNotCancelable = errors.New("task cannot be canceled")
	// ErrIllegalTransition: a state change the transition table refuses.
	ErrIllegalTransition = errors.New("illegal task state transition")
	// ErrConcurrentModification: the task changed since the version the caller read.
	ErrConcurrentModification = store.ErrConcurrentModification
	// ErrDuplicateConflict: an identity was reused with a different payload. The concrete error
	// is *ConflictError.
	ErrDuplicateConflict = errors.New("duplicate identity with a different payload")
	// ErrClaimPending: an earlier acceptance of the same identity has not finished.
	ErrClaimPending = errors.New("an acceptance of the same identity is still pending")
	// ErrContextMismatch: the explicit taskId and contextId name different contexts.
	ErrContextMismatch = errors.New("taskId and contextId do not match")
	// ErrInvalid: the event or change is malformed. Concrete errors wrap it with details.
	ErrInvalid = errors.New("invalid input")
	// ErrContinuationNotAllowed: a question was asked on a task whose source declares no
	// continuation method.
	ErrContinuationNotAllowed = errors.New("source declares no continuation method")
	// ErrStore: the store failed a turn's write or read (unreachable, a connection lost, a
	// commit that failed), not the turn's agent: the turn is offered again rather than its task
	// failed. Turn operations wrap such failures in it.
	ErrStore = errors.New("store failure")
	// ErrUnseenMessage: a turn's update would settle its task (complete, reject, or ask for
	// input) while a message accepted during the turn waits for it, one the turn has not read
	// (Turn.Refresh reads it). The update is refused; the task is offered again, uncounted, and
	// the next turn sees every message. A Dispatcher ends a turn that returns it so.
	ErrUnseenMessage = errors.New("a message arrived during the turn that the turn has not read")
)

// StoreUnavailable reports whether err is the store's failure to do the work rather than an
// answer of the task plane's: a failure a turn operation wrapped in ErrStore, or a store error
// store.Unavailable recognises (the database unreachable, restarting, read-only, its disk
// full). It passes, so the bindings answer 503 with Retry-After, and do not quote it.
func StoreUnavailable(err error) bool { return errors.Is(err, ErrStore) || store.Unavailable(err) }

// storeFault wraps err in ErrStore unless it is one of the task plane's own answers (or the
// caller's context ending): what is left came from the store.
func storeFault(err error) error {
	for _, known := range []error{ErrNoTurn, ErrTaskNotFound, ErrTaskTerminal, ErrTaskNotCancelable, ErrIllegalTransition,
		ErrConcurrentModification, ErrInvalid, ErrContinuationNotAllowed, ErrDuplicateConflict, ErrClaimPending,
		ErrContextMismatch, ErrPushConfigLimit, store.ErrPushConfigLimit, ErrStore, ErrUnseenMessage, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, known) {
			return err
		}
	}
	return fmt.Errorf("%w: %w", ErrStore, err)
}

// ConflictError is returned by Accept when an identity was already claimed with a different
// payload digest. Nothing was changed except the duplicate-conflict evidence.
type ConflictError struct {
	Source   string
	Identity string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s: source %s identity %q", ErrDuplicateConflict, e.Source, e.Identity)
}

// Unwrap makes errors.Is(err, ErrDuplicateConflict) true.
func (e *ConflictError) Unwrap() error { return ErrDuplicateConflict }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
