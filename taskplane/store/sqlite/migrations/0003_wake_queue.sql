-- 0003_wake_queue: leases and due times of the wake queue (DESIGN.md §4 invariant 7), and the
-- index the task timeout sweep reads. -62135596800000000 is the zero Go time in unix
-- microseconds: "not leased" for lease_until, "due at once" for due_at.

ALTER TABLE wakes ADD COLUMN lease_owner TEXT    NOT NULL DEFAULT '';
ALTER TABLE wakes ADD COLUMN lease_until INTEGER NOT NULL DEFAULT -62135596800000000;
ALTER TABLE wakes ADD COLUMN due_at      INTEGER NOT NULL DEFAULT -62135596800000000;

-- ClaimWakes scans the live rows in FIFO order; ListTaskWakes and the one-turn-per-task check use
-- wakes_task (0001).
CREATE INDEX wakes_live ON wakes (created_at, seq) WHERE state IN ('pending', 'active');

-- ListStaleTasks: WORKING and INPUT_REQUIRED tasks by status age, across principals.
CREATE INDEX tasks_state_status_time ON tasks (state, status_time);
