// Package taskplane is the durable task plane: the one place where a provider event or an A2A
// message becomes work, and where that work's state lives.
//
// A Plane wraps a store.Store (SQLite or Postgres, see package store) and offers:
//
//   - Accept, one transaction per event: the event's idempotency claim (a redelivery returns the
//     prior outcome, a different payload under the same identity is a ConflictError), its
//     conversation's context, a new Task or the continuation of one waiting for an answer (a
//     verified reply anchor, or an explicit task id its principal owns), the task's event log,
//     evidence, and a wake for an executor. Nothing is acknowledged before that commit.
//   - Task updates (Apply, and the Turn an executor holds), each guarded by the task's version
//     and appended to its event log in the same transaction; the state machine of the eight A2A
//     states refuses illegal moves, and a terminal task is immutable.
//   - Reads (GetTask, ListTasks, Events) and following (Follow, FollowStream): a reader that
//     resumes after event sequence N gets exactly the later events, fed after commit by an
//     in-process broker and, on Postgres, by LISTEN/NOTIFY from other processes (RunListener).
//   - The wake queue: a Dispatcher claims turns (ClaimTurn, leased, offered again when a lease
//     lapses) and runs an Executor on each; an idle claimer may be handed a new task's first turn
//     in the transaction that accepted it.
//   - Settling and retention: Settle and the result hand-off to delivery, SweepTimeouts for
//     tasks left waiting too long, and Prune, which keeps every live task and what it needs.
//
// Every object is scoped to its principal: another principal's task, context or anchor reads as
// missing. Errors are typed (ErrTaskNotFound, ErrConcurrentModification, ErrStore, …; see
// errors.go) so that the A2A bindings can answer with the right protocol error.
package taskplane
