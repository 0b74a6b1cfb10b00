// Package delivery sends a task's answers, questions and handled markers to the provider a task
// came from, making one provider mutation per delivery ID even when processes crash and several
// processes share one Postgres store (docs/delivery.md; invariant 8 of docs/architecture.md).
//
// # Identity
//
// A Request names the task, source, operation and payload (context, task state, locator,
// message). Its delivery ID is hash(task, source, operation, payload digest): the same request
// is the same delivery however often it is made, and revised text is a new delivery. A Fixed
// operation has the ID hash(task, source, operation): it happens at most once per task, and a
// request with a different payload is refused with a *FixedConflictError (and conflict evidence)
// instead of becoming a second message.
//
// # States and recovery classes
//
// A delivery is prepared, then sending (persisted, with an attempt counted, before the provider
// call), then delivered, failed or ambiguous. What happens when a call's outcome is unknown — a
// timeout after the request was written, a crash between the provider's answer and our commit —
// is the source's recovery class (conformance-matrix/matrix.yaml, delivery_recovery):
//
//   - Idempotent: repeat the call; the provider dedupes by the delivery ID. A delivery whose
//     repeats run out, or whose repeat is refused (Permanent), after an unknown outcome is
//     ambiguous, not failed: the first call may have landed.
//   - Lookup: ask the source's Reconciler whether it happened. Found → delivered with that
//     provider ID; not found → prepared and sent again. A lookup source without a Reconciler
//     fails closed as ambiguous.
//   - Ambiguous: there is no safe repeat; the delivery becomes ambiguous with evidence and an
//     operator resolves it (`channels deliveries resolve`).
//
// # Senders report failures as data
//
// A source's Sender returns a typed result, in the manner of River's JobSnooze and JobCancel:
//
//	return delivery.Receipt{}, delivery.Permanent(err)              // 4xx, platform error: failed
//	return delivery.Receipt{}, delivery.Retryable(err)              // certainly not sent: back off, retry
//	return delivery.Receipt{}, delivery.RetryAfter(30*time.Second, err) // 429: snooze, no attempt spent
//	return delivery.Receipt{}, delivery.Indeterminate(err)          // may have happened: recovery class decides
//
// An error without a classification is Indeterminate, the reading that never risks a second
// message. WithStatus attaches the provider's status to the attempt's evidence. Retries use
// cenkalti/backoff/v4 (capped exponential with jitter) with a bounded number of attempts
// (Policy); a Retry-After delays the delivery and its lane and gives the attempt back, up to a
// bounded number of snoozes and a bounded total wait (Policy.MaxRetryAfters,
// Policy.MaxRetryAfterTotal), past which the delivery settles as if its attempts ran out.
//
// # One call per ID, across goroutines and processes
//
// The engine claims a delivery before calling the provider: a lease row (owner, expiry) written
// in the same transaction that marks it sending; on Postgres the claim skips rows other
// transactions hold (FOR UPDATE SKIP LOCKED), so two processes never call for one ID. In one
// process a lock per ID makes concurrent Deliver calls wait for the first and return its
// outcome. A process that dies mid-call leaves the row in sending; when the lease runs out, any
// engine recovers it by its recovery class — at start-up and continuously. Leases are measured
// on the store's clock (store.Clock: on Postgres, the database's), so processes on hosts whose
// clocks disagree still agree on when a lease runs out, and the row an engine reads to record an
// outcome is locked until that write commits, so no claim comes between the two.
//
// # Lanes
//
// A route may name a lane per delivery (a Slack channel, a GitHub token, a mail account); the
// calls of one lane start at least LaneInterval apart (DefaultLaneIntervals: Slack and GitHub one
// per second), across processes on Postgres, through a lane row updated under its row lock. A
// claim takes one delivery per lane, so a busy lane never holds up another.
//
// # Reply anchors
//
// When a question (OpQuestion) is delivered, its provider ID is recorded as a reply anchor of
// its task in the same transaction that marks it delivered: a reply to exactly that message
// continues the task, and there is never a delivered question without its anchor.
//
// # Use
//
//	eng := delivery.New(st, delivery.Routes{
//		"slack": {Sender: slackSource, Recovery: delivery.Lookup},  // its Reconciler and Laner are found by type assertion
//	}, delivery.WithAnchorRecorder(sources.RecordAnchorTx))
//	go eng.Run(ctx)   // retries, snoozes, recovery; Close stops it
//	rec, err := eng.Deliver(ctx, delivery.RequestFor(task, delivery.OpQuestion, msg))
//
// The Delivery, Receipt, Sender and Reconciler types have exactly the shape of the sources
// package's, so a sources.Sender plugs in through a one-line conversion (see docs/delivery.md).
package delivery
