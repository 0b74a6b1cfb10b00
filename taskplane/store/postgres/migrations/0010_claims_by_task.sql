-- 0010_claims_by_task: retention deleted done claims by scanning every old done claim and keeping
-- those whose task still exists, hashing every task in each batch (365 ms at 200,000 tasks, in
-- every batch of a pass). A task's done claims now go with the task, found by task; the age
-- sweep reads only the claims of no task (direct Messages). A done claim whose task is gone is
-- new work anyway (the acceptance treats it so); those left behind are deleted here once.
--
-- claims_done_updated_at, which this build no longer reads, stays: an older binary still running
-- during a rolling upgrade sweeps claims by it, and dropping it here would take a lock stronger
-- than the index builds' on a table those binaries write, which deadlocks with an acceptance
-- waiting behind the builds (and fails the start). A later release drops it. Claim inserts wait
-- for this migration's index builds (seconds at a million claims).
CREATE INDEX IF NOT EXISTS claims_done_task ON claims (principal, task_id) WHERE state = 'done' AND task_id <> '';
CREATE INDEX IF NOT EXISTS claims_done_untasked ON claims (updated_at) WHERE state = 'done' AND task_id = '';
DELETE FROM claims WHERE state = 'done' AND task_id <> ''
	AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.principal = claims.principal AND t.id = claims.task_id);
