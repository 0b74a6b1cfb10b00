package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// Evidence kinds the engine writes (store.Evidence, per source and task, for `channels
// evidence`). Details carry the delivery ID and never the message.
const (
	EvidenceDelivered  = "delivery-delivered"  // the provider took it (detail: provider_id, attempts)
	EvidenceReconciled = "delivery-reconciled" // a lookup found an earlier call took it
	EvidenceFailed     = "delivery-failed"     // refused for good, or attempts ran out
	EvidenceAmbiguous  = "delivery-ambiguous"  // outcome unknown, no safe repeat: an operator resolves
	EvidenceResolved   = "delivery-resolved"   // an operator resolved it
	EvidenceConflict   = "delivery-conflict"   // a fixed operation was requested with another payload
	// EvidenceAnchorRefused: a question was delivered but its reply anchor could not be recorded
	// (the task is gone, or the source continues by no anchor); replies will start new tasks.
	EvidenceAnchorRefused = "delivery-anchor-refused"
)

// Attempt kinds and outcomes written to the per-attempt evidence.
const (
	kindSend    = "send"
	kindLookup  = "lookup"
	kindRecover = "recover"
	kindResolve = store.AttemptResolve
)

// action is what a claim decided to do outside the transaction.
type action int

const (
	actNone action = iota
	actSend
	actLookup
)

// step is a claimed delivery and what to do with it.
type step struct {
	row   store.Delivery
	route Route
	do    action
}

func (e *Engine) claimOne(ctx context.Context, principal, id string) (step, bool, error) {
	var (
		st step
		ok bool
	)
	err := e.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		st, ok = step{}, false
		now := e.clock()
		rows, err := tx.ClaimDeliveries(ctx, store.DeliveryClaim{Owner: e.owner, Now: now,
			LeaseUntil: now.Add(e.lease), Principal: principal, ID: id})
		if err != nil || len(rows) == 0 {
			return err
		}
		ok = true
		st, err = e.begin(ctx, tx, rows[0], now)
		return err
	})
	if err != nil {
		return step{}, false, fmt.Errorf("claim delivery %s: %w", id, err)
	}
	e.changed.notify()
	return st, ok, nil
}

