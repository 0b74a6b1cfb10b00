package operator

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// TestStoreGaugesAreLeftOutWhileTheStoreIsDown: once the store stops answering, a scrape says so
// (channels_store_up 0, a scrape error counted), serves the last store gauges only while they are
// younger than storeGaugesStale, and then leaves them out instead of repeating them as current.
func TestStoreGaugesAreLeftOutWhileTheStoreIsDown(t *testing.T) {
	st := storetest.OpenSQLite(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m := NewMetrics()
	m.reg.MustRegister(&storeCollector{r: st, m: m, now: func() time.Time { return now }})
	scrape := func() string {
		w := httptest.NewRecorder()
		m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		return w.Body.String()
	}
	check := func(when string, wantUp string, wantGauges bool) {
		t.Helper()
		out := scrape()
		if !strings.Contains(out, "\nchannels_store_up "+wantUp+"\n") {
			t.Errorf("%s: want channels_store_up %s in\n%s", when, wantUp, out)
		}
		if got := strings.Contains(out, "\nchannels_wake_queue_depth{"); got != wantGauges {
			t.Errorf("%s: store gauges served %v, want %v", when, got, wantGauges)
		}
	}
	check("store up", "1", true)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	now = now.Add(scrapeCache + time.Second)
	check("store down, last read 6 s ago", "0", true)
	if !strings.Contains(scrape(), `channels_store_errors_total{operation="scrape"} `) ||
		strings.Contains(scrape(), `channels_store_errors_total{operation="scrape"} 0`) {
		t.Errorf("a failed scrape read is not counted")
	}
	now = now.Add(storeGaugesStale)
	check("store down, last read 36 s ago", "0", false)
	now = now.Add(time.Hour)
	check("store down an hour", "0", false)
}
