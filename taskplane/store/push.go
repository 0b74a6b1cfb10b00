package store

import (
	"context"
	"errors"
	"time"
)

// Push-notification configs (A2A TaskPushNotificationConfig). The task plane owns the rules
// (scoping, the bound per task, what a read may show); the push package follows each config's
// task event log from a durable cursor and turns events into deliveries. These interfaces are
// embedded in Reader and Tx.

// ErrPushConfigLimit is returned by PutPushConfig when a task already holds the most configs the
// caller allows and the config is not a replacement of one of them.
var ErrPushConfigLimit = errors.New("store: too many push notification configs for the task")

// PushConfig is one push-notification config of a task, keyed by (Principal, TaskID, ID).
type PushConfig struct {
	Principal string
	TaskID    string
	ID        string
	// URL is the webhook the notifications are POSTed to.
	URL string
	// Token, AuthScheme and AuthCredentials are the client's secrets for its receiver: stored so
	// notifications can carry them, never shown by a read the task plane serves.
	Token           string
	AuthScheme      string
	AuthCredentials string
	// Registration names this registration of the config: a fresh value on every create or
	// replace, so the notifications of a re-registration are new deliveries.
	Registration string
	// Cursor is the task event sequence up to which notifications have been prepared: events with
	// a larger Seq are still to come.
	Cursor int64
	// Snapshot, when not empty, is the task (the task plane's encoding) as it was at Cursor when
	// the config was registered: it is notified first, then cleared.
	Snapshot []byte
	// LastDelivery is the delivery ID of the newest notification prepared ("" for none). The next
	// notification waits until it is settled, so a receiver sees a task's events in order.
	LastDelivery string
	// Finished: the notifications prepared up to Cursor include the end of the task (its terminal
	// status, or a snapshot of it finished). Nothing can follow, so ListPushWork no longer reads the
	// config. Set by AdvancePushConfig's caller. It holds for the registration that finished: the
	// stores keep that registration, so a put of a new one (by this build or an older one sharing
	// the store, which knows nothing of the flag) is live again.
	Finished  bool
	CreatedAt time.Time
	UpdatedAt time.Time
}

// PushReader holds the push-config reads; Reader embeds it.
type PushReader interface {
	// GetPushConfig returns one config of the principal's task; a missing one (or another
	// principal's) is ErrNotFound.
	GetPushConfig(ctx context.Context, principal, taskID, id string) (PushConfig, error)
	// ListPushConfigs returns the configs of the principal's task with ID > afterID, ordered by
	// ID, at most limit (0 = no limit). A task without configs (or another principal's) has none.
	ListPushConfigs(ctx context.Context, principal, taskID, afterID string, limit int) ([]PushConfig, error)
	// ListPushWork returns, across principals, the configs with a notification to prepare: a
	// Snapshot to send, or a Cursor behind their task's LastSeq. A config whose LastDelivery is
	// still pending (prepared or sending) is left out until it settles; a config whose task no
	// longer exists is left out, and so is a Finished one. Oldest UpdatedAt first, at most limit
	// (0 = no limit).
	ListPushWork(ctx context.Context, limit int) ([]PushConfig, error)
}

// PushTx holds the push-config writes; Tx embeds it.
type PushTx interface {
	// PutPushConfig inserts c, or replaces every field of the config with the same (Principal,
	// TaskID, ID) and reports replaced=true. The task must exist for the principal (else
	// ErrNotFound). A new config beyond maxPerTask configs of the task (maxPerTask > 0) is
	// ErrPushConfigLimit; concurrent puts on one task never exceed the bound (on Postgres the
	// task row is locked first).
	PutPushConfig(ctx context.Context, c PushConfig, maxPerTask int) (replaced bool, err error)
	// DeletePushConfig deletes one config and reports whether it existed.
	DeletePushConfig(ctx context.Context, principal, taskID, id string) (deleted bool, err error)
	// AdvancePushConfig stores c's Cursor, Snapshot (empty clears it), LastDelivery, Finished and UpdatedAt,
	// only if the stored config has c's Registration and the cursor expectCursor; otherwise it
	// changes nothing and reports false (another worker moved it, or the config was replaced or
	// deleted).
	AdvancePushConfig(ctx context.Context, c PushConfig, expectCursor int64) (advanced bool, err error)
	// PrunePushConfigs deletes at most limit (0 = no limit) configs whose task no longer exists
	// and reports how many went. Prune deletes a task's configs with it; this is the backstop for
	// configs a build before that left behind.
	PrunePushConfigs(ctx context.Context, limit int) (deleted int, err error)
}

// FinishedRegistration is what a store keeps for c.Finished: the registration that finished, or ""
// (a config is finished while its registration is the one kept).
func FinishedRegistration(c PushConfig) string {
	if c.Finished {
		return c.Registration
	}
	return ""
}
