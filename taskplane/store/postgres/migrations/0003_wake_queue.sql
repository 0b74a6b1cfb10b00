-- 0003_wake_queue: leases and due times of the wake queue (DESIGN.md §4 invariant 7), and the
-- index the task timeout sweep reads. The zero Go time ('0001-01-01') means "not leased" in
-- lease_until and "due at once" in due_at.

ALTER TABLE wakes ADD COLUMN lease_owner text        NOT NULL DEFAULT '';
ALTER TABLE wakes ADD COLUMN lease_until timestamptz NOT NULL DEFAULT '0001-01-01 00:00:00+00';
ALTER TABLE wakes ADD COLUMN due_at      timestamptz NOT NULL DEFAULT '0001-01-01 00:00:00+00';

-- ClaimWakes scans the live rows in FIFO order; ListTaskWakes and the one-turn-per-task check use
-- wakes_task (0001).
CREATE INDEX wakes_live ON wakes (created_at, id) WHERE state IN ('pending', 'active');

-- ListStaleTasks: WORKING and INPUT_REQUIRED tasks by status age, across principals.
CREATE INDEX tasks_state_status_time ON tasks (state, status_time);
