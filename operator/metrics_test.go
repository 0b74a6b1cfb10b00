package operator_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// scrape returns the samples /metrics serves, series (name with labels) → value.
func scrape(t *testing.T, m *operator.Metrics) map[string]float64 {
	t.Helper()
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	out := map[string]float64{}
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestAnAnchorMissIsCountedAsOneIntakeEvent: a reply that misses its anchor becomes a new task
// and leaves two evidence records (anchor-miss and accepted); channels_intake_events_total counts
// the event once, as accepted, and the anchor miss stays visible in the evidence counter.
func TestAnAnchorMissIsCountedAsOneIntakeEvent(t *testing.T) {
	ctx := context.Background()
	m := operator.NewMetrics()
	m.InitSource("slack")
	p := taskplane.New(m.Store(storetest.OpenSQLite(t)))
	if _, err := p.Accept(ctx, taskplane.Event{Principal: "alice", Source: "slack", Identity: "ev-1", ConversationKey: "c",
		ReplyTo: "a-message-we-never-sent", Message: taskplane.Message{ID: "m1", Role: taskplane.RoleUser,
			Parts: []taskplane.Part{taskplane.TextPart("x")}}}); err != nil {
		t.Fatal(err)
	}
	got := scrape(t, m)
	var events float64
	for series, v := range got {
		if strings.HasPrefix(series, "channels_intake_events_total{") {
			events += v
		}
	}
	if events != 1 || got[`channels_intake_events_total{disposition="accepted",source="slack"}`] != 1 {
		t.Errorf("one event: channels_intake_events_total adds up to %v, accepted %v; want 1 and 1",
			events, got[`channels_intake_events_total{disposition="accepted",source="slack"}`])
	}
	if v := got[`channels_evidence_records_total{kind="anchor-miss",source="slack"}`]; v != 1 {
		t.Errorf("channels_evidence_records_total{kind=anchor-miss} = %v, want 1", v)
	}
}
