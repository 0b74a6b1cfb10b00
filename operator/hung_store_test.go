package operator_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// hungStore is a store whose reads hang until the caller's deadline, as a Postgres behind a
// network partition (or a failover that blackholes its address) does: pgx returns an error that
// wraps context.DeadlineExceeded when the context's deadline passes.
type hungStore struct{ store.Store }

func (h hungStore) GetTask(ctx context.Context, principal, id string) (store.Task, error) {
	<-ctx.Done()
	return store.Task{}, fmt.Errorf("get task %s: timeout: %w", id, ctx.Err())
}

func (h hungStore) CountWakes(ctx context.Context, st store.WakeState, upTo int) (int, error) {
	<-ctx.Done()
	return 0, fmt.Errorf("count %s wakes: timeout: %w", st, ctx.Err())
}

// TestAHungStoreIsCountedInStoreErrors: docs/operations.md says "store unreachable" on /readyz
// means "the database is down: a read failed; channels_store_errors_total rises", and to alert on
// rate(channels_store_errors_total[5m]) > 0. A store that does not answer at all (its reads run
// into readiness's and the scrape's own time bounds) must count as failed reads and scrapes.
func TestAHungStoreIsCountedInStoreErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hung := hungStore{Store: storetest.OpenSQLite(t)}
	m := operator.NewMetrics()
	st := m.Store(hung)
	m.WatchStore(hung)
	var ready atomic.Bool
	ready.Store(true)
	srv := &operator.Server{Store: st, StoreName: "sqlite", Metrics: m, Ready: &ready, Token: "op-token",
		Log: slog.New(slog.DiscardHandler)}
	mux := http.NewServeMux()
	srv.Mount(mux)
	ts := httptest.NewServer(mux)
	defer ts.Close()
	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer op-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	code, body := get("/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "store unreachable") {
		t.Fatalf("/readyz with a hung store = %d %s, want 503 store unreachable", code, body)
	}
	// A scrape's own failed read is counted while that scrape gathers: the next one shows it.
	get("/metrics")
	_, metrics := get("/metrics")
	if !strings.Contains(metrics, "\nchannels_store_up 0\n") {
		t.Fatalf("channels_store_up is not 0 with a hung store:\n%s", metrics)
	}
	for _, op := range []string{"read", "scrape"} {
		line := `channels_store_errors_total{operation="` + op + `"} 0` + "\n"
		if strings.Contains(metrics, line) {
			t.Errorf("the store did not answer (/readyz: store unreachable; channels_store_up 0), yet %s", strings.TrimSpace(line))
		}
	}
}
