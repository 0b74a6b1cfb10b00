package taskplane

import (
	"context"
	"fmt"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// DefaultTaskTimeout is how long a task may stay WORKING, or wait for an answer, before it fails.
const DefaultTaskTimeout = 2 * time.Hour

// timeoutBatch bounds the tasks one sweep transaction list reads.
const timeoutBatch = 100

// SweepTimeouts fails the tasks that stayed too long in one state: WORKING past timeout fails with
// reason timeout, INPUT_REQUIRED or AUTH_REQUIRED past it with reason no-response. The time is
// measured from the status timestamp. Each failure writes timeout evidence and is never retried
// (the task is terminal; its wakes are retired). It returns how many tasks it failed.
func (p *Plane) SweepTimeouts(ctx context.Context, timeout time.Duration) (int, error) {
	if timeout <= 0 {
		return 0, nil
	}
	states := []string{string(StateWorking), string(StateInputRequired), string(StateAuthRequired)}
	failed := 0
	for {
		cutoff := p.clock().Add(-timeout)
		rows, err := p.store.ListStaleTasks(ctx, states, cutoff, timeoutBatch)
		if err != nil {
			return failed, fmt.Errorf("timeout sweep: %w", err)
		}
		for _, r := range rows {
			t, held, err := p.timeOut(ctx, r.Principal, r.ID, cutoff)
			if err != nil {
				return failed, fmt.Errorf("timeout sweep: %w", err)
			}
			if t != nil {
				failed++
				p.broker.publish(t.Origin.Principal, t.ID)
				p.sendHomeHeld(ctx, t, held)
			}
		}
		if len(rows) < timeoutBatch {
			return failed, nil
		}
	}
}

// timeOut fails one task if it is still overdue, and returns it (nil if it moved on meanwhile)
// with the wake held for its result (see holdResultTx).
func (p *Plane) timeOut(ctx context.Context, principal, id string, cutoff time.Time) (*Task, store.Wake, error) {
	var (
		out  *Task
		held store.Wake
	)
	err := p.retryConcurrent(ctx, true, func() error {
		return p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			out, held = nil, store.Wake{}
			t, err := getTask(ctx, tx, principal, id)
			if err != nil {
				return err
			}
			if !t.Status.Timestamp.Before(cutoff) {
				return nil
			}
			var reason, text string
			switch t.Status.State {
			case StateWorking:
				reason, text = ReasonTimeout, "the agent did not finish in time"
			case StateInputRequired, StateAuthRequired:
				reason, text = ReasonNoResponse, "no answer arrived in time"
			default:
				return nil
			}
			now := p.clock()
			since := t.Status.Timestamp
			nt, err := applyTx(ctx, tx, principal, id, t.Version, now, failStatus(reason, text, p.newID()))
			if err != nil {
				return err
			}
			out = nt
			if held, err = p.holdResultTx(ctx, tx, nt, now); err != nil {
				return err
			}
			return evidence(ctx, tx, principal, t.Origin.Source, EvidenceTimeout, id, map[string]any{
				"reason": reason, "state": t.Status.State, "since": since}, now)
		})
	})
	if err != nil {
		return nil, store.Wake{}, fmt.Errorf("time out task %s: %w", id, err)
	}
	return out, held, nil
}

// RunTimeouts runs SweepTimeouts every interval (zero or less: a quarter of timeout, at most a
// minute) until ctx ends; errors are logged. A timeout of zero or less times nothing out: it
// returns at once.
func (p *Plane) RunTimeouts(ctx context.Context, timeout, interval time.Duration) {
	if timeout <= 0 {
		return
	}
	if interval <= 0 {
		interval = max(min(time.Minute, timeout/4), time.Millisecond)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := p.SweepTimeouts(ctx, timeout); err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.Error("timeout sweep failed", "err", err)
		} else if n > 0 {
			p.log.Info("timed out tasks", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
