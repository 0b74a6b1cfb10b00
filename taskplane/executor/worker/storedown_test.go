package worker_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/executor/worker"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// downStore is a store whose database is down while down is set: every transaction fails with
// err.
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

// A worker's call the store cannot serve (the database restarting) is answered 503
// store-unavailable with Retry-After, not 500: the worker retries it with its lease. The store's
// error, which names the database's host, user and database, is not shown.
func TestAStoreOutageIsAnswered503WithRetryAfter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, refused := pgconn.Connect(ctx, "postgres://secretuser@127.0.0.1:1/secretdb?connect_timeout=2")
	if refused == nil {
		t.Fatal("connected to a closed port")
	}
	st := &downStore{Store: storetest.OpenSQLite(t), err: refused}
	e := newEnv(t, st)
	e.accept(t, "bob", taskplane.SourceA2A, "m-1")
	id, lease := e.claim(t, tokenAll)
	st.down.Store(true)
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/worker/v1/tasks/"+id+"/complete", strings.NewReader(`{"response":"ok"}`))
	req.Header.Set("Authorization", "Bearer "+tokenAll)
	req.Header.Set(worker.LeaseHeader, lease)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "5" ||
		!strings.Contains(string(body), `"store-unavailable"`) {
		t.Fatalf("complete while the store is down: %d Retry-After %q %s, want 503 store-unavailable with Retry-After 5",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	for _, s := range []string{"secretuser", "secretdb", "127.0.0.1"} {
		if strings.Contains(string(body), s) {
			t.Errorf("the answer quotes the store's error (%q): %s", s, body)
		}
	}
	st.down.Store(false)
	if code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/complete", tokenAll, lease, map[string]any{"response": "ok"}); code != http.StatusOK {
		t.Fatalf("complete once the store is back: %d %v", code, body)
	}
}
