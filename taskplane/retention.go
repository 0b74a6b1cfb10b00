package taskplane

import (
	"context"
	"fmt"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// pruneBatch bounds one retention transaction, so retention never holds the writer for long.
const pruneBatch = 500

// Prune runs one retention pass: it deletes, in batches, the terminal tasks (with their events,
// anchors, wakes and claims) of conversations whose last event is older than the retention
// window, and the contexts and claims left behind. It never drops a non-terminal task, a context
// one references, or a pending claim. Once a task and its claim are gone, the same identity is
// accepted as new work.
func (p *Plane) Prune(ctx context.Context) (store.PruneResult, error) {
	var total store.PruneResult
	cutoff := p.clock().Add(-p.retention)
	for {
		var r store.PruneResult
		err := p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			r, err = tx.Prune(ctx, cutoff, terminalStates(), pruneBatch)
			if err != nil {
				return err
			}
			if r == (store.PruneResult{}) {
				return nil
			}
			return evidence(ctx, tx, "", "", EvidenceRetention, "", map[string]any{
				"tasks": r.Tasks, "events": r.Events, "claims": r.Claims, "contexts": r.Contexts,
				"anchors": r.Anchors, "wakes": r.Wakes, "cutoff": cutoff,
			}, p.clock())
		})
		if err != nil {
			return total, fmt.Errorf("retention: %w", err)
		}
		total.Tasks += r.Tasks
		total.Events += r.Events
		total.Claims += r.Claims
		total.Contexts += r.Contexts
		total.Anchors += r.Anchors
		total.Wakes += r.Wakes
		if r.Tasks < pruneBatch {
			return total, nil
		}
	}
}

// RunRetention runs Prune every interval until ctx ends. Errors are logged, not fatal: the next
// pass tries again.
func (p *Plane) RunRetention(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if r, err := p.Prune(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.Error("retention pass failed", "err", err)
		} else if r.Tasks+r.Claims+r.Contexts > 0 {
			p.log.Info("retention pass", "tasks", r.Tasks, "claims", r.Claims, "contexts", r.Contexts, "events", r.Events)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
