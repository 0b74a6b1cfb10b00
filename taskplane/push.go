package taskplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
)

// SourcePush is the delivery source of push notifications and the source of their evidence.
const SourcePush = "a2a-push"

// EvidencePushRegistered is written when a push-notification config is created or replaced.
const EvidencePushRegistered = "push-registered"

// Limits of push-notification configs. A config beyond them is refused with ErrInvalid, a config
// beyond MaxPushConfigs of one task with ErrPushConfigLimit.
const (
	// MaxPushConfigs bounds the configs of one task.
	MaxPushConfigs = 10
	// MaxPushConfigIDLen bounds a client-chosen config id.
	MaxPushConfigIDLen = 128
	// MaxPushURLLen bounds a webhook URL.
	MaxPushURLLen = 2048
	// MaxPushSecretLen bounds the token and the authentication credentials.
	MaxPushSecretLen = 4096
)

// Errors of the push-config operations. Test them with errors.Is.
var (
	// ErrPushConfigNotFound: the task exists for the caller but has no config with that id.
	ErrPushConfigNotFound = errors.New("push notification config not found")
	// ErrPushConfigLimit: the task already holds MaxPushConfigs configs.
	ErrPushConfigLimit = errors.New("too many push notification configs for the task")
)

// PushAuth is how a notification authenticates to its receiver: the Authorization header
// "<Scheme> <Credentials>".
type PushAuth struct {
	Scheme      string
	Credentials string
}

// PushConfig is a push-notification config of a task (A2A TaskPushNotificationConfig). Token and
// Auth.Credentials are the client's secrets for its receiver: the task plane stores them, the
// notifications carry them, and no read returns them (a read's PushConfig has them empty).
type PushConfig struct {
	// ID names the config within its task; the plane assigns one when it is empty.
	ID     string
	TaskID string
	// URL is the webhook. The task plane checks its form only; the SSRF guard (package push)
	// checks its target before it is registered and again at every delivery.
	URL   string
	Token string
	Auth  *PushAuth
	// CreatedAt is when this registration of the config was made (set by the plane).
	CreatedAt time.Time
}

func (c *PushConfig) validate() error {
	switch {
	case len(c.ID) > MaxPushConfigIDLen:
		return invalidf("push config id longer than %d bytes", MaxPushConfigIDLen)
	case strings.ContainsAny(c.ID, "/?#%") || strings.TrimSpace(c.ID) != c.ID:
		return invalidf("push config id must not contain '/', '?', '#' or '%%', nor start or end with space")
	case !storableKey(c.ID):
		return invalidf("push config id must be valid UTF-8 without NUL")
	case c.URL == "":
		return invalidf("push config has no url")
	case len(c.URL) > MaxPushURLLen:
		return invalidf("push config url longer than %d bytes", MaxPushURLLen)
	case len(c.Token) > MaxPushSecretLen:
		return invalidf("push config token longer than %d bytes", MaxPushSecretLen)
	}
	u, err := url.Parse(c.URL)
	// Hostname, not Host: an authority of only a port (http://:443) names no host to send to.
	if err != nil || u.Hostname() == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return invalidf("push config url must be an absolute http or https URL")
	}
	if u.User != nil {
		return invalidf("push config url must not carry user information; use authentication")
	}
	if c.Auth != nil {
		switch {
		case c.Auth.Scheme == "":
			return invalidf("push config authentication has no scheme")
		case !httpToken(c.Auth.Scheme):
			return invalidf("push config authentication scheme must be one token")
		case len(c.Auth.Scheme) > 64:
			return invalidf("push config authentication scheme longer than 64 bytes")
		case len(c.Auth.Credentials) > MaxPushSecretLen:
			return invalidf("push config authentication credentials longer than %d bytes", MaxPushSecretLen)
		case !headerValue(c.Auth.Credentials):
			return invalidf("push config authentication credentials must be one line of printable characters, without white space at either end")
		}
	}
	if !headerValue(c.Token) {
		return invalidf("push config token must be one line of printable characters, without white space at either end")
	}
	return nil
}

// headerValue reports whether s can be sent as an HTTP header value as it is (RFC 9110
// field-value: no control characters but tab, and no white space at either end, which a sender
// drops: a receiver comparing the token it registered would never see it). A config whose secrets
// could never be sent as registered is refused when it is registered, not found out at every
// notification.
func headerValue(s string) bool {
	if strings.Trim(s, " \t") != s {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

// httpToken reports whether s is an HTTP token (RFC 9110 tchar), as an authentication scheme is.
func httpToken(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0) {
			return false
		}
	}
	return s != ""
}

// pushFromRow is what a read shows of a stored config: never its secrets.
func pushFromRow(r store.PushConfig) PushConfig {
	c := PushConfig{ID: r.ID, TaskID: r.TaskID, URL: r.URL, CreatedAt: r.CreatedAt}
	if r.AuthScheme != "" {
		c.Auth = &PushAuth{Scheme: r.AuthScheme}
	}
	return c
}

// SetPushConfig registers c for the principal's task, or replaces the config with c's ID, and
// returns it as a read shows it (no secrets). The registration sends the task as it is now to
// the webhook first, then every later status change and artifact update, even when the task has
// finished its turn. Another principal's task is ErrTaskNotFound.
func (p *Plane) SetPushConfig(ctx context.Context, principal, taskID string, c PushConfig) (PushConfig, error) {
	if err := c.validate(); err != nil {
		return PushConfig{}, err
	}
	var out PushConfig
	err := p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		t, err := getTask(ctx, tx, principal, taskID)
		if err != nil {
			return err
		}
		out, err = p.registerPushTx(ctx, tx, t, c, p.clock())
		return err
	})
	if err != nil {
		return PushConfig{}, fmt.Errorf("set push config of task %s: %w", taskID, err)
	}
	return out, nil
}