func (e *Engine) claimBatch(ctx context.Context, limit int) ([]step, error) {
	if e.noClaim {
		return nil, nil
	}
	var steps []step
	err := e.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		steps = steps[:0]
		now := e.clock()
		rows, err := tx.ClaimDeliveries(ctx, store.DeliveryClaim{Owner: e.owner, Now: now,
			LeaseUntil: now.Add(e.lease), Sources: e.sources, Limit: limit})
		if err != nil {
			return err
		}
		// Lane rows are locked in key order, so two claimers never wait on each other's lanes.
		slices.SortStableFunc(rows, func(a, b store.Delivery) int { return strings.Compare(a.Lane, b.Lane) })
		for _, row := range rows {
			st, err := e.begin(ctx, tx, row, now)
			if err != nil {
				return err
			}
			if st.do != actNone {
				steps = append(steps, st)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	if len(steps) > 0 {
		e.changed.notify()
	}
	return steps, nil
}

// begin decides, inside the claim transaction, what to do with a claimed row, and writes the
// transition that must precede it: prepared → sending (an attempt spent) before a provider call;
// sending → ambiguous where nothing may be repeated.
func (e *Engine) begin(ctx context.Context, tx store.Tx, row store.Delivery, now time.Time) (step, error) {
	route, err := e.router.Route(row.Principal, row.Source)
	if err != nil {
		// Another process may route it; come back later without spending anything. The row is
		// left as it was otherwise: its update time is when its call began, if it is in sending
		// (diedInCall).
		e.log.Warn("delivery: no route; released", "delivery", row.ID, "source", row.Source, "err", err)
		row.LeaseOwner, row.LeaseUntil, row.NextAttemptAt = "", time.Time{}, now.Add(e.poll)
		return step{}, tx.UpdateDelivery(ctx, row)
	}
	route = route.resolved(row.Source)
	switch store.DeliveryState(row.State) {
	case store.DeliveryPrepared:
		return e.beginSend(ctx, tx, row, route, now)
	case store.DeliverySending:
		// Its last worker died, or left it after an unknown outcome.
		switch Recovery(row.Recovery) {
		case Idempotent:
			if row.Attempts >= e.policy.MaxAttempts {
				return step{}, e.settleAmbiguous(ctx, tx, row, kindRecover,
					fmt.Sprintf("outcome unknown after %d attempts", row.Attempts), now)
			}
			if err := e.attempt(ctx, tx, row, kindRecover, "repeat", nil, now); err != nil {
				return step{}, err
			}
			return e.beginSend(ctx, tx, row, route, now)
		case Lookup:
			if route.Reconciler == nil {
				return step{}, e.settleAmbiguous(ctx, tx, row, kindRecover,
					"recovery class lookup, but the source has no reconciler", now)
			}
			// A row whose worker died in its call is looked up only once that call could no
			// longer land, as after a call that timed out.
			began, died, err := e.diedInCall(ctx, tx, row)
			if err != nil {
				return step{}, err
			}
			if due := began.Add(e.sendTimeout + e.policy.LookupGrace); died && due.After(now) {
				release(&row, due, now)
				if err := tx.UpdateDelivery(ctx, row); err != nil {
					return step{}, err
				}
				return step{}, e.attempt(ctx, tx, row, kindRecover, "wait", nil, now)
			}
			return step{row: row, route: route, do: actLookup}, nil
		default:
			return step{}, e.settleAmbiguous(ctx, tx, row, kindRecover,
				"interrupted while sending; the source has no safe repeat", now)
		}
	}
	return step{}, nil
}

// beginSend takes a lane slot and marks the row sending with one more attempt; without a slot it
// releases the row until the lane opens, spending nothing.
func (e *Engine) beginSend(ctx context.Context, tx store.Tx, row store.Delivery, route Route, now time.Time) (step, error) {
	if row.Lane != "" {
		granted, next, err := tx.ReserveLane(ctx, row.Principal, row.Lane, now, now.Add(route.LaneInterval))
		if err != nil {
			return step{}, err
		}
		if !granted {
			release(&row, maxTime(row.NextAttemptAt, next), now)
			return step{}, tx.UpdateDelivery(ctx, row)
		}
	}
	row.State = store.DeliverySending
	row.Attempts++
	row.UpdatedAt = now
	if err := tx.UpdateDelivery(ctx, row); err != nil {
		return step{}, err
	}
	return step{row: row, route: route, do: actSend}, nil
}

func (e *Engine) actLocked(ctx context.Context, st step) {
	unlock := e.locks.lock(st.row.Principal + "\x00" + st.row.ID)
	defer unlock()
	// A step of this engine that waited here behind an earlier one of the same delivery (whose
	// call outlived its lease, so this engine claimed the row again) acts only if the row is
	// still under the lease its own claim took: the earlier call may have delivered it, or its
	// outcome moved it on.
	// A failed read proves nothing: the step acts, and finish checks the lease in its transaction.
	if cur, err := e.store.GetDelivery(ctx, st.row.Principal, st.row.ID); err == nil && !e.owns(cur, st.row.LeaseUntil) {
		return
	} else if err != nil {
		e.log.Warn("delivery: re-read before acting failed; acting on the claim", "delivery", st.row.ID, "err", err)
	}
	e.act(ctx, st)
}

// act makes the provider call or lookup decided by begin and records its outcome. It reports
// whether the delivery is due again at once (a lookup found nothing).
func (e *Engine) act(ctx context.Context, st step) (again bool) {
	switch st.do {
	case actSend:
		e.send(ctx, st)
		return false
	case actLookup:
		return e.lookup(ctx, st)
	}
	return false
}

func (e *Engine) send(ctx context.Context, st step) {
	d, err := decode(st.row)
	if err != nil {
		// Nothing was sent and nothing ever can be.
		e.finish(ctx, st, func(ctx context.Context, tx store.Tx, cur store.Delivery, now time.Time) error {
			return e.settleFailed(ctx, tx, cur, kindSend, Permanent(err), now)
		})
		return
	}
	sctx, cancel := context.WithTimeout(ctx, e.sendTimeout)
	started := e.clock()
	rc, serr := callSender(sctx, st.route.Sender, d)
	cancel()
	e.finish(ctx, st, func(ctx context.Context, tx store.Tx, cur store.Delivery, now time.Time) error {
		if err := e.sent(ctx, tx, cur, st, rc, serr, now); err != nil {
			return err
		}
		if cur.Lane == "" {
			return nil
		}
		// The slot was measured from the claim; the provider sees the call's start, which the
		// claim's commit delayed by a little. Measuring the next slot from the start as well
		// keeps the calls the provider sees an interval apart. (Lane rows are locked after
		// delivery rows, in every transaction, so no two transactions wait on each other.)
		return tx.DelayLane(ctx, cur.Principal, cur.Lane, started.Add(st.route.LaneInterval))
	})
}

// sent records the outcome of a provider call on cur.
func (e *Engine) sent(ctx context.Context, tx store.Tx, cur store.Delivery, st step, rc Receipt, serr error, now time.Time) error {
	route := st.route
	if serr == nil {
		return e.markDelivered(ctx, tx, cur, rc.ProviderID, kindSend, "", "", now)
	}
	if !e.owns(cur, st.row.LeaseUntil) {
		// Someone else took over (our lease ran out); leave the row to them, keep the evidence.
		return e.attempt(ctx, tx, cur, kindSend, "superseded", serr, now)
	}
	kind, wait, _ := Classify(serr)
	cur.LastError = serr.Error()
	switch kind {
	case KindPermanent:
		return e.refused(ctx, tx, cur, serr, now)
	case KindRetryAfter:
		wait = e.policy.retryAfter(wait)
		n, waited, err := e.snoozed(ctx, tx, cur)
		if err != nil {
			return err
		}
		if !e.policy.snoozesLeft(n, waited) {
			// A provider that always asks to wait would hold the delivery (and whatever waits
			// behind it) forever: past the bound it settles as if its attempts ran out. Its
			// lane still waits as asked.
			if cur.Lane != "" {
				if err := tx.DelayLane(ctx, cur.Principal, cur.Lane, now.Add(wait)); err != nil {
					return err
				}
			}
			return e.exhausted(ctx, tx, cur, fmt.Errorf("asked to wait %d times (%s in all): %w", n+1, waited, serr), now)
		}
		cur.Attempts-- // a snooze spends nothing
		cur.State = store.DeliveryPrepared
		release(&cur, now.Add(wait), now)
		if err := tx.UpdateDelivery(ctx, cur); err != nil {
			return err
		}
		if cur.Lane != "" {
			if err := tx.DelayLane(ctx, cur.Principal, cur.Lane, now.Add(wait)); err != nil {
				return err
			}
		}
		return e.attemptWait(ctx, tx, cur, kindSend, "retry-after", serr, wait, now)
	case KindRetryable:
		delay, ok := e.policy.next(cur.Attempts)
		if !ok {
			return e.exhausted(ctx, tx, cur, fmt.Errorf("attempts exhausted (%d): %w", cur.Attempts, serr), now)
		}
		cur.State = store.DeliveryPrepared
		release(&cur, now.Add(delay), now)
		if err := tx.UpdateDelivery(ctx, cur); err != nil {
			return err
		}
		return e.attempt(ctx, tx, cur, kindSend, "retry", serr, now)
	default:
		return e.unknownOutcome(ctx, tx, cur, route, serr, now)
	}
}

// exhausted settles a delivery whose send certainly did not get through and that may not be
// tried again: failed, or ambiguous when an earlier call of an idempotent delivery may have
// landed (the repeats only failed to get through: "failed" would say it was not delivered).
func (e *Engine) exhausted(ctx context.Context, tx store.Tx, cur store.Delivery, cause error, now time.Time) error {
	if unknown, err := e.hadUnknownOutcome(ctx, tx, cur); err != nil {
		return err
	} else if unknown {
		return e.settleAmbiguousErr(ctx, tx, cur, kindSend, "an earlier attempt's outcome is unknown and the repeats failed", cause, now)
	}
	return e.settleFailed(ctx, tx, cur, kindSend, cause, now)
}

// refused settles a delivery the provider refused for good: failed, or ambiguous when an earlier
// call of an idempotent delivery may have landed (a receiver may refuse a repeat of a delivery ID
// it already has, say 409): "failed" would say it was not delivered. A lookup delivery is failed:
// its resend followed a lookup that found the earlier call had not landed.
func (e *Engine) refused(ctx context.Context, tx store.Tx, cur store.Delivery, cause error, now time.Time) error {
	if de := (*Error)(nil); errors.As(cause, &de) && de.Withdrawn {
		return e.settleFailed(ctx, tx, cur, kindSend, cause, now)
	}
	if unknown, err := e.hadUnknownOutcome(ctx, tx, cur); err != nil {
		return err
	} else if unknown {
		return e.settleAmbiguousErr(ctx, tx, cur, kindSend, "an earlier attempt's outcome is unknown and the repeat was refused", cause, now)
	}
	return e.settleFailed(ctx, tx, cur, kindSend, cause, now)
}

// unknownOutcome handles a send whose outcome is unknown, by recovery class: repeat later
// (idempotent), look up later (lookup), or fail closed (ambiguous, or lookup without reconciler).
func (e *Engine) unknownOutcome(ctx context.Context, tx store.Tx, cur store.Delivery, route Route, serr error, now time.Time) error {
	switch Recovery(cur.Recovery) {
	case Idempotent:
		delay, ok := e.policy.next(cur.Attempts)
		if !ok {
			return e.settleAmbiguousErr(ctx, tx, cur, kindSend,
				fmt.Sprintf("outcome unknown after %d attempts", cur.Attempts), serr, now)
		}
		release(&cur, now.Add(delay), now) // stays sending: the next step repeats it
	case Lookup:
		if route.Reconciler == nil {
			return e.settleAmbiguousErr(ctx, tx, cur, kindSend,
				"outcome unknown; recovery class lookup, but the source has no reconciler", serr, now)
		}
		// Give the provider a moment to show what it took, then look it up; when it never
		// answered, long enough to finish a request it may still be working on (LookupGrace).
		wait := e.policy.InitialInterval
		if _, _, status := Classify(serr); status == "" {
			wait = max(wait, e.policy.LookupGrace)
		}
		release(&cur, now.Add(wait), now)
	default:
		return e.settleAmbiguousErr(ctx, tx, cur, kindSend, "outcome unknown; the source has no safe repeat", serr, now)
	}
	if err := tx.UpdateDelivery(ctx, cur); err != nil {
		return err
	}
	return e.attempt(ctx, tx, cur, kindSend, "unknown", serr, now)
}

func (e *Engine) lookup(ctx context.Context, st step) (again bool) {
	d, err := decode(st.row)
	if err != nil {
		e.finish(ctx, st, func(ctx context.Context, tx store.Tx, cur store.Delivery, now time.Time) error {
			return e.settleAmbiguousErr(ctx, tx, cur, kindLookup, "payload unreadable; cannot look up", err, now)
		})
		return false
	}
	sctx, cancel := context.WithTimeout(ctx, e.sendTimeout)
	rc, found, lerr := callReconciler(sctx, st.route.Reconciler, d)
	cancel()
	e.finish(ctx, st, func(ctx context.Context, tx store.Tx, cur store.Delivery, now time.Time) error {
		again = false
		if lerr == nil && found {
			return e.markDelivered(ctx, tx, cur, rc.ProviderID, kindLookup, "", "", now)
		}
		if !e.owns(cur, st.row.LeaseUntil) {
			return e.attempt(ctx, tx, cur, kindLookup, "superseded", lerr, now)
		}
		if kind, wait, _ := Classify(lerr); lerr != nil && kind == KindRetryAfter {
			// The provider asks to wait (rate limited): the lookup is put off, not spent, as
			// long as the snoozes last; then nobody can tell whether the send landed.
			wait = e.policy.retryAfter(wait)
			n, waited, err := e.snoozed(ctx, tx, cur)
			if err != nil {
				return err
			}
			if !e.policy.snoozesLeft(n, waited) {
				return e.settleAmbiguousErr(ctx, tx, cur, kindLookup,
					fmt.Sprintf("lookup put off %d times (%s in all)", n+1, waited), lerr, now)
			}
			cur.LastError = lerr.Error()
			release(&cur, now.Add(wait), now)
			if err := tx.UpdateDelivery(ctx, cur); err != nil {
				return err
			}
			return e.attemptWait(ctx, tx, cur, kindLookup, "retry-after", lerr, wait, now)
		}
		if lerr != nil {
			cur.Reconciles++
			cur.LastError = lerr.Error()
			if cur.Reconciles >= e.policy.MaxAttempts {
				return e.settleAmbiguousErr(ctx, tx, cur, kindLookup,
					fmt.Sprintf("lookup failed %d times", cur.Reconciles), lerr, now)
			}
			delay, _ := e.policy.next(cur.Reconciles)
			release(&cur, now.Add(delay), now)
			if err := tx.UpdateDelivery(ctx, cur); err != nil {
				return err
			}
			return e.attempt(ctx, tx, cur, kindLookup, "error", lerr, now)
		}
		// The provider certainly does not have it: it is prepared again.
		cur.Reconciles = 0
		if cur.Attempts >= e.policy.MaxAttempts {
			return e.settleFailed(ctx, tx, cur, kindLookup,
				fmt.Errorf("not at the provider after %d attempts", cur.Attempts), now)
		}
		cur.State = store.DeliveryPrepared
		release(&cur, now, now)
		if err := tx.UpdateDelivery(ctx, cur); err != nil {
			return err
		}
		again = true
		return e.attempt(ctx, tx, cur, kindLookup, "not-found", nil, now)
	})
	return again
}

// finish records an outcome in its own transaction, on a context that outlives the caller's
// (bounded by finishTimeout): after a provider call the outcome is worth more than the caller's
// deadline, so a store that is away for a while (a failover) is tried again, with backoff, for
// all of finishTimeout. fn gets the row as stored now. If every try fails, the row stays in
// sending with our lease, and recovery reconciles it once the lease runs out.
func (e *Engine) finish(ctx context.Context, st step, fn func(ctx context.Context, tx store.Tx, cur store.Delivery, now time.Time) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.finishTimeout)
	defer cancel()
	var err error
	for try := 0; ; try++ {
		err = e.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			cur, err := tx.GetDelivery(ctx, st.row.Principal, st.row.ID)
			if err != nil {
				return err
			}
			return fn(ctx, tx, cur, e.clock())
		})
		if err == nil || ctx.Err() != nil {
			break
		}
		wait := time.NewTimer(min(time.Duration(50<<min(try, 6))*time.Millisecond, 2*time.Second))
		select {
		case <-ctx.Done():
			wait.Stop()
		case <-wait.C:
		}
	}
	if err != nil {
		e.log.Error("delivery: record outcome failed; recovery will reconcile it", "delivery", st.row.ID,
			"source", st.row.Source, "err", err)
	}
	e.changed.notify()
}

