-- 0002_deliveries: outbound deliveries (DESIGN.md §3 Delivery), their per-attempt evidence, and
-- the rate lanes several processes share. Keys start with the principal. A zero Go time
-- ('0001-01-01') in lease_until means "not leased".

CREATE TABLE deliveries (
	principal       text        NOT NULL,
	id              text        NOT NULL,
	task_id         text        NOT NULL,
	source          text        NOT NULL,
	operation       text        NOT NULL,
	recovery        text        NOT NULL,
	lane            text        NOT NULL DEFAULT '',
	payload_digest  text        NOT NULL,
	payload         bytea,
	state           text        NOT NULL,
	attempts        integer     NOT NULL DEFAULT 0,
	reconciles      integer     NOT NULL DEFAULT 0,
	next_attempt_at timestamptz NOT NULL,
	lease_owner     text        NOT NULL DEFAULT '',
	lease_until     timestamptz NOT NULL,
	provider_id     text        NOT NULL DEFAULT '',
	last_error      text        NOT NULL DEFAULT '',
	created_at      timestamptz NOT NULL,
	updated_at      timestamptz NOT NULL,
	PRIMARY KEY (principal, id)
);
-- ClaimDeliveries and NextDeliveryDue scan the pending rows by due time.
CREATE INDEX deliveries_pending ON deliveries (next_attempt_at, created_at)
	WHERE state IN ('prepared', 'sending');
-- Operators list by state and source, newest first; PruneDeliveries scans settled rows by age.
CREATE INDEX deliveries_state_source ON deliveries (state, source, created_at DESC);
CREATE INDEX deliveries_settled ON deliveries (updated_at) WHERE state IN ('delivered', 'failed');
CREATE INDEX deliveries_task ON deliveries (principal, task_id);

CREATE TABLE delivery_attempts (
	seq             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	principal       text        NOT NULL,
	delivery_id     text        NOT NULL,
	attempt         integer     NOT NULL,
	kind            text        NOT NULL,
	outcome         text        NOT NULL,
	error           text        NOT NULL DEFAULT '',
	provider_status text        NOT NULL DEFAULT '',
	retry_after_ms  bigint      NOT NULL DEFAULT 0,
	owner           text        NOT NULL DEFAULT '',
	created_at      timestamptz NOT NULL
);
CREATE INDEX delivery_attempts_delivery ON delivery_attempts (principal, delivery_id, seq);

-- One row per rate lane: when its next provider call may start. ReserveLane updates it under the
-- row lock, so processes take slots one at a time.
CREATE TABLE delivery_lanes (
	principal    text        NOT NULL,
	lane         text        NOT NULL,
	next_allowed timestamptz NOT NULL,
	updated_at   timestamptz NOT NULL,
	PRIMARY KEY (principal, lane)
);
