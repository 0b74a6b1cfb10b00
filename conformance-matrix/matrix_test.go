package matrix_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	matrix "github.com/channels-dev/channels/conformance-matrix"
)

func TestEmbeddedMatrixIsValidAndHasTheFiveRows(t *testing.T) {
	m, err := matrix.Default()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a2a", "email", "github", "slack", "webhook"}
	if got := m.Names(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("rows = %v, want %v", got, want)
	}
}

// validRow is a complete row; tests remove one field at a time.
const validRow = `
  - source: x
    status: built
    summary: s
    capability: {work_producing: [a], non_work: [], follow_on: [], audit_pending: []}
    event_identity: [id]
    native_object_identity: [id]
    conversation_key: [k]
    checkpoint: {position: none, commit_point: none}
    ack: {operation: 2xx, point: after accept}
    continuation: {method: none, relation: none}
    response: {operation: none}
    delivery_recovery: idempotent
    receipt: none
    terminal_outcomes: {completed: a, failed: b, canceled: c, rejected: d}
    tests: [sources/x.TestX]
`

func TestEmptyRequiredFieldFailsValidation(t *testing.T) {
	if _, err := matrix.Parse([]byte("version: 1\nsources:" + validRow)); err != nil {
		t.Fatalf("the complete row must parse: %v", err)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"empty string", "summary: s", "summary: ''", "summary"},
		{"absent string", "    receipt: none\n", "", "receipt"},
		{"empty identity", "event_identity: [id]", "event_identity: []", "event_identity"},
		{"unstated non-work list", "non_work: [], ", "", "capability.non_work"},
		{"empty terminal outcome", "canceled: c,", "canceled: '',", "terminal_outcomes.canceled"},
		{"built row without tests", "tests: [sources/x.TestX]", "tests: []", "tests"},
		{"unknown continuation", "method: none", "method: thread", "continuation.method"},
		{"explicit taskId on a plugin", "method: none", "method: explicit-task-id", "only for the A2A bindings"},
		{"unknown recovery", "delivery_recovery: idempotent", "delivery_recovery: maybe", "delivery_recovery"},
		{"bad test entry", "sources/x.TestX", "sources/x", "package-path.TestName"},
		{"unknown status", "status: built", "status: done", "status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := strings.Replace(validRow, tc.from, tc.to, 1)
			if row == validRow {
				t.Fatalf("fixture: %q not found", tc.from)
			}
			_, err := matrix.Parse([]byte("version: 1\nsources:" + row))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestPlannedRowMayListNoTestsButMustStateThem(t *testing.T) {
	planned := strings.Replace(strings.Replace(validRow, "status: built", "status: planned", 1), "tests: [sources/x.TestX]", "tests: []", 1)
	if _, err := matrix.Parse([]byte("version: 1\nsources:" + planned)); err != nil {
		t.Fatalf("planned row with tests: [] = %v", err)
	}
	unstated := strings.Replace(planned, "    tests: []\n", "", 1)
	if _, err := matrix.Parse([]byte("version: 1\nsources:" + unstated)); err == nil {
		t.Fatal("a planned row that does not state tests must fail")
	}
}

func TestUnknownFieldAndDuplicateRowFail(t *testing.T) {
	if _, err := matrix.Parse([]byte("version: 1\nsources:" + strings.Replace(validRow, "receipt: none", "receipt: none\n    recipt: typo", 1))); err == nil {
		t.Error("an unknown field must fail")
	}
	if _, err := matrix.Parse([]byte("version: 1\nsources:" + validRow + validRow)); err == nil || !strings.Contains(err.Error(), "two rows") {
		t.Errorf("a duplicate row: %v", err)
	}
}

// TestDocIsCurrent is the drift test of the generated document: the committed
// docs/a2a-source-conformance.md must be exactly what the matrix renders.
func TestDocIsCurrent(t *testing.T) {
	m := matrix.MustDefault()
	if err := matrix.Check(m, filepath.Join("..", matrix.DocPath)); err != nil {
		t.Fatalf("%v (run `go run ./cmd/channels matrix` from the module root)", err)
	}
}

func TestCheckReportsStaleAndMissing(t *testing.T) {
	m := matrix.MustDefault()
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := matrix.Check(m, path); !errors.Is(err, matrix.ErrMissing) {
		t.Fatalf("missing doc: %v, want ErrMissing", err)
	}
	if err := matrix.Write(m, path); err != nil {
		t.Fatal(err)
	}
	if err := matrix.Check(m, path); err != nil {
		t.Fatalf("fresh doc: %v", err)
	}
	if err := os.WriteFile(path, append(matrix.Render(m), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := matrix.Check(m, path); !errors.Is(err, matrix.ErrStale) {
		t.Fatalf("edited doc: %v, want ErrStale", err)
	}
}
