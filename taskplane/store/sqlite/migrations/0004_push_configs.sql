-- Push-notification configs (A2A TaskPushNotificationConfig), with each config's durable cursor in
-- its task's event log. token and auth_credentials are the client's secrets for its receiver:
-- they are sent with notifications and never returned by a read. Keys start with the principal.

CREATE TABLE push_configs (
	principal        TEXT    NOT NULL,
	task_id          TEXT    NOT NULL,
	id               TEXT    NOT NULL,
	url              TEXT    NOT NULL,
	token            TEXT    NOT NULL DEFAULT '',
	auth_scheme      TEXT    NOT NULL DEFAULT '',
	auth_credentials TEXT    NOT NULL DEFAULT '',
	registration     TEXT    NOT NULL,
	cursor_seq       INTEGER NOT NULL DEFAULT 0,
	snapshot         BLOB,
	last_delivery    TEXT    NOT NULL DEFAULT '',
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	PRIMARY KEY (principal, task_id, id)
) WITHOUT ROWID;

-- ListPushWork takes the configs oldest-updated first.
CREATE INDEX push_configs_updated ON push_configs (updated_at);