// owns reports whether cur is still ours to move: in sending under the lease our claim took
// (lease, to the microsecond the stores keep). The owner alone cannot tell: this engine may have
// claimed the row again after that lease ran out.
func (e *Engine) owns(cur store.Delivery, lease time.Time) bool {
	return cur.State == store.DeliverySending && cur.LeaseOwner == e.owner && cur.LeaseUntil.UnixMicro() == lease.UnixMicro()
}

// markDelivered moves cur to delivered with providerID, records a question's reply anchor in the
// same transaction, and leaves evidence. A receipt is the truth whatever the row says meanwhile
// (an operator may have declared it ambiguous or failed): it is recorded, with the state it
// replaces in the evidence.
func (e *Engine) markDelivered(ctx context.Context, tx store.Tx, cur store.Delivery, providerID, via, by, note string, now time.Time) error {
	if cur.State == store.DeliveryDelivered {
		return e.attempt(ctx, tx, cur, via, "already-delivered", nil, now)
	}
	from := cur.State
	// The row and the evidence hold the id as text any store keeps; the anchor is offered the id
	// as the provider gave it, which the task plane refuses (evidence) if no store can key it.
	cur.State, cur.ProviderID, cur.LastError = store.DeliveryDelivered, storableText(providerID), ""
	release(&cur, cur.NextAttemptAt, now)
	if err := tx.UpdateDelivery(ctx, cur); err != nil {
		return err
	}
	detail := map[string]any{"provider_id": cur.ProviderID, "attempts": cur.Attempts, "via": via}
	if from != store.DeliverySending {
		detail["replaced_state"] = string(from)
	}
	if cur.Operation == OpQuestion {
		if err := e.recordAnchor(ctx, tx, cur, providerID, now); err != nil {
			return err
		}
	}
	outcome := "delivered"
	kind := EvidenceDelivered
	switch via {
	case kindLookup:
		outcome, kind = "found", EvidenceReconciled
	case kindResolve:
		kind = EvidenceResolved
		detail["by"], detail["note"], detail["resolution"] = by, note, "delivered"
		detail["to"], detail["from"] = string(store.DeliveryDelivered), string(from)
	}
	a := store.DeliveryAttempt{Principal: cur.Principal, DeliveryID: cur.ID, Attempt: cur.Attempts, Kind: via,
		Outcome: outcome, Owner: e.owner, CreatedAt: now}
	if via == kindResolve {
		a.Owner, a.Error = by, note
	}
	if err := tx.InsertDeliveryAttempt(ctx, a); err != nil {
		return err
	}
	return e.evidence(ctx, tx, cur, kind, detail, now)
}

