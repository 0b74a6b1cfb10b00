package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// committedDoc is docs/a2a-source-conformance.md seen from this package's directory.
var committedDoc = filepath.Join("..", "..", "docs", "a2a-source-conformance.md")

func TestMatrixCheckPassesOnTheCommittedDocAndFailsWhenStale(t *testing.T) {
	ctx := context.Background()
	c := newCLI(t, nil)
	if code := c.run(ctx, "matrix", "--check", "--out", committedDoc); code != 0 {
		t.Fatalf("matrix --check on the committed doc = %d: %s", code, c.stderr.String())
	}

	stale := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(stale, []byte("# old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c = newCLI(t, nil)
	if code := c.run(ctx, "matrix", "--check", "--out", stale); code == 0 || !strings.Contains(c.stderr.String(), "stale") {
		t.Fatalf("matrix --check on a stale doc = %d, stderr %q; want non-zero naming it stale", code, c.stderr.String())
	}
	c = newCLI(t, nil)
	missing := filepath.Join(t.TempDir(), "none.md")
	if code := c.run(ctx, "matrix", "--check", "--out", missing); code == 0 || !strings.Contains(c.stderr.String(), "does not exist") {
		t.Fatalf("matrix --check on no doc = %d, stderr %q; want non-zero saying it does not exist", code, c.stderr.String())
	}
	c = newCLI(t, nil)
	if code := c.run(ctx, "matrix", "--out", stale); code != 0 {
		t.Fatalf("matrix = %d: %s", code, c.stderr.String())
	}
	got, _ := os.ReadFile(stale)
	want, _ := os.ReadFile(committedDoc)
	if string(got) != string(want) {
		t.Fatal("matrix wrote something other than the committed doc")
	}
}

// TestSourcesListsRegisteredAndPlannedSources: also, --json prints one object per source per line.
func TestSourcesListsRegisteredAndPlannedSources(t *testing.T) {
	ctx := context.Background()
	c := newCLI(t, nil)
	if code := c.run(ctx, "sources", "--json"); code != 0 {
		t.Fatalf("sources --json = %d: %s", code, c.stderr.String())
	}
	// One JSON object per source per line, as every reading command's --json prints lists.
	list := ndjson[struct {
		Name       string `json:"name"`
		Registered bool   `json:"registered"`
		Configured bool   `json:"configured"`
		Row        *struct {
			Status string `json:"status"`
		} `json:"row"`
	}](t, c.stdout.String())
	got := map[string]string{}
	for _, s := range list {
		if s.Row == nil {
			t.Fatalf("%s has no matrix row", s.Name)
		}
		got[s.Name] = s.Row.Status
		if s.Registered != (s.Row.Status == "built") {
			t.Errorf("%s: registered %v with row status %s", s.Name, s.Registered, s.Row.Status)
		}
	}
	want := map[string]string{"a2a": "binding", "email": "planned", "github": "planned", "slack": "built", "webhook": "built"}
	if len(got) != len(want) {
		t.Fatalf("sources = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("sources = %v, want %v", got, want)
		}
	}

	c = newCLI(t, nil)
	if code := c.run(ctx, "sources"); code != 0 || !strings.Contains(c.stdout.String(), "webhook") {
		t.Fatalf("sources = %d:\n%s%s", code, c.stdout.String(), c.stderr.String())
	}
}
