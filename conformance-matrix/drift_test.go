package matrix_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	matrix "github.com/channels-dev/channels/conformance-matrix"
	"github.com/channels-dev/channels/sources"
	_ "github.com/channels-dev/channels/sources/all"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// The drift tests: the registered sources (sources/all) and the matrix rows must agree.

func TestEveryRegisteredSourceHasABuiltRow(t *testing.T) {
	m := matrix.MustDefault()
	names := sources.Names()
	if len(names) == 0 {
		t.Fatal("sources/all registers no source")
	}
	for _, name := range names {
		row, ok := m.Row(name)
		if !ok {
			t.Errorf("registered source %q has no row in matrix.yaml", name)
			continue
		}
		if row.Status != matrix.Built {
			t.Errorf("registered source %q: row status %q, want %q", name, row.Status, matrix.Built)
		}
	}
}

func TestEveryRowHasASourceOrSaysWhyNot(t *testing.T) {
	registered := sources.Names()
	for _, row := range matrix.MustDefault().Sources {
		isRegistered := slices.Contains(registered, row.Source)
		switch row.Status {
		case matrix.Built:
			if !isRegistered {
				t.Errorf("row %q says built, but no registered source has that name (missing from sources/all?)", row.Source)
			}
		case matrix.Planned:
			if isRegistered {
				t.Errorf("row %q says planned, but a source is registered: mark it built", row.Source)
			}
		case matrix.Binding:
			if row.Source != taskplane.SourceA2A || isRegistered {
				t.Errorf("row %q says binding: only the A2A row (%q) is intake through the bindings, and it is no plugin", row.Source, taskplane.SourceA2A)
			}
		}
	}
}

func TestEveryRowStatesEveryRequiredField(t *testing.T) {
	for _, row := range matrix.MustDefault().Sources {
		if err := row.Validate(); err != nil {
			t.Error(err)
		}
	}
}

// TestRowTestsExist: every test a row names is a test function in that package.
func TestRowTestsExist(t *testing.T) {
	for _, row := range matrix.MustDefault().Sources {
		for _, entry := range row.Tests.Items {
			dir, name, err := matrix.SplitTest(entry)
			if err != nil {
				t.Error(err)
				continue
			}
			files, _ := filepath.Glob(filepath.Join("..", dir, "*_test.go"))
			re := regexp.MustCompile(`(?m)^func ` + regexp.QuoteMeta(name) + `\(t \*testing\.T\)`)
			found := false
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				found = found || re.Match(b)
			}
			if !found {
				t.Errorf("row %s names %s, but %s has no such test", row.Source, entry, dir)
			}
		}
	}
}

// TestSourceWithoutContinuationCannotRecordAnAnchor: a source whose row declares no reply-anchor
// continuation is refused when it tries to record an anchor, through the Sink and through the
// transactional form the delivery engine uses, and nothing is stored.
func TestSourceWithoutContinuationCannotRecordAnAnchor(t *testing.T) {
	ctx := context.Background()
	plane := taskplane.New(storetest.OpenSQLite(t))
	none, err := matrix.Parse([]byte(`version: 1
sources:
  - source: pager
    status: built
    summary: a provider without any reply relation
    capability: {work_producing: [page], non_work: [], follow_on: [], audit_pending: []}
    event_identity: [id]
    native_object_identity: [id]
    conversation_key: [service]
    checkpoint: {position: none, commit_point: none}
    ack: {operation: 2xx, point: after the Accept transaction commits}
    continuation: {method: none, relation: no per-message reply relation}
    response: {operation: none}
    delivery_recovery: idempotent
    receipt: none
    terminal_outcomes: {completed: none, failed: none, canceled: none, rejected: none}
    tests: [sources/pager.TestPager]
`))
	if err != nil {
		t.Fatal(err)
	}
	row, _ := none.Row("pager")
	sink, err := sources.NewSink(plane, "pager", sources.WithDeclaration(row))
	if err != nil {
		t.Fatal(err)
	}
	acc, err := sink.Accept(ctx, sources.Event{Principal: "alice", Identity: "p1", ConversationKey: "db",
		Message: taskplane.Message{ID: "p1", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("disk full")}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plane.Apply(ctx, "alice", acc.Task.ID, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateInputRequired,
		Message: &taskplane.Message{ID: "q", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("which disk?")}}}); err != nil {
		t.Fatal(err)
	}
	if err := sink.RecordAnchor(ctx, "alice", "page-reply-1", acc.Task.ID); !errors.Is(err, taskplane.ErrContinuationNotAllowed) {
		t.Fatalf("Sink.RecordAnchor = %v, want ErrContinuationNotAllowed", err)
	}
	// The matrix's own rows: a2a continues by explicit taskId only, never by an anchor.
	err = plane.Store().Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return sources.RecordAnchorTx(ctx, tx, "alice", taskplane.SourceA2A, "a2a-msg-1", acc.Task.ID, 0, time.Now())
	})
	if !errors.Is(err, taskplane.ErrContinuationNotAllowed) {
		t.Fatalf("RecordAnchorTx for a2a = %v, want ErrContinuationNotAllowed", err)
	}
	for _, a := range []struct{ source, id string }{{"pager", "page-reply-1"}, {taskplane.SourceA2A, "a2a-msg-1"}} {
		if _, err := plane.Store().GetAnchor(ctx, "alice", a.source, a.id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("anchor %s/%s: %v, want none stored", a.source, a.id, err)
		}
	}
	// And a reply naming that message is new work in the same context.
	reply, err := sink.Accept(ctx, sources.Event{Principal: "alice", Identity: "p2", ConversationKey: "db", ReplyTo: "page-reply-1",
		Message: taskplane.Message{ID: "p2", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("sda")}}})
	if err != nil {
		t.Fatal(err)
	}
	if reply.Outcome != taskplane.Created || reply.Task.ID == acc.Task.ID || reply.ContextID != acc.ContextID {
		t.Fatalf("reply: %+v, want a new task in context %s", reply, acc.ContextID)
	}
	// Every registered source that declares no reply-anchor continuation is refused the same way.
	for _, name := range sources.Names() {
		row, _ := matrix.MustDefault().Row(name)
		s, err := sources.NewSink(plane, name)
		if err != nil {
			t.Fatal(err)
		}
		err = s.RecordAnchor(ctx, "alice", "x-"+name, acc.Task.ID)
		if refused := errors.Is(err, taskplane.ErrContinuationNotAllowed); refused != (row.Continuation.Method != matrix.ReplyAnchor) {
			t.Errorf("source %s (continuation %s): RecordAnchor = %v", name, row.Continuation.Method, err)
		}
	}
}

func TestRegisterPanicsOnADuplicateName(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "twice") {
			t.Fatalf("recover() = %v, want a panic about registering twice", r)
		}
	}()
	sources.Register(sources.Names()[0], func(sources.Config) (sources.Source, error) { return nil, nil })
}