// recordAnchor records a delivered question's anchor. A refusal the task plane decides (the task
// is gone, the source continues by no anchor, no provider id) is evidence, not a failure: the
// question was delivered and cannot be taken back. Store errors fail the transaction.
func (e *Engine) recordAnchor(ctx context.Context, tx store.Tx, cur store.Delivery, providerID string, now time.Time) error {
	p, err := payloadOf(cur)
	switch {
	case providerID == "":
		err = errors.New("the provider returned no id")
	case err != nil:
		err = fmt.Errorf("%w: %v", taskplane.ErrInvalid, err)
	default:
		err = e.anchor(ctx, tx, cur.Principal, cur.Source, providerID, cur.TaskID, p.InputSeq, now)
	}
	switch {
	case err == nil:
		return nil
	case providerID == "", errors.Is(err, taskplane.ErrTaskNotFound), errors.Is(err, taskplane.ErrContinuationNotAllowed),
		errors.Is(err, taskplane.ErrInvalid):
		return e.evidence(ctx, tx, cur, EvidenceAnchorRefused, map[string]any{"provider_id": providerID, "error": err.Error()}, now)
	default:
		return fmt.Errorf("record anchor of delivery %s: %w", cur.ID, err)
	}
}

// diedInCall reports whether the worker of a row left in sending died in its provider call, and
// when that call began: the row moved to sending then (beginSend, which records no attempt), and
// no outcome that leaves it in sending without a call — an unknown outcome, a lookup's error or
// Retry-After, a recovery's wait, each recorded with the row's update in one transaction — came
// at or after that. (An outcome that does not, such as a lookup that found nothing, may be
// recorded in the same instant as the next call begins.)
func (e *Engine) diedInCall(ctx context.Context, tx store.Tx, row store.Delivery) (began time.Time, died bool, err error) {
	attempts, err := tx.ListDeliveryAttempts(ctx, row.Principal, row.ID)
	if err != nil {
		return time.Time{}, false, err
	}
	for _, a := range attempts {
		if !a.CreatedAt.Before(row.UpdatedAt) && leftInSending(a) {
			return time.Time{}, false, nil
		}
	}
	return row.UpdatedAt, true, nil
}

