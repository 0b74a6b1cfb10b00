-- Initial schema of the SQLite store.
--
-- Times are INTEGER unix microseconds (UTC) so that SQL compares and orders them numerically and
-- they round-trip exactly. Every key starts with the principal (DESIGN.md §6). There are no
-- foreign keys: the task plane writes rows of one transaction in whatever order suits it, and
-- Prune removes dependents explicitly.

CREATE TABLE contexts (
	principal        TEXT    NOT NULL,
	id               TEXT    NOT NULL,
	source           TEXT    NOT NULL DEFAULT '',
	conversation_key TEXT    NOT NULL DEFAULT '',
	created_at       INTEGER NOT NULL,
	last_event_at    INTEGER NOT NULL,
	PRIMARY KEY (principal, id)
) WITHOUT ROWID;

-- EnsureContext's atomic upsert target: one context per provider conversation.
CREATE UNIQUE INDEX contexts_conversation ON contexts (principal, source, conversation_key)
	WHERE conversation_key != '';
-- Prune scans contexts by age.
CREATE INDEX contexts_last_event ON contexts (last_event_at);

CREATE TABLE tasks (
	principal   TEXT    NOT NULL,
	id          TEXT    NOT NULL,
	context_id  TEXT    NOT NULL,
	source      TEXT    NOT NULL DEFAULT '',
	state       TEXT    NOT NULL,
	status_time INTEGER NOT NULL,
	version     INTEGER NOT NULL,
	last_seq    INTEGER NOT NULL DEFAULT 0,
	body        BLOB,
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL,
	PRIMARY KEY (principal, id)
) WITHOUT ROWID;

-- ListTasks orders by (status_time DESC, id DESC) within a principal, optionally within a context.
CREATE INDEX tasks_list ON tasks (principal, status_time DESC, id DESC);
CREATE INDEX tasks_context ON tasks (principal, context_id, status_time DESC, id DESC);

CREATE TABLE task_events (
	principal  TEXT    NOT NULL,
	task_id    TEXT    NOT NULL,
	seq        INTEGER NOT NULL,
	kind       TEXT    NOT NULL,
	payload    BLOB,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (principal, task_id, seq)
) WITHOUT ROWID;

CREATE TABLE claims (
	principal    TEXT    NOT NULL,
	source       TEXT    NOT NULL,
	identity     TEXT    NOT NULL,
	digest       TEXT    NOT NULL DEFAULT '',
	state        TEXT    NOT NULL,
	outcome_kind TEXT    NOT NULL DEFAULT '',
	task_id      TEXT    NOT NULL DEFAULT '',
	context_id   TEXT    NOT NULL DEFAULT '',
	message      BLOB,
	created_at   INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL,
	PRIMARY KEY (principal, source, identity)
) WITHOUT ROWID;

-- Prune looks for done claims by age, and for pending claims that keep a context alive.
CREATE INDEX claims_state_updated ON claims (state, updated_at);
CREATE INDEX claims_context ON claims (principal, context_id, state);

CREATE TABLE anchors (
	principal   TEXT    NOT NULL,
	source      TEXT    NOT NULL,
	provider_id TEXT    NOT NULL,
	task_id     TEXT    NOT NULL,
	input_seq   INTEGER NOT NULL DEFAULT 0,
	created_at  INTEGER NOT NULL,
	PRIMARY KEY (principal, source, provider_id)
) WITHOUT ROWID;

-- Prune deletes a task's anchors.
CREATE INDEX anchors_task ON anchors (principal, task_id);

CREATE TABLE checkpoints (
	principal  TEXT    NOT NULL,
	source     TEXT    NOT NULL,
	position   BLOB,
	seq        INTEGER NOT NULL,
	version    INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (principal, source)
) WITHOUT ROWID;

-- AUTOINCREMENT: evidence IDs are never reused, so a follower's AfterID position stays valid.
CREATE TABLE evidence (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	principal  TEXT    NOT NULL,
	source     TEXT    NOT NULL DEFAULT '',
	kind       TEXT    NOT NULL,
	task_id    TEXT    NOT NULL DEFAULT '',
	detail     BLOB,
	created_at INTEGER NOT NULL
);

CREATE INDEX evidence_principal ON evidence (principal, id);
CREATE INDEX evidence_source ON evidence (source, id);
CREATE INDEX evidence_kind ON evidence (kind, id);
CREATE INDEX evidence_created ON evidence (created_at);

-- seq is the insertion order; it breaks ties between wakes created in the same microsecond, so
-- ListWakes is FIFO.
CREATE TABLE wakes (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	id         TEXT    NOT NULL,
	principal  TEXT    NOT NULL,
	task_id    TEXT    NOT NULL,
	activation INTEGER NOT NULL DEFAULT 0,
	state      TEXT    NOT NULL,
	attempts   INTEGER NOT NULL DEFAULT 0,
	detail     TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);

CREATE UNIQUE INDEX wakes_id ON wakes (principal, id);
CREATE INDEX wakes_state ON wakes (state, created_at, seq);
CREATE INDEX wakes_task ON wakes (principal, task_id);
