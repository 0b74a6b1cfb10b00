-- 0008_tasks_by_state: A2A ListTasks with a status filter counted the principal's tasks of that
-- state with a scan of the whole table (238 ms at 50,000 tasks a principal, growing with the
-- table). (state, status_time) stays for the timeout sweep, which reads the tasks of a
-- non-terminal state older than a time across principals.
CREATE INDEX IF NOT EXISTS tasks_state_list ON tasks (state, principal, status_time DESC, id DESC);
