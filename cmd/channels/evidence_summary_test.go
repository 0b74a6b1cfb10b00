package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/taskplane/store"
)

// TestEvidenceSummaryTakesSourceAndRefusesFiltersItDoesNotUse: --summary --source keeps that
// source; a filter the summary does not apply is a usage error naming it, not silently ignored.
func TestEvidenceSummaryTakesSourceAndRefusesFiltersItDoesNotUse(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "e.db")
	s, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		for _, src := range []string{"webhook", "slack"} {
			if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: src, Kind: "accepted", CreatedAt: time.Now().UTC()}); err != nil {
				return err
			}
		}
		return nil
	})
	s.Close()
	if err != nil {
		t.Fatal(err)
	}

	c := newCLI(t, nil)
	if code := c.run(context.Background(), "evidence", "--store", url, "--summary", "--source", "slack", "--json"); code != 0 {
		t.Fatalf("exit %d: %s", code, c.stderr.String())
	}
	var sum operator.Summary
	if err := json.Unmarshal([]byte(c.stdout.String()), &sum); err != nil {
		t.Fatal(err)
	}
	if len(sum.Sources) != 1 || sum.Sources[0].Source != "slack" || sum.Sources[0].Counts.Accepted != 1 {
		t.Errorf("--summary --source slack = %+v, want slack alone", sum.Sources)
	}

	for _, flag := range [][]string{{"--kind", "accepted"}, {"--principal", "alice"}, {"--task", "t1"}, {"--limit", "5"}} {
		c := newCLI(t, nil)
		code := c.run(context.Background(), append([]string{"evidence", "--store", url, "--summary"}, flag...)...)
		if want := flag[0] + " does not apply to --summary"; code != 2 || !strings.Contains(c.stderr.String(), want) {
			t.Errorf("--summary %v: exit %d, stderr %q; want 2 and %q", flag, code, c.stderr.String(), want)
		}
	}
}

// TestEvidenceRefusesAnUnknownKind: a mistyped --kind is a usage error naming the nearest kind,
// not an empty table.
func TestEvidenceRefusesAnUnknownKind(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "e.db")
	c := newCLI(t, nil)
	code := c.run(context.Background(), "evidence", "--store", url, "--kind", "wake_failed")
	if msg := c.stderr.String(); code != 2 || !strings.Contains(msg, `unknown evidence kind "wake_failed" (did you mean wake-failed?)`) ||
		!strings.Contains(msg, "delivery-resolved") {
		t.Errorf("exit %d, stderr %q; want 2 naming the nearest kind and the valid ones", code, msg)
	}
	c = newCLI(t, nil)
	if code := c.run(context.Background(), "evidence", "--store", url, "--kind", "wake-failed"); code != 0 {
		t.Errorf("--kind wake-failed: exit %d: %s", code, c.stderr.String())
	}
}

// TestAnEmptySummaryListsAreEmptyArrays: the summary of an empty store prints "sources": [] and
// "attention": [], not null, so a script can iterate them whatever the store holds.
func TestAnEmptySummaryListsAreEmptyArrays(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "e.db")
	c := newCLI(t, nil)
	if code := c.run(context.Background(), "evidence", "--store", url, "--summary", "--json"); code != 0 {
		t.Fatalf("exit %d: %s", code, c.stderr.String())
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal([]byte(c.stdout.String()), &got); err != nil {
		t.Fatalf("%v: %s", err, c.stdout.String())
	}
	for _, k := range []string{"sources", "attention"} {
		if string(got[k]) != "[]" {
			t.Errorf("%q: %s, want []", k, got[k])
		}
	}
}
