package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// Filter selects deliveries for List. Zero fields match anything.
type Filter struct {
	Principal string
	State     State
	Source    string
	TaskID    string
	Limit     int // 0 = no limit
}

// List returns deliveries matching f, newest first.
func (e *Engine) List(ctx context.Context, f Filter) ([]Record, error) {
	if f.State != "" && !f.State.Valid() {
		return nil, fmt.Errorf("%w: unknown state %q", ErrInvalid, f.State)
	}
	rows, err := e.store.ListDeliveries(ctx, store.DeliveryFilter{Principal: f.Principal, State: store.DeliveryState(f.State),
		Source: f.Source, TaskID: f.TaskID, Limit: f.Limit})
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	out := make([]Record, len(rows))
	for i, r := range rows {
		out[i] = toRecord(r)
	}
	return out, nil
}

// Find returns the delivery with this ID under any principal (operators name deliveries by ID
// alone). Two principals holding the same ID is ErrInvalid: name the principal.
func (e *Engine) Find(ctx context.Context, id string) (Record, error) {
	rows, err := e.store.ListDeliveries(ctx, store.DeliveryFilter{ID: id, Limit: 2})
	if err != nil {
		return Record{}, fmt.Errorf("find delivery %s: %w", id, err)
	}
	switch len(rows) {
	case 0:
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	case 1:
		return toRecord(rows[0]), nil
	default:
		return Record{}, fmt.Errorf("%w: delivery %s exists for several principals; name one", ErrInvalid, id)
	}
}

// Resolution is an operator's decision about an ambiguous or failed delivery, or one stuck in
// sending (see Resolve). Exactly one of Delivered, Retry and Abandon is set.
type Resolution struct {
	// Delivered is the provider ID the operator found at the provider: the delivery happened.
	// A question's reply anchor is recorded with it.
	Delivered string
	// Retry: the operator checked that the provider does not have it; send it again, with a
	// fresh attempt budget. For an ambiguous delivery, and one stuck in sending, an earlier call
	// may have landed: retrying one the provider has sends it twice.
	Retry bool
	// Abandon: do not deliver it; it becomes failed.
	Abandon bool
	// By names the operator (default "operator"); Note says why. Both go into the evidence.
	By   string
	Note string
}

func (r Resolution) validate() error {
	n := 0
	if r.Delivered != "" {
		n++
	}
	if r.Retry {
		n++
	}
	if r.Abandon {
		n++
	}
	if n != 1 {
		return fmt.Errorf("%w: a resolution is exactly one of delivered, retry or abandon", ErrInvalid)
	}
	return nil
}

