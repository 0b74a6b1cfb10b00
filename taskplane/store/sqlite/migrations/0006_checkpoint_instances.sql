-- 0006_checkpoint_instances: a checkpoint per (principal, source, instance). Two configured
-- instances of one pull source (two mailboxes of one principal) shared the one (principal, source)
-- row: the position of the one further ahead swallowed the other's, and after a restart the one
-- behind resumed from the other's position, skipping its own events.
--
-- SQLite cannot change a primary key, so the table is rebuilt. The rows it had keep instance '':
-- no instance name was stored with them. The store returns such a row to an instance that has no
-- checkpoint of its own, and that instance's first advance takes it over (see
-- store.Checkpoint.Instance), so a source with one instance resumes where it was.
CREATE TABLE checkpoints_by_instance (
	principal  TEXT    NOT NULL,
	source     TEXT    NOT NULL,
	instance   TEXT    NOT NULL DEFAULT '',
	position   BLOB,
	seq        INTEGER NOT NULL,
	version    INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (principal, source, instance)
) WITHOUT ROWID;

INSERT INTO checkpoints_by_instance (principal, source, instance, position, seq, version, updated_at)
	SELECT principal, source, '', position, seq, version, updated_at FROM checkpoints;

DROP TABLE checkpoints;
ALTER TABLE checkpoints_by_instance RENAME TO checkpoints;
