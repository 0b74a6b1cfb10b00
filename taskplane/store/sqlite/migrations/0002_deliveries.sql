-- Outbound deliveries (DESIGN.md §3 Delivery), their per-attempt evidence, and rate lanes. Times
-- are INTEGER unix microseconds like every other table; the zero Go time in lease_until means
-- "not leased". Keys start with the principal.

CREATE TABLE deliveries (
	principal       TEXT    NOT NULL,
	id              TEXT    NOT NULL,
	task_id         TEXT    NOT NULL,
	source          TEXT    NOT NULL,
	operation       TEXT    NOT NULL,
	recovery        TEXT    NOT NULL,
	lane            TEXT    NOT NULL DEFAULT '',
	payload_digest  TEXT    NOT NULL,
	payload         BLOB,
	state           TEXT    NOT NULL,
	attempts        INTEGER NOT NULL DEFAULT 0,
	reconciles      INTEGER NOT NULL DEFAULT 0,
	next_attempt_at INTEGER NOT NULL,
	lease_owner     TEXT    NOT NULL DEFAULT '',
	lease_until     INTEGER NOT NULL,
	provider_id     TEXT    NOT NULL DEFAULT '',
	last_error      TEXT    NOT NULL DEFAULT '',
	created_at      INTEGER NOT NULL,
	updated_at      INTEGER NOT NULL,
	PRIMARY KEY (principal, id)
) WITHOUT ROWID;

-- ClaimDeliveries and NextDeliveryDue scan the pending rows by due time.
CREATE INDEX deliveries_pending ON deliveries (next_attempt_at, created_at)
	WHERE state IN ('prepared', 'sending');
-- Operators list by state and source, newest first; PruneDeliveries scans settled rows by age.
CREATE INDEX deliveries_state_source ON deliveries (state, source, created_at DESC);
CREATE INDEX deliveries_settled ON deliveries (updated_at) WHERE state IN ('delivered', 'failed');
CREATE INDEX deliveries_task ON deliveries (principal, task_id);

-- seq is the insertion order of the evidence.
CREATE TABLE delivery_attempts (
	seq             INTEGER PRIMARY KEY AUTOINCREMENT,
	principal       TEXT    NOT NULL,
	delivery_id     TEXT    NOT NULL,
	attempt         INTEGER NOT NULL,
	kind            TEXT    NOT NULL,
	outcome         TEXT    NOT NULL,
	error           TEXT    NOT NULL DEFAULT '',
	provider_status TEXT    NOT NULL DEFAULT '',
	retry_after_ms  INTEGER NOT NULL DEFAULT 0,
	owner           TEXT    NOT NULL DEFAULT '',
	created_at      INTEGER NOT NULL
);
CREATE INDEX delivery_attempts_delivery ON delivery_attempts (principal, delivery_id, seq);

-- One row per rate lane: when its next provider call may start.
CREATE TABLE delivery_lanes (
	principal    TEXT    NOT NULL,
	lane         TEXT    NOT NULL,
	next_allowed INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL,
	PRIMARY KEY (principal, lane)
) WITHOUT ROWID;