// leftInSending reports whether a's outcome leaves its delivery in sending with no call made.
func leftInSending(a store.DeliveryAttempt) bool {
	switch {
	case a.Kind == kindSend && a.Outcome == "unknown",
		a.Kind == kindLookup && (a.Outcome == "error" || a.Outcome == "retry-after"),
		a.Kind == kindRecover && a.Outcome == "wait":
		return true
	}
	return false
}

// hadUnknownOutcome reports whether an idempotent-class delivery had a send whose outcome was
// unknown: one that said so, or one its worker never recorded (it died mid-send), which recovery
// repeated.
func (e *Engine) hadUnknownOutcome(ctx context.Context, tx store.Tx, cur store.Delivery) (bool, error) {
	if Recovery(cur.Recovery) != Idempotent {
		return false, nil
	}
	attempts, err := tx.ListDeliveryAttempts(ctx, cur.Principal, cur.ID)
	if err != nil {
		return false, err
	}
	// An operator's retry says the provider does not have it: only what came after counts.
	unknown := false
	for _, a := range attempts {
		switch {
		case a.Kind == kindResolve && a.Outcome == "retry":
			unknown = false
		case (a.Kind == kindSend && a.Outcome == "unknown") || (a.Kind == kindRecover && a.Outcome == "repeat"):
			unknown = true
		}
	}
	return unknown, nil
}

