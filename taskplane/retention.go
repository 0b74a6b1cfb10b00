package taskplane

import (
	"context"
	"fmt"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// PruneResult counts what one retention pass deleted.
type PruneResult struct {
	store.PruneResult
	Deliveries int
	Evidence   int
}

// pruneBatch bounds one retention transaction, so retention never holds the writer for long: on a
// large SQLite store on a slow disk a task costs its transaction 2–8 ms (its events, claims,
// wakes and index entries), so a batch holds the writer 0.2–0.8 s. After each batch the pass
// rests as long as the batch took (see rest), so acceptances meet a batch at most half the time.
const pruneBatch = 100

// maxPruneRest bounds the rest between two retention batches.
const maxPruneRest = time.Second

// rest waits as long as a batch that began at start took (at most maxPruneRest), or until ctx
// ends: retention is in no hurry, and takes at most about half of a single writer's time.
func rest(ctx context.Context, start time.Time) error {
	t := time.NewTimer(min(time.Since(start), maxPruneRest))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Prune runs one retention pass: it deletes, in batches, the terminal tasks (with their events,
// anchors, wakes, push configs and claims) of conversations whose last event is older than the
// retention window, and the contexts and claims left behind. It never drops a non-terminal task,
// a context one references, or a pending claim. Once a task and its claim are gone, the same
// identity is accepted as new work. Settled deliveries older than the window whose task is gone or
// finished, and evidence older than the window, go too.
// Every transaction that deletes anything writes a retention evidence record counting what it
// deleted.
func (p *Plane) Prune(ctx context.Context) (PruneResult, error) {
	var total PruneResult
	cutoff := p.clock().Add(-p.retention)
	for {
		var r store.PruneResult
		start := time.Now()
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
				"anchors": r.Anchors, "wakes": r.Wakes, "push_configs": r.PushConfigs, "cutoff": cutoff,
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
		total.PushConfigs += r.PushConfigs
		if r.Tasks < pruneBatch && r.Claims < pruneBatch && r.Contexts < pruneBatch {
			break // nothing of any kind was left behind by the bound
		}
		if err := rest(ctx, start); err != nil {
			return total, fmt.Errorf("retention: %w", err)
		}
	}
	// Settled deliveries and evidence age out on the same window; deliveries still prepared,
	// sending or ambiguous never do (the store refuses to prune them).
	for {
		var d, e int
		start := time.Now()
		err := p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			if d, err = tx.PruneDeliveries(ctx, cutoff, terminalStates(), pruneBatch); err != nil {
				return err
			}
			if e, err = tx.PruneEvidence(ctx, cutoff, pruneBatch); err != nil || d+e == 0 {
				return err
			}
			return evidence(ctx, tx, "", "", EvidenceRetention, "", map[string]any{
				"deliveries": d, "evidence": e, "cutoff": cutoff,
			}, p.clock())
		})
		if err != nil {
			return total, fmt.Errorf("retention: %w", err)
		}
		total.Deliveries += d
		total.Evidence += e
		if d < pruneBatch && e < pruneBatch {
			return total, nil
		}
		if err := rest(ctx, start); err != nil {
			return total, fmt.Errorf("retention: %w", err)
		}
	}
}

// DefaultRetentionInterval is how often RunRetention prunes when given no interval.
const DefaultRetentionInterval = time.Hour

// RunRetention runs Prune every interval (zero or less: DefaultRetentionInterval) until ctx
// ends. Errors are logged, not fatal: the next pass tries again.
func (p *Plane) RunRetention(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultRetentionInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if r, err := p.Prune(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.Error("retention pass failed", "err", err)
		} else if r.Tasks+r.Claims+r.Contexts+r.Deliveries+r.Evidence > 0 {
			p.log.Info("retention pass", "tasks", r.Tasks, "claims", r.Claims, "contexts", r.Contexts, "events", r.Events,
				"deliveries", r.Deliveries, "evidence", r.Evidence)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
