-- 0008_push_configs_finished: the push notifier looks for configs with work twice a second, and
-- read every config to find them, each with its task: 0.6 s a pass, half a core while idle, on a
-- store with 10,000 configs (they live as long as their task). A config that has notified the
-- end of its task is now marked finished and no longer read: nothing can follow a terminal state.
-- Configs already caught up with a finished task are marked here.
ALTER TABLE push_configs ADD COLUMN finished INTEGER NOT NULL DEFAULT 0;
UPDATE push_configs SET finished = 1 WHERE snapshot IS NULL AND EXISTS (SELECT 1 FROM tasks t
	WHERE t.principal = push_configs.principal AND t.id = push_configs.task_id
	AND t.state IN ('completed', 'failed', 'canceled', 'rejected') AND push_configs.cursor_seq >= t.last_seq);
DROP INDEX IF EXISTS push_configs_updated;
CREATE INDEX IF NOT EXISTS push_configs_live ON push_configs (updated_at) WHERE finished = 0;
