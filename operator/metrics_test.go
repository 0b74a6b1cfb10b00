package operator_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
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

// TestDeliverySeriesDoNotGrowWithLanes: channels_deliveries has one series per source and state,
// whatever the number of lanes (one per conversation: as many as the people a bot answers), and
// sums the lanes' deliveries.
func TestDeliverySeriesDoNotGrowWithLanes(t *testing.T) {
	ctx := context.Background()
	s := storetest.OpenSQLite(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for i := range 300 {
			state := store.DeliveryDelivered
			if i%100 == 0 {
				state = store.DeliveryAmbiguous
			}
			if _, _, err := tx.InsertDelivery(ctx, store.Delivery{Principal: "alice", ID: fmt.Sprintf("d%d", i), TaskID: fmt.Sprintf("t%d", i),
				Source: "slack", Operation: "reply", Recovery: "lookup", Lane: fmt.Sprintf("slack:T1:C%d", i),
				PayloadDigest: "x", State: state, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	m := operator.NewMetrics()
	m.WatchStore(s)
	got := map[string]float64{}
	for k, v := range scrape(t, m) {
		if strings.HasPrefix(k, "channels_deliveries{") {
			got[k] = v
		}
	}
	if len(got) != len(operator.DeliveryStates) {
		t.Errorf("%d channels_deliveries series for 300 lanes of one source, want %d (one per state)", len(got), len(operator.DeliveryStates))
	}
	for k, want := range map[string]float64{
		`channels_deliveries{source="slack",state="delivered"}`: 297,
		`channels_deliveries{source="slack",state="ambiguous"}`: 3,
		`channels_deliveries{source="slack",state="failed"}`:    0,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
}

// A send that settles a finished task is an event taken in: channels_intake_events_total counts
// it once, as settled, under the source it came in on (a2a, though the task came from a webhook),
// and its acceptance transaction is timed; its resend is a duplicate of it. A settlement through
// the worker API (Plane.Settle) is no event taken in: it is evidence of the task's source only.
func TestASettlingSendIsCountedAsOneA2AIntakeEvent(t *testing.T) {
	ctx := context.Background()
	m := operator.NewMetrics()
	m.InitSource(taskplane.SourceA2A)
	m.InitSource("webhook")
	p := taskplane.New(m.Store(storetest.OpenSQLite(t)))
	msg := func(id string) taskplane.Message {
		return taskplane.Message{ID: id, Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("x")}}
	}
	acc, err := p.Accept(ctx, taskplane.Event{Principal: "alice", Source: "webhook", Identity: "ev-1", ConversationKey: "c",
		Message: msg("m1")})
	if err != nil {
		t.Fatal(err)
	}
	g, err := p.ClaimTurn(ctx, taskplane.ClaimRequest{Owner: "test", Lease: time.Minute})
	if err != nil || g == nil {
		t.Fatalf("claim: %v %v", g, err)
	}
	if err := p.NewTurn(g).Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.EndTurn(ctx, g, taskplane.TurnEnd{}); err != nil {
		t.Fatal(err)
	}
	before := scrape(t, m)

	settle := taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "settle-1", TaskID: acc.Task.ID,
		Message: msg("settle-1"), Settlement: &taskplane.Settlement{Outcome: "accepted"}}
	for _, want := range []taskplane.Outcome{taskplane.SettledOutcome, taskplane.Duplicate} {
		if got, err := p.Accept(ctx, settle); err != nil || got.Outcome != want {
			t.Fatalf("settling send: %v %v, want %s", got.Outcome, err, want)
		}
	}
	if _, err := p.Settle(ctx, "alice", acc.Task.ID, taskplane.Settlement{Outcome: "partial"}); err != nil {
		t.Fatal(err)
	}

	got := scrape(t, m)
	for series, want := range map[string]float64{
		`channels_intake_events_total{disposition="settled",source="a2a"}`:      1,
		`channels_intake_events_total{disposition="duplicate",source="a2a"}`:    1,
		`channels_intake_events_total{disposition="settled",source="webhook"}`:  0,
		`channels_accept_duration_seconds_count{source="a2a"}`:                  2,
		`channels_evidence_records_total{kind="settled",source="a2a"}`:          1,
		`channels_evidence_records_total{kind="settled",source="webhook"}`:      1,
		`channels_accept_duration_seconds_count{source="webhook"}`:              before[`channels_accept_duration_seconds_count{source="webhook"}`],
		`channels_intake_events_total{disposition="accepted",source="webhook"}`: 1,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
	// The summary counts settlements per source as the evidence does.
	sum, err := operator.Summarize(ctx, p.Store(), operator.SummaryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	settled := map[string]int64{}
	for _, s := range sum.Sources {
		settled[s.Source] = s.Counts.Settled
	}
	if settled["a2a"] != 1 || settled["webhook"] != 1 {
		t.Errorf("summary settled counts %v, want a2a 1 and webhook 1", settled)
	}
}

type plainExec struct{}

func (plainExec) Execute(context.Context, *taskplane.Turn) error { return nil }

type inlineExec struct{ plainExec }

func (inlineExec) Inline() taskplane.InlineFunc {
	return func(*taskplane.Task) ([]taskplane.Change, bool) {
		return []taskplane.Change{taskplane.SetStatus{State: taskplane.StateCompleted}}, true
	}
}

// TestTheTimedExecutorOffersAnInlineTurnOnlyWhenItsExecutorHasOne: the wrapper that times turns
// passes an executor's inline first turn on, and has none for an executor without one (a
// Dispatcher then runs every turn through Execute). Running the function records nothing: a turn
// counts, timed as a turn of that executor, when the plane reports it kept (committed settled).
func TestTheTimedExecutorOffersAnInlineTurnOnlyWhenItsExecutorHasOne(t *testing.T) {
	m := operator.NewMetrics()
	if ie, ok := m.Executor(plainExec{}, "plain").(taskplane.InlineExecutor); ok && ie.Inline() != nil {
		t.Fatal("an executor without an inline turn was given one")
	}
	ex := m.Executor(inlineExec{}, "echo")
	ie, ok := ex.(taskplane.InlineExecutor)
	if !ok || ie.Inline() == nil {
		t.Fatal("the inline turn was not passed on")
	}
	if changes, ok := ie.Inline()(&taskplane.Task{}); !ok || len(changes) != 1 {
		t.Fatalf("inline turn %v %v", changes, ok)
	}
	const count = `channels_executor_turn_duration_seconds_count{executor="echo",outcome="ok"}`
	if n := scrape(t, m)[count]; n != 0 {
		t.Fatalf("timed inline turns %v before any was kept, want 0", n)
	}
	o, ok := ex.(taskplane.InlineObserver)
	if !ok {
		t.Fatal("the wrapper does not hear of kept inline turns")
	}
	o.InlineKept(time.Millisecond)
	if n := scrape(t, m)[count]; n != 1 {
		t.Fatalf("timed inline turns %v, want 1", n)
	}
}
