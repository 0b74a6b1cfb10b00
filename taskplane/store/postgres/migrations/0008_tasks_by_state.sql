-- 0008_tasks_by_state: A2A ListTasks with a status filter counted the principal's tasks of that
-- state with a scan of the whole table (238 ms at 50,000 tasks a principal, growing with the
-- table); the timeout sweep reads tasks of a (non-terminal) state by status time. One index serves
-- both, in place of (state, status_time).
DROP INDEX IF EXISTS tasks_state_status_time;
CREATE INDEX IF NOT EXISTS tasks_state_list ON tasks (state, principal, status_time DESC, id DESC);