// snoozed returns how many times the provider asked the delivery to wait (Retry-After, on a send
// or a lookup) and how long those waits were in all, since an operator last gave it a fresh
// budget (a retry resolution).
func (e *Engine) snoozed(ctx context.Context, tx store.Tx, cur store.Delivery) (n int, waited time.Duration, err error) {
	attempts, err := tx.ListDeliveryAttempts(ctx, cur.Principal, cur.ID)
	if err != nil {
		return 0, 0, err
	}
	for _, a := range attempts {
		switch {
		case a.Kind == kindResolve && a.Outcome == "retry":
			n, waited = 0, 0
		case a.Outcome == "retry-after":
			n++
			waited += a.RetryAfter
		}
	}
	return n, waited, nil
}

func (e *Engine) settleFailed(ctx context.Context, tx store.Tx, cur store.Delivery, kind string, cause error, now time.Time) error {
	cur.State, cur.LastError = store.DeliveryFailed, cause.Error()
	release(&cur, cur.NextAttemptAt, now)
	if err := tx.UpdateDelivery(ctx, cur); err != nil {
		return err
	}
	if err := e.attempt(ctx, tx, cur, kind, "failed", cause, now); err != nil {
		return err
	}
	return e.evidence(ctx, tx, cur, EvidenceFailed, map[string]any{"attempts": cur.Attempts, "error": cause.Error()}, now)
}

