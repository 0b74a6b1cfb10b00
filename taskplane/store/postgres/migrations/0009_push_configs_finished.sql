-- 0009_push_configs_finished: the push notifier looks for configs with work twice a second, and
-- read every config to find them, each with its task (87 ms a pass on a store with 10,000
-- configs; they live as long as their task). A config that has notified the end of its task now
-- records the registration that finished, and while that is its registration it is no longer
-- read: nothing can follow a terminal state. (A registration, not a flag: a new registration,
-- even one an older build puts while a rolling upgrade drains it, makes the config live again.)
-- Configs already caught up with a finished task are marked here.
ALTER TABLE push_configs ADD COLUMN IF NOT EXISTS finished_registration text NOT NULL DEFAULT '';
UPDATE push_configs SET finished_registration = registration WHERE snapshot IS NULL AND EXISTS (SELECT 1 FROM tasks t
	WHERE t.principal = push_configs.principal AND t.id = push_configs.task_id
	AND t.state IN ('completed', 'failed', 'canceled', 'rejected') AND push_configs.cursor_seq >= t.last_seq);
DROP INDEX IF EXISTS push_configs_updated;
CREATE INDEX IF NOT EXISTS push_configs_live ON push_configs (updated_at) WHERE finished_registration <> registration;
-- The timeout sweep's index, for a store that ran a draft of 0008 that dropped it.
CREATE INDEX IF NOT EXISTS tasks_state_status_time ON tasks (state, status_time);