// Resolve applies an operator's resolution to an ambiguous or failed delivery, or to one stuck in
// sending (no engine holds a lease on it: the process that sent it died mid-send, and no engine
// routing its source recovered it), in one transaction, with per-attempt and source evidence
// naming the operator. The lease is checked inside the transaction, on the store's clock, so a
// resolution cannot race an engine: a delivery in sending under a lease that has not run out is
// being sent, and belongs to that engine. It, and any other state, is ErrNotResolvable.
//
// A resolution the delivery already carries (an operator's command run twice) changes nothing
// and records no second decision: Resolve returns the delivery as it is together with an error
// wrapping ErrAlreadyResolved.
func (e *Engine) Resolve(ctx context.Context, principal, id string, r Resolution) (Record, error) {
	if err := r.validate(); err != nil {
		return Record{}, err
	}
	if r.By == "" {
		r.By = "operator"
	}
	var out store.Delivery
	var already bool
	err := e.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		cur, err := tx.GetDelivery(ctx, principal, id)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		if already, err = carries(ctx, tx, cur, r); err != nil || already {
			out = cur
			return err
		}
		now := e.clock()
		switch {
		case cur.State == store.DeliveryAmbiguous || cur.State == store.DeliveryFailed:
		case cur.State == store.DeliverySending && cur.LeaseUntil.After(now):
			return fmt.Errorf("%w: %s: engine %s is sending it (its lease runs until %s); "+
				"if that engine died, resolve it once the lease has run out", ErrNotResolvable, id,
				cur.LeaseOwner, cur.LeaseUntil.UTC().Format(time.RFC3339))
		case cur.State == store.DeliverySending && cur.LeaseUntil.IsZero():
			// Released after an unknown outcome: an engine routing its source repeats or looks it
			// up at its next attempt, and taking it now could send it twice. Only when no engine
			// has worked it for longer than any repeat or lookup waits (none routes its source any
			// more) is it stuck.
			idle, err := e.idleFor(ctx, tx, cur, now)
			if err != nil {
				return err
			}
			if wait := e.policy.unleasedStuckAfter(); idle < wait {
				return fmt.Errorf("%w: %s: its last outcome is unknown and an engine routing its source repeats or looks it up at %s; "+
					"if no engine has worked it for %s (none routes its source), it can be resolved then", ErrNotResolvable, id,
					cur.NextAttemptAt.UTC().Format(time.RFC3339), wait)
			}
		case cur.State == store.DeliverySending:
			// Stuck: its lease ran out and no engine took it again. Taking the row here, under its
			// lock, keeps any engine from claiming it meanwhile.
		default:
			return fmt.Errorf("%w: %s is %s", ErrNotResolvable, id, cur.State)
		}
		from := cur.State
		if r.Delivered != "" {
			if err := e.markDelivered(ctx, tx, cur, r.Delivered, kindResolve, r.By, r.Note, now); err != nil {
				return err
			}
			out, err = tx.GetDelivery(ctx, principal, id)
			return err
		}
		outcome := store.OutcomeAbandoned
		if r.Retry {
			outcome = outcomeRetry
			cur.State, cur.Attempts, cur.Reconciles, cur.LastError = store.DeliveryPrepared, 0, 0, ""
			release(&cur, now, now)
		} else {
			cur.State, cur.LastError = store.DeliveryFailed, "abandoned by "+r.By
			release(&cur, cur.NextAttemptAt, now)
		}
		if err := tx.UpdateDelivery(ctx, cur); err != nil {
			return err
		}
		if err := tx.InsertDeliveryAttempt(ctx, store.DeliveryAttempt{Principal: cur.Principal, DeliveryID: cur.ID,
			Attempt: cur.Attempts, Kind: kindResolve, Outcome: outcome, Error: r.Note, Owner: r.By, CreatedAt: now}); err != nil {
			return err
		}
		out = cur
		return e.evidence(ctx, tx, cur, EvidenceResolved, map[string]any{
			"from": string(from), "to": string(cur.State), "resolution": outcome, "by": r.By, "note": r.Note,
		}, now)
	})
	if err != nil {
		return Record{}, fmt.Errorf("resolve delivery %s: %w", id, err)
	}
	if already {
		return toRecord(out), fmt.Errorf("resolve delivery %s: %w: it is %s", id, ErrAlreadyResolved, out.State)
	}
	e.changed.notify()
	e.wake()
	return toRecord(out), nil
}

// outcomeRetry is the outcome of an operator's retry on the delivery's attempts.
const outcomeRetry = "retry"

// carries reports whether d already carries the resolution r: delivered under the same provider
// ID, or abandoned or retried by an operator with no step since (its latest attempt is that
// resolution).
func carries(ctx context.Context, tx store.Tx, d store.Delivery, r Resolution) (bool, error) {
	switch {
	case r.Delivered != "":
		return d.State == store.DeliveryDelivered && d.ProviderID == storableText(r.Delivered), nil // as markDelivered keeps it
	case r.Abandon && d.State != store.DeliveryFailed, r.Retry && d.State != store.DeliveryPrepared:
		return false, nil
	}
	attempts, err := tx.ListDeliveryAttempts(ctx, d.Principal, d.ID)
	if err != nil || len(attempts) == 0 {
		return false, err
	}
	last := attempts[len(attempts)-1]
	want := store.OutcomeAbandoned
	if r.Retry {
		want = outcomeRetry
	}
	return last.Kind == kindResolve && last.Outcome == want, nil
}

// idleFor is how long no step has been recorded for d: since its last attempt (or its creation).
func (e *Engine) idleFor(ctx context.Context, tx store.Tx, d store.Delivery, now time.Time) (time.Duration, error) {
	attempts, err := tx.ListDeliveryAttempts(ctx, d.Principal, d.ID)
	if err != nil {
		return 0, err
	}
	return now.Sub(lastStep(d, attempts)), nil
}
