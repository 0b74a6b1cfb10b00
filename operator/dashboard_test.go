package operator_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// A source's card on the dashboard shows the window's figures beside the intake: deliveries
// delivered, failed and ambiguous in the last 24 hours, and rejections; the deliveries by state
// are labelled as what they are, every delivery whatever its age.
func TestTheDashboardShowsTheWindowsDeliveryOutcomesAndRejections(t *testing.T) {
	ctx := context.Background()
	st := storetest.OpenSQLite(t)
	now := time.Now().UTC()
	if err := st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for _, e := range []struct {
			kind, detail string
			n            int
		}{
			{delivery.EvidenceDelivered, "", 4}, {delivery.EvidenceFailed, "", 2}, {delivery.EvidenceAmbiguous, "", 1},
			{sources.EvidenceRejected, `{"count":3}`, 1},
		} {
			for range e.n {
				if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "webhook", Kind: e.kind,
					Detail: []byte(e.detail), CreatedAt: now}); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	srv := &operator.Server{Store: st, StoreName: "sqlite", Token: "op-token", Log: slog.New(slog.DiscardHandler),
		Configured: map[string][]string{"webhook": {"ci"}}}
	mux := http.NewServeMux()
	srv.Mount(mux)
	req := httptest.NewRequest(http.MethodGet, "/admin", nil)
	req.Header.Set("Authorization", "Bearer op-token")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, req)
	page := w.Body.String()
	if w.Code != http.StatusOK {
		t.Fatalf("/admin = %d: %.500s", w.Code, page)
	}
	card := page[strings.Index(page, `data-source="webhook"`):]
	card = card[:strings.Index(card, "</article>")]
	for label, want := range map[string]string{"delivered": "4", "delivery failed": "2", "ambiguous": "1", "rejected": "3"} {
		m := regexp.MustCompile(`<dt>` + regexp.QuoteMeta(label) + `</dt><dd>([^<]*)</dd>`).FindStringSubmatch(card)
		if m == nil || m[1] != want {
			t.Errorf("the webhook card's %q = %v, want %s in:\n%s", label, m, want, card)
		}
	}
	if !strings.Contains(card, "deliveries now (all time)") {
		t.Errorf("the deliveries by state are not labelled as all time:\n%s", card)
	}
}
