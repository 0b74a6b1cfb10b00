package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// timeoutSender's provider calls all end in an unknown outcome.
type timeoutSender struct{}

func (timeoutSender) Send(context.Context, delivery.Delivery) (delivery.Receipt, error) {
	return delivery.Receipt{}, delivery.Indeterminate(errors.New("i/o timeout"))
}

// ambiguousDelivery leaves one ambiguous delivery (source "email", recovery class ambiguous) in
// the SQLite store at url, and closes the store.
func ambiguousDelivery(t *testing.T, url string) delivery.Record {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	eng := delivery.New(st, delivery.Routes{"email": {Sender: timeoutSender{}, Recovery: delivery.Ambiguous}},
		delivery.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	defer eng.Close()
	rec, err := eng.Deliver(ctx, delivery.Request{Principal: "alice", TaskID: "task-1", Source: "email",
		Operation: delivery.OpReply, State: taskplane.StateCompleted,
		Message: taskplane.Message{ID: "m", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("hi")}}})
	if err != nil || rec.State != delivery.StateAmbiguous {
		t.Fatalf("setup: %+v %v", rec, err)
	}
	return rec
}

func TestDeliveriesListAndResolveAnAmbiguousDelivery(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "d.db")
	rec := ambiguousDelivery(t, url)
	ctx := context.Background()

	c := newCLI(t, map[string]string{"USER": "ops"})
	if code := c.run(ctx, "deliveries", "list", "--store", url, "--state", "ambiguous", "--json"); code != 0 {
		t.Fatalf("list: exit %d: %s", code, c.stderr.String())
	}
	var listed delivery.Record
	if err := json.Unmarshal([]byte(c.stdout.String()), &listed); err != nil || listed.ID != rec.ID || listed.State != delivery.StateAmbiguous {
		t.Fatalf("list --json = %q (%v)", c.stdout.String(), err)
	}

	c = newCLI(t, map[string]string{"USER": "ops"})
	if code := c.run(ctx, "deliveries", "list", "--store", url, "--source", "email"); code != 0 {
		t.Fatalf("list: exit %d: %s", code, c.stderr.String())
	}
	if out := c.stdout.String(); !strings.Contains(out, rec.ID) || !strings.Contains(out, "ambiguous") || !strings.HasPrefix(out, "ID") {
		t.Errorf("list table:\n%s", out)
	}

	c = newCLI(t, map[string]string{"USER": "ops"})
	if code := c.run(ctx, "deliveries", "resolve", rec.ID, "--store", url, "--abandon", "--note", "customer asked to drop it"); code != 0 {
		t.Fatalf("resolve: exit %d: %s", code, c.stderr.String())
	}
	if out := c.stdout.String(); !strings.Contains(out, "failed") {
		t.Errorf("resolve printed %q", out)
	}

	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.GetDelivery(ctx, "alice", rec.ID)
	if err != nil || got.State != store.DeliveryFailed {
		t.Fatalf("after resolve: %+v %v", got, err)
	}
	ev, err := st.ListEvidence(ctx, store.EvidenceFilter{Kind: delivery.EvidenceResolved, Source: "email"})
	if err != nil || len(ev) != 1 {
		t.Fatalf("resolved evidence: %v %v", ev, err)
	}
	var detail map[string]any
	_ = json.Unmarshal(ev[0].Detail, &detail)
	if detail["by"] != "ops" || detail["note"] != "customer asked to drop it" || detail["from"] != "ambiguous" {
		t.Errorf("evidence detail %v", detail)
	}
}

func TestDeliveriesResolveNeedsExactlyOneResolution(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "d.db")
	for _, args := range [][]string{
		{"deliveries", "resolve", "dlv_x", "--store", url},
		{"deliveries", "resolve", "dlv_x", "--store", url, "--retry", "--abandon"},
		{"deliveries", "list", "--store", url, "--state", "lost"},
		{"deliveries", "list", "--store", url, "--limit", "-1"}, // as tasks and evidence refuse it
	} {
		c := newCLI(t, nil)
		if code := c.run(context.Background(), args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", args, code)
		}
	}
	c := newCLI(t, nil)
	if code := c.run(context.Background(), "deliveries", "resolve", "dlv_missing", "--store", url, "--retry"); code != 1 ||
		!strings.Contains(c.stderr.String(), "not found") {
		t.Errorf("resolve of a missing delivery: exit %d, %s", code, c.stderr.String())
	}
}

func TestBenchDeliveriesPrintsOneJSONLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		keys []string
	}{
		{[]string{"--deliveries", "100", "--concurrency", "8"}, []string{"deliveries_per_sec", "p50_ms", "p99_ms"}},
		{[]string{"--deliveries", "12", "--lanes", "3", "--lane-interval", "50ms"}, []string{"deliveries_per_sec", "steady_per_sec", "expected_per_sec", "min_lane_gap_ms"}},
	} {
		c := newCLI(t, nil)
		if code := c.run(context.Background(), append([]string{"bench", "deliveries"}, tc.args...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, c.stderr.String())
		}
		out := strings.TrimSpace(c.stdout.String())
		var r map[string]any
		if err := json.Unmarshal([]byte(out), &r); err != nil || strings.Contains(out, "\n") {
			t.Fatalf("%v: want one JSON line, got %q (%v)", tc.args, out, err)
		}
		for _, k := range tc.keys {
			if _, ok := r[k]; !ok {
				t.Errorf("%v: missing %s in %s", tc.args, k, out)
			}
		}
		if r["provider_calls"] != r["deliveries"] {
			t.Errorf("%v: %v provider calls for %v deliveries", tc.args, r["provider_calls"], r["deliveries"])
		}
		// No lane ever went faster than its interval.
		if gap, ok := r["min_lane_gap_ms"].(float64); ok && gap < 50 {
			t.Errorf("min lane gap %vms < 50ms", gap)
		}
	}
}

