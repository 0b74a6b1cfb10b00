-- 0004_push_configs: push-notification configs (A2A TaskPushNotificationConfig), with each
-- config's durable cursor in its task's event log. token and auth_credentials are the client's
-- secrets for its receiver: they are sent with notifications and never returned by a read. Keys
-- start with the principal.

CREATE TABLE push_configs (
	principal        text        NOT NULL,
	task_id          text        NOT NULL,
	id               text        NOT NULL,
	url              text        NOT NULL,
	token            text        NOT NULL DEFAULT '',
	auth_scheme      text        NOT NULL DEFAULT '',
	auth_credentials text        NOT NULL DEFAULT '',
	registration     text        NOT NULL,
	cursor_seq       bigint      NOT NULL DEFAULT 0,
	snapshot         bytea,
	last_delivery    text        NOT NULL DEFAULT '',
	created_at       timestamptz NOT NULL,
	updated_at       timestamptz NOT NULL,
	PRIMARY KEY (principal, task_id, id)
);
-- ListPushWork takes the configs oldest-updated first.
CREATE INDEX push_configs_updated ON push_configs (updated_at);
