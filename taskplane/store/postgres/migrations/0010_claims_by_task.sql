-- 0010_claims_by_task: retention deleted done claims by scanning every old done claim and keeping
-- those whose task still exists, hashing every task in each batch (365 ms at 200,000 tasks, in
-- every batch of a pass). A task's done claims now go with the task, found by task; the age
-- sweep reads only the claims of no task (direct Messages). Each done claim is in exactly one of
-- the two partial indexes, so an acceptance writes no more index entries than before. A done
-- claim whose task is gone is new work anyway (the acceptance treats it so); those left behind
-- are deleted here once. An older binary still running prunes claims as before, without the
-- index it read them by (a scan of the claims per retention batch until it stops).
CREATE INDEX IF NOT EXISTS claims_done_task ON claims (principal, task_id) WHERE state = 'done' AND task_id <> '';
CREATE INDEX IF NOT EXISTS claims_done_untasked ON claims (updated_at) WHERE state = 'done' AND task_id = '';
DROP INDEX IF EXISTS claims_done_updated_at;
DELETE FROM claims WHERE state = 'done' AND task_id <> ''
	AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.principal = claims.principal AND t.id = claims.task_id);