// registerPushConfigs registers an acceptance's configs on its task, in the acceptance's
// transaction.
func (p *Plane) registerPushConfigs(ctx context.Context, tx store.Tx, t *Task, cs []PushConfig, now time.Time) error {
	if len(cs) > MaxPushConfigs {
		return invalidf("more than %d push configs", MaxPushConfigs)
	}
	for _, c := range cs {
		if err := c.validate(); err != nil {
			return err
		}
		if _, err := p.registerPushTx(ctx, tx, t, c, now); err != nil {
			return err
		}
	}
	return nil
}

// registerPushTx stores c on t with its cursor at t's last event and t as the snapshot to send
// first.
func (p *Plane) registerPushTx(ctx context.Context, tx store.Tx, t *Task, c PushConfig, now time.Time) (PushConfig, error) {
	if c.ID == "" {
		c.ID = p.newID()
	}
	snapshot, err := json.Marshal(t)
	if err != nil {
		return PushConfig{}, fmt.Errorf("encode push snapshot: %w", err)
	}
	row := store.PushConfig{
		Principal: t.Origin.Principal, TaskID: t.ID, ID: c.ID, URL: c.URL, Token: c.Token,
		Registration: p.newID(), Cursor: t.LastSeq, Snapshot: snapshot, CreatedAt: now, UpdatedAt: now,
	}
	if c.Auth != nil {
		row.AuthScheme, row.AuthCredentials = c.Auth.Scheme, c.Auth.Credentials
	}
	replaced, err := tx.PutPushConfig(ctx, row, MaxPushConfigs)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return PushConfig{}, ErrTaskNotFound
	case errors.Is(err, store.ErrPushConfigLimit):
		return PushConfig{}, ErrPushConfigLimit
	case err != nil:
		return PushConfig{}, fmt.Errorf("register push config: %w", err)
	}
	host := ""
	if u, err := url.Parse(c.URL); err == nil {
		host = u.Host
	}
	if err := evidence(ctx, tx, row.Principal, SourcePush, EvidencePushRegistered, t.ID,
		map[string]any{"configId": c.ID, "host": host, "replaced": replaced, "cursor": t.LastSeq}, now); err != nil {
		return PushConfig{}, err
	}
	return pushFromRow(row), nil
}

// GetPushConfig returns a config of the principal's task, without its secrets. A missing or
// foreign task is ErrTaskNotFound, a missing config ErrPushConfigNotFound.
func (p *Plane) GetPushConfig(ctx context.Context, principal, taskID, id string) (PushConfig, error) {
	if _, err := getTask(ctx, p.store, principal, taskID); err != nil {
		return PushConfig{}, err
	}
	if !storableKey(id) {
		return PushConfig{}, ErrPushConfigNotFound // no config has such an id
	}
	row, err := p.store.GetPushConfig(ctx, principal, taskID, id)
	if isNotFound(err) {
		return PushConfig{}, ErrPushConfigNotFound
	}
	if err != nil {
		return PushConfig{}, fmt.Errorf("get push config %s of task %s: %w", id, taskID, err)
	}
	return pushFromRow(row), nil
}

// PushConfigPage is one page of a task's push configs.
type PushConfigPage struct {
	Configs []PushConfig
	// NextPageToken continues the listing; "" on the last page.
	NextPageToken string
}

// ListPushConfigs lists the configs of the principal's task by id, without their secrets, at most
// pageSize (0: all) per page. A missing or foreign task is ErrTaskNotFound; a malformed token or a
// negative page size ErrInvalid.
func (p *Plane) ListPushConfigs(ctx context.Context, principal, taskID string, pageSize int, pageToken string) (PushConfigPage, error) {
	if pageSize < 0 {
		return PushConfigPage{}, invalidf("pageSize must not be negative")
	}
	after := ""
	if pageToken != "" {
		if err := decodeToken(pageToken, &after); err != nil || after == "" || !storableKey(after) {
			return PushConfigPage{}, invalidf("malformed pageToken")
		}
	}
	if _, err := getTask(ctx, p.store, principal, taskID); err != nil {
		return PushConfigPage{}, err
	}
	limit := 0
	if pageSize > 0 {
		limit = pageSize + 1
	}
	rows, err := p.store.ListPushConfigs(ctx, principal, taskID, after, limit)
	if err != nil {
		return PushConfigPage{}, fmt.Errorf("list push configs of task %s: %w", taskID, err)
	}
	page := PushConfigPage{Configs: []PushConfig{}}
	for i, r := range rows {
		if pageSize > 0 && i == pageSize {
			page.NextPageToken = encodeToken(rows[i-1].ID)
			break
		}
		page.Configs = append(page.Configs, pushFromRow(r))
	}
	return page, nil
}

// DeletePushConfig removes a config of the principal's task; deleting one that does not exist
// succeeds (delete is idempotent). A missing or foreign task is ErrTaskNotFound. Notifications
// already prepared for the config fail instead of being sent.
func (p *Plane) DeletePushConfig(ctx context.Context, principal, taskID, id string) error {
	err := p.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := getTask(ctx, tx, principal, taskID); err != nil {
			return err
		}
		if !storableKey(id) {
			return nil // no config has such an id: deleting it succeeds, as for any missing one
		}
		_, err := tx.DeletePushConfig(ctx, principal, taskID, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete push config %s of task %s: %w", id, taskID, err)
	}
	return nil
}
