-- 0007_large_store_indexes: retention and listings that stay fast on a large store (a review
-- filled one with 200,000 tasks, a million evidence records and 200,000 claims). Written to run
-- again harmlessly (IF EXISTS, IF NOT EXISTS).
--
-- Claims. Retention deleted done claims by scanning every done claim older than the cutoff and
-- keeping those whose task still exists (the claims of tasks in conversations still going on),
-- again in every batch: 7 s inside the writer's transaction for 133,000 such claims. A task's
-- done claims now go with the task, found by task; the sweep by age covers only the claims of no
-- task (direct Messages). Each done claim is in exactly one of the two partial indexes, so an
-- acceptance writes no more index entries than before.
DROP INDEX IF EXISTS claims_done_updated_at;
CREATE INDEX IF NOT EXISTS claims_done_task ON claims (principal, task_id) WHERE state = 'done' AND task_id != '';
CREATE INDEX IF NOT EXISTS claims_done_untasked ON claims (updated_at) WHERE state = 'done' AND task_id = '';
-- A done claim whose task is gone is new work anyway (the acceptance treats it so); those an
-- earlier build left behind would no longer be swept.
DELETE FROM claims WHERE state = 'done' AND task_id != ''
	AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.principal = claims.principal AND t.id = claims.task_id);

-- Tasks by state. A2A ListTasks with a status filter walked the principal's whole task list
-- (4 s at 50,000 tasks). (state, status_time) stays for the timeout sweep, which reads the tasks of
-- a non-terminal state older than a time across principals.
CREATE INDEX IF NOT EXISTS tasks_state_list ON tasks (state, principal, status_time DESC, id DESC);
