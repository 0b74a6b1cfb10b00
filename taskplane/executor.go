package taskplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// Executor is the agent side of a task: it is woken for one turn of a task and records what it
// produces through the Turn. Channels does no inference itself.
type Executor interface {
	// Execute runs one turn. It should move the task to a terminal or interrupted state through
	// turn.Update; returning an error fails the task with the error's text.
	Execute(ctx context.Context, turn *Turn) error
}

// Canceler is implemented by executors that must hear about a cancel (a remote agent).
type Canceler interface {
	Cancel(ctx context.Context, task *Task) error
}

// DirectResponder is implemented by executors that may answer a new message with a direct Message
// and no Task. The A2A bindings ask before accepting; ok=false means "make a Task".
type DirectResponder interface {
	RespondDirectly(ctx context.Context, principal string, msg Message) (reply *Message, ok bool)
}

// Turn is one executor turn of one task: it holds the authority to change that task.
type Turn struct {
	plane *Plane
	// Task is the task as it was when the turn began; Update refreshes it.
	Task *Task
}

// Principal returns the owner of the turn's task.
func (t *Turn) Principal() string { return t.Task.Origin.Principal }

// Update applies changes to the turn's task and refreshes t.Task.
func (t *Turn) Update(ctx context.Context, changes ...Change) error {
	nt, err := t.plane.Apply(ctx, t.Principal(), t.Task.ID, AnyVersion, changes...)
	if err != nil {
		return err
	}
	t.Task = nt
	return nil
}

// Dispatcher takes pending wakes from the store and runs the executor for each, at most
// Concurrency at a time, oldest first.
type Dispatcher struct {
	Plane       *Plane
	Executor    Executor
	Concurrency int
	// Poll is how often the store is re-read when nothing pokes the dispatcher (wakes left by a
	// previous run, or accepted by another process). Default 1s.
	Poll time.Duration

	mu      sync.Mutex
	running map[string]context.CancelFunc // task id → cancel of its turn
}

// Run dispatches until ctx ends, then waits for running turns to return.
func (d *Dispatcher) Run(ctx context.Context) error {
	conc := d.Concurrency
	if conc <= 0 {
		conc = 8
	}
	poll := d.Poll
	if poll <= 0 {
		poll = time.Second
	}
	d.mu.Lock()
	d.running = map[string]context.CancelFunc{}
	d.mu.Unlock()
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		wakes, err := d.Plane.store.ListWakes(ctx, store.WakePending, conc*2)
		if err != nil && ctx.Err() == nil {
			d.Plane.log.Error("list wakes", "err", err)
		}
		for _, w := range wakes {
			d.mu.Lock()
			_, busy := d.running[w.TaskID]
			d.mu.Unlock()
			if busy {
				continue // one turn per task at a time; the wake stays pending
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			turnCtx, cancel := context.WithCancel(ctx)
			d.mu.Lock()
			d.running[w.TaskID] = cancel
			d.mu.Unlock()
			if err := d.markWake(ctx, w, store.WakeActive, ""); err != nil {
				d.finish(w.TaskID)
				<-sem
				continue
			}
			wg.Add(1)
			go func(w store.Wake) {
				defer wg.Done()
				defer func() { <-sem }()
				defer d.finish(w.TaskID)
				d.runTurn(ctx, turnCtx, w)
			}(w)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-d.Plane.wakeSignal:
		case <-tick.C:
		}
	}
}

func (d *Dispatcher) finish(taskID string) {
	d.mu.Lock()
	if c := d.running[taskID]; c != nil {
		c()
	}
	delete(d.running, taskID)
	d.mu.Unlock()
}

// CancelTurn stops the running turn of a task, if any.
func (d *Dispatcher) CancelTurn(taskID string) {
	d.mu.Lock()
	if c := d.running[taskID]; c != nil {
		c()
	}
	d.mu.Unlock()
}

func (d *Dispatcher) markWake(ctx context.Context, w store.Wake, st store.WakeState, detail string) error {
	w.State, w.Detail, w.UpdatedAt = st, detail, d.Plane.clock()
	if st == store.WakeActive {
		w.Attempts++
	}
	return d.Plane.store.Update(ctx, func(ctx context.Context, tx store.Tx) error { return tx.UpdateWake(ctx, w) })
}

// runTurn runs one turn on ctx (a child of the dispatcher's run context).
func (d *Dispatcher) runTurn(run, ctx context.Context, w store.Wake) {
	t, err := d.Plane.GetTask(ctx, w.Principal, w.TaskID)
	if err != nil || t.Status.State.Terminal() {
		_ = d.markWake(context.WithoutCancel(ctx), w, store.WakeDone, "task gone or terminal")
		return
	}
	turn := &Turn{plane: d.Plane, Task: t}
	err = d.Executor.Execute(ctx, turn)
	bg := context.WithoutCancel(ctx)
	if err != nil && !errors.Is(err, ErrTaskTerminal) && run.Err() != nil {
		// The dispatcher is stopping (shutdown): the turn was interrupted, not failed. Its wake
		// goes back to pending, so the next start runs the turn again from durable state.
		_ = d.markWake(bg, w, store.WakePending, "turn interrupted by shutdown")
		return
	}
	if err != nil && !errors.Is(err, ErrTaskTerminal) {
		cur, gerr := d.Plane.GetTask(bg, w.Principal, w.TaskID)
		if gerr == nil && !cur.Status.State.Terminal() {
			msg := &Message{ID: d.Plane.newID(), Role: RoleAgent, Parts: []Part{TextPart(err.Error())}}
			if _, aerr := d.Plane.Apply(bg, w.Principal, w.TaskID, AnyVersion, SetStatus{State: StateFailed, Message: msg}); aerr != nil {
				d.Plane.log.Error("fail task after executor error", "task", w.TaskID, "err", aerr)
			}
		}
		_ = d.markWake(bg, w, store.WakeDone, fmt.Sprintf("executor error: %v", err))
		return
	}
	_ = d.markWake(bg, w, store.WakeDone, "")
}
