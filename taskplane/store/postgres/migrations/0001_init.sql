-- 0001_init: the task plane's tables. Every key starts with the principal (DESIGN.md §6), so the
-- data partitions by principal. Binary payloads are bytea and nullable so a nil slice round-trips
-- as nil; timestamps are timestamptz and the driver reads them back in UTC.

CREATE TABLE contexts (
	principal        text        NOT NULL,
	id               text        NOT NULL,
	source           text        NOT NULL DEFAULT '',
	conversation_key text        NOT NULL DEFAULT '',
	created_at       timestamptz NOT NULL,
	last_event_at    timestamptz NOT NULL,
	PRIMARY KEY (principal, id)
);
-- EnsureContext upserts on this index: one context per provider conversation.
CREATE UNIQUE INDEX contexts_conversation ON contexts (principal, source, conversation_key)
	WHERE conversation_key <> '';
-- Prune scans contexts idle since before the cutoff.
CREATE INDEX contexts_last_event_at ON contexts (last_event_at);

CREATE TABLE tasks (
	principal   text        NOT NULL,
	id          text        NOT NULL,
	context_id  text        NOT NULL,
	source      text        NOT NULL DEFAULT '',
	state       text        NOT NULL,
	status_time timestamptz NOT NULL,
	version     bigint      NOT NULL,
	last_seq    bigint      NOT NULL DEFAULT 0,
	body        bytea,
	created_at  timestamptz NOT NULL,
	updated_at  timestamptz NOT NULL,
	PRIMARY KEY (principal, id)
);
-- ListTasks orders by (status_time DESC, id DESC) and pages with a keyset cursor on the same pair.
CREATE INDEX tasks_list ON tasks (principal, status_time DESC, id DESC);
-- ListTasks by context, and Prune's "context still referenced by a task" check.
CREATE INDEX tasks_context ON tasks (principal, context_id, status_time DESC, id DESC);

CREATE TABLE task_events (
	principal  text        NOT NULL,
	task_id    text        NOT NULL,
	seq        bigint      NOT NULL,
	kind       text        NOT NULL,
	payload    bytea,
	created_at timestamptz NOT NULL,
	PRIMARY KEY (principal, task_id, seq)
);

CREATE TABLE claims (
	principal    text        NOT NULL,
	source       text        NOT NULL,
	identity     text        NOT NULL,
	digest       text        NOT NULL DEFAULT '',
	state        text        NOT NULL,
	outcome_kind text        NOT NULL DEFAULT '',
	task_id      text        NOT NULL DEFAULT '',
	context_id   text        NOT NULL DEFAULT '',
	message      bytea,
	created_at   timestamptz NOT NULL,
	updated_at   timestamptz NOT NULL,
	PRIMARY KEY (principal, source, identity)
);
-- Prune keeps contexts that a pending claim names.
CREATE INDEX claims_pending_context ON claims (principal, context_id) WHERE state = 'pending';
-- Prune deletes done claims older than the cutoff.
CREATE INDEX claims_done_updated_at ON claims (updated_at) WHERE state = 'done';

CREATE TABLE anchors (
	principal   text        NOT NULL,
	source      text        NOT NULL,
	provider_id text        NOT NULL,
	task_id     text        NOT NULL,
	input_seq   bigint      NOT NULL DEFAULT 0,
	created_at  timestamptz NOT NULL,
	PRIMARY KEY (principal, source, provider_id)
);
CREATE INDEX anchors_task ON anchors (principal, task_id);

CREATE TABLE checkpoints (
	principal  text        NOT NULL,
	source     text        NOT NULL,
	position   bytea,
	seq        bigint      NOT NULL,
	version    bigint      NOT NULL,
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (principal, source)
);

CREATE TABLE evidence (
	id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	principal  text        NOT NULL,
	source     text        NOT NULL DEFAULT '',
	kind       text        NOT NULL,
	task_id    text        NOT NULL DEFAULT '',
	detail     bytea,
	created_at timestamptz NOT NULL
);
-- ListEvidence is newest first (id DESC), usually filtered by source and kind, or by task.
CREATE INDEX evidence_source_kind ON evidence (source, kind, id);
CREATE INDEX evidence_principal_task ON evidence (principal, task_id, id) WHERE task_id <> '';
CREATE INDEX evidence_created_at ON evidence (created_at);

CREATE TABLE wakes (
	principal  text        NOT NULL,
	id         text        NOT NULL,
	task_id    text        NOT NULL,
	activation bigint      NOT NULL,
	state      text        NOT NULL,
	attempts   integer     NOT NULL DEFAULT 0,
	detail     text        NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (principal, id)
);
-- ListWakes is FIFO per state.
CREATE INDEX wakes_state_created ON wakes (state, created_at, id);
CREATE INDEX wakes_task ON wakes (principal, task_id);