func (e *Engine) settleAmbiguous(ctx context.Context, tx store.Tx, cur store.Delivery, kind, reason string, now time.Time) error {
	return e.settleAmbiguousErr(ctx, tx, cur, kind, reason, nil, now)
}

func (e *Engine) settleAmbiguousErr(ctx context.Context, tx store.Tx, cur store.Delivery, kind, reason string, cause error, now time.Time) error {
	cur.State = store.DeliveryAmbiguous
	cur.LastError = reason
	if cause != nil {
		cur.LastError += ": " + cause.Error()
	}
	release(&cur, cur.NextAttemptAt, now)
	if err := tx.UpdateDelivery(ctx, cur); err != nil {
		return err
	}
	if err := e.attempt(ctx, tx, cur, kind, "ambiguous", errors.New(cur.LastError), now); err != nil {
		return err
	}
	return e.evidence(ctx, tx, cur, EvidenceAmbiguous, map[string]any{
		"attempts": cur.Attempts, "reason": cur.LastError, "recovery": cur.Recovery,
	}, now)
}

// release clears the lease and sets when the row is next due.
func release(d *store.Delivery, next, now time.Time) {
	d.LeaseOwner, d.LeaseUntil = "", time.Time{}
	d.NextAttemptAt, d.UpdatedAt = next, now
}

func (e *Engine) attempt(ctx context.Context, tx store.Tx, cur store.Delivery, kind, outcome string, cause error, now time.Time) error {
	return e.attemptWait(ctx, tx, cur, kind, outcome, cause, 0, now)
}

func (e *Engine) attemptWait(ctx context.Context, tx store.Tx, cur store.Delivery, kind, outcome string, cause error, wait time.Duration, now time.Time) error {
	a := store.DeliveryAttempt{Principal: cur.Principal, DeliveryID: cur.ID, Attempt: cur.Attempts, Kind: kind,
		Outcome: outcome, RetryAfter: wait, Owner: e.owner, CreatedAt: now}
	if cause != nil {
		a.Error = cause.Error()
		_, _, status := Classify(cause)
		a.ProviderStatus = storableText(status)
	}
	return tx.InsertDeliveryAttempt(ctx, a)
}

// evidence writes a store.Evidence row for the delivery; detail never holds the message.
func (e *Engine) evidence(ctx context.Context, tx store.Tx, d store.Delivery, kind string, detail map[string]any, now time.Time) error {
	if detail == nil {
		detail = map[string]any{}
	}
	detail["delivery"], detail["operation"] = d.ID, d.Operation
	b, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("encode %s evidence: %w", kind, err)
	}
	if err := tx.InsertEvidence(ctx, store.Evidence{Principal: d.Principal, Source: d.Source, Kind: kind,
		TaskID: d.TaskID, Detail: b, CreatedAt: now}); err != nil {
		return fmt.Errorf("write %s evidence: %w", kind, err)
	}
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
