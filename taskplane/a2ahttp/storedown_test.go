package a2ahttp_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// downStore is a store whose database is down while down is set: every transaction and every
// read of a task fails with err.
type downStore struct {
	store.Store
	down atomic.Bool
	err  error
}

func (d *downStore) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if d.down.Load() {
		return d.err
	}
	return d.Store.Update(ctx, fn)
}

func (d *downStore) GetTask(ctx context.Context, principal, id string) (store.Task, error) {
	if d.down.Load() {
		return store.Task{}, d.err
	}
	return d.Store.GetTask(ctx, principal, id)
}

// refusedConnection returns the error pgx gives when the database refuses connections (it is
// restarting): it names the database's host, user and database.
func refusedConnection(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := pgconn.Connect(ctx, "postgres://secretuser@127.0.0.1:1/secretdb?connect_timeout=2")
	if err == nil || !strings.Contains(err.Error(), "secretdb") {
		t.Fatalf("connect to a closed port: %v", err)
	}
	return err
}

// A request the store cannot serve (the database down, restarting, read-only or full) is
// answered 503 UNAVAILABLE with Retry-After — JSON-RPC -32603 with reason UNAVAILABLE — rather
// than 500 INTERNAL: clients and load balancers retry it. The store's error, which names the
// database's host, user and database, is not shown.
func TestAStoreOutageIsAnswered503Unavailable(t *testing.T) {
	st := &downStore{Store: storetest.OpenSQLite(t), err: refusedConnection(t)}
	e := newEnvOn(t, st, nil)
	st.down.Store(true)
	secret := func(what string, body []byte) {
		t.Helper()
		for _, s := range []string{"secretuser", "secretdb", "127.0.0.1", "dial"} {
			if strings.Contains(string(body), s) {
				t.Errorf("%s: the answer quotes the store's error (%q): %s", what, s, body)
			}
		}
	}
	for _, c := range []struct {
		what, method, path string
		body               []byte
	}{
		{"send", http.MethodPost, "/message:send", sendBody(t, wireMsg(uuid.NewString(), "hello"), nil)},
		{"get task", http.MethodGet, "/tasks/" + uuid.NewString(), nil},
		{"stream", http.MethodPost, "/message:stream", sendBody(t, wireMsg(uuid.NewString(), "hello"), nil)},
	} {
		code, h, body := e.raw(c.method, c.path, tokenAlice, c.body, nil)
		if _, status, reason := restError(t, body); code != http.StatusServiceUnavailable || status != "UNAVAILABLE" ||
			reason != "UNAVAILABLE" || h.Get("Retry-After") != "5" {
			t.Errorf("%s: %d %s %s Retry-After %q, want 503 UNAVAILABLE UNAVAILABLE Retry-After 5: %s",
				c.what, code, status, reason, h.Get("Retry-After"), body)
		}
		secret(c.what, body)
	}
	r := e.rpc(tokenAlice, "SendMessage", map[string]any{"message": wireMsg(uuid.NewString(), "hello")}, nil)
	if r.Error == nil || r.Error.Code != -32603 || r.reason() != "UNAVAILABLE" {
		t.Errorf("JSON-RPC SendMessage: %+v, want -32603 UNAVAILABLE", r.Error)
	}
	if r.Error != nil {
		secret("JSON-RPC SendMessage", []byte(r.Error.Message))
	}
	st.down.Store(false)
	if code, _, body := e.raw(http.MethodPost, "/message:send", tokenAlice,
		sendBody(t, wireMsg(uuid.NewString(), "hello"), map[string]any{"returnImmediately": true}), nil); code != http.StatusOK {
		t.Fatalf("the store is back: %d %s", code, body)
	}
}

// A store closed under the server (a program embedding the bindings closed it before its HTTP
// server, or while requests were in flight) is the store going away, not a failure of the
// request: 503 UNAVAILABLE, not 500 INTERNAL, on a send and on a read.
func TestAClosedStoreIsAnswered503Unavailable(t *testing.T) {
	st := storetest.OpenSQLite(t)
	e := newEnvOn(t, st, nil)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what, method, path string
		body               []byte
	}{
		{"send", http.MethodPost, "/message:send", sendBody(t, wireMsg(uuid.NewString(), "hello"), nil)},
		{"get task", http.MethodGet, "/tasks/" + uuid.NewString(), nil},
	} {
		code, _, body := e.raw(c.method, c.path, tokenAlice, c.body, nil)
		if _, status, reason := restError(t, body); code != http.StatusServiceUnavailable || status != "UNAVAILABLE" || reason != "UNAVAILABLE" {
			t.Errorf("%s: %d %s %s, want 503 UNAVAILABLE UNAVAILABLE: %s", c.what, code, status, reason, body)
		}
	}
}
