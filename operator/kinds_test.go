package operator_test

import (
	"context"
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

// The admin API refuses an evidence kind Channels never writes with 400 naming the nearest kind,
// rather than answering an empty list; a known kind is listed.
func TestTheEvidenceAPIRefusesAnUnknownKind(t *testing.T) {
	st := storetest.OpenSQLite(t)
	if err := st.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "webhook", Kind: "wake-failed", CreatedAt: time.Now().UTC()})
	}); err != nil {
		t.Fatal(err)
	}
	var ready atomic.Bool
	ready.Store(true)
	srv := &operator.Server{Store: st, StoreName: "sqlite", Ready: &ready, Token: "op-token", Log: slog.New(slog.DiscardHandler)}
	mux := http.NewServeMux()
	srv.Mount(mux)
	get := func(query string) (int, string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/admin/api/evidence?"+query, nil)
		req.Header.Set("Authorization", "Bearer op-token")
		mux.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	for _, q := range []string{"kind=nope", "kind=wake_failed"} {
		code, body := get(q)
		if code != http.StatusBadRequest || !strings.Contains(body, "unknown evidence kind") || !strings.Contains(body, "delivery-resolved") {
			t.Errorf("%s: %d %s, want 400 naming the valid kinds", q, code, body)
		}
	}
	if _, body := get("kind=wake_failed"); !strings.Contains(body, "did you mean wake-failed?") {
		t.Errorf("kind=wake_failed: %s, want the nearest kind", body)
	}
	if code, body := get("kind=wake-failed"); code != http.StatusOK || !strings.Contains(body, `"kind":"wake-failed"`) {
		t.Errorf("kind=wake-failed: %d %s", code, body)
	}
}
