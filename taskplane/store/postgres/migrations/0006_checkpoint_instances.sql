-- 0006_checkpoint_instances: a checkpoint per (principal, source, instance). Two configured
-- instances of one pull source (two mailboxes of one principal) shared the one (principal, source)
-- row: the position of the one further ahead swallowed the other's, and after a restart the one
-- behind resumed from the other's position, skipping its own events.
--
-- The rows the table had keep instance '': no instance name was stored with them. The store
-- returns such a row to an instance that has no checkpoint of its own, and that instance's first
-- advance takes it over (see store.Checkpoint.Instance), so a source with one instance resumes
-- where it was.
--
-- An older process still running on this schema cannot advance a checkpoint (its upsert names
-- the old key), so its acceptance of an event that carries a position fails and the event is
-- fetched again; nothing it does moves a position.
ALTER TABLE checkpoints ADD COLUMN instance text NOT NULL DEFAULT '';
ALTER TABLE checkpoints DROP CONSTRAINT checkpoints_pkey;
ALTER TABLE checkpoints ADD PRIMARY KEY (principal, source, instance);