// A delivery left in sending by an engine that died mid-send is listed by `evidence --summary`
// as stuck in sending, with a resolve command; that command works once the lease has run out,
// and is refused (an engine is sending it) while the lease is live.
func TestTheResolveCommandTheSummaryPrintsForADeliveryStuckInSendingWorks(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "d.db")
	rec := ambiguousDelivery(t, url)
	ctx := context.Background()
	lease := func(until time.Time) {
		t.Helper()
		st, err := store.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			d, err := tx.GetDelivery(ctx, "alice", rec.ID)
			if err != nil {
				return err
			}
			d.State, d.LeaseOwner, d.LeaseUntil = store.DeliverySending, "dead-engine", until
			return tx.UpdateDelivery(ctx, d)
		}); err != nil {
			t.Fatal(err)
		}
	}

	lease(time.Now().Add(time.Hour))
	c := newCLI(t, nil)
	if code := c.run(ctx, "deliveries", "resolve", rec.ID, "--principal", "alice", "--retry", "--store", url); code != 1 ||
		!strings.Contains(c.stderr.String(), "engine dead-engine is sending it") {
		t.Errorf("resolve under a live lease: exit %d, %s", code, c.stderr.String())
	}

	lease(time.Now().Add(-10 * time.Minute))
	c = newCLI(t, nil)
	if code := c.run(ctx, "evidence", "--summary", "--store", url, "--json"); code != 0 {
		t.Fatalf("summary: exit %d: %s", code, c.stderr.String())
	}
	var sum operator.Summary
	if err := json.Unmarshal([]byte(c.stdout.String()), &sum); err != nil || len(sum.Attention) != 1 || sum.Attention[0].Why != "stuck in sending" {
		t.Fatalf("summary %s (%v)", c.stdout.String(), err)
	}
	const choices = " --delivered PROVIDER_ID | --retry | --abandon"
	printed, ok := strings.CutSuffix(sum.Attention[0].Resolve, choices)
	if !ok {
		t.Fatalf("resolve command %q does not offer%s", sum.Attention[0].Resolve, choices)
	}
	args := append(strings.Fields(strings.TrimPrefix(printed, "channels ")), "--retry", "--store", url, "--json")
	c = newCLI(t, map[string]string{"USER": "ops"})
	if code := c.run(ctx, args...); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, c.stderr.String())
	}
	var got delivery.Record
	if err := json.Unmarshal([]byte(c.stdout.String()), &got); err != nil || got.State != delivery.StatePrepared || got.Attempts != 0 {
		t.Errorf("after --retry: %s (%v)", c.stdout.String(), err)
	}
}

// TestResolvingADeliveryAgainRecordsNothing: the same resolution run twice is one decision: the
// second changes nothing, writes no evidence, says "already <state>" and exits 0. Another
// resolution of an abandoned delivery (a retry) is a new decision.
func TestResolvingADeliveryAgainRecordsNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		state string
	}{
		{"abandon", []string{"--abandon"}, "failed"},
		{"delivered", []string{"--delivered", "msg-42"}, "delivered"},
		{"retry", []string{"--retry"}, "prepared"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := "sqlite://" + filepath.Join(t.TempDir(), "d.db")
			rec := ambiguousDelivery(t, url)
			resolve := func(flags ...string) string {
				t.Helper()
				c := newCLI(t, map[string]string{"USER": "ops"})
				if code := c.run(context.Background(), append([]string{"deliveries", "resolve", rec.ID, "--store", url}, flags...)...); code != 0 {
					t.Fatalf("resolve %v: exit %d: %s", flags, code, c.stderr.String())
				}
				return c.stdout.String()
			}
			resolved := func() int {
				t.Helper()
				st, err := store.Open(context.Background(), url)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				ev, err := st.ListEvidence(context.Background(), store.EvidenceFilter{Kind: delivery.EvidenceResolved})
				if err != nil {
					t.Fatal(err)
				}
				return len(ev)
			}
			if out := resolve(tc.flags...); !strings.HasSuffix(out, ": "+tc.state+"\n") {
				t.Errorf("first resolve printed %q", out)
			}
			if out := resolve(tc.flags...); !strings.HasSuffix(out, ": already "+tc.state+"\n") {
				t.Errorf("second resolve printed %q, want already %s", out, tc.state)
			}
			if n := resolved(); n != 1 {
				t.Errorf("%d delivery-resolved records after resolving twice, want 1", n)
			}
			if tc.name == "abandon" {
				if out := resolve("--retry"); !strings.HasSuffix(out, ": prepared\n") {
					t.Errorf("retry after abandon printed %q", out)
				}
				if n := resolved(); n != 2 {
					t.Errorf("%d delivery-resolved records after abandon and retry, want 2", n)
				}
			}
		})
	}
}
