-- 0009_live_tasks_by_status_time: the timeout sweep's index holds only the tasks it can time out,
-- those not finished. A finished task (most of them, and every task an inline turn settles as it
-- is accepted) was written into (state, status_time) and never read there: one b-tree more to
-- update in every acceptance's transaction, and one page more in its commit. The sweep names the
-- same states in its query, so SQLite can use the partial index.
CREATE INDEX IF NOT EXISTS tasks_live_state_status_time ON tasks (state, status_time)
	WHERE state IN ('submitted', 'working', 'input-required', 'auth-required');
DROP INDEX IF EXISTS tasks_state_status_time;
