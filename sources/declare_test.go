package sources_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	matrix "github.com/channels-dev/channels/conformance-matrix"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// declaredRuns numbers the runs of the test below: the registry is global.
var declaredRuns atomic.Int32

// A source kept outside this module declares its own matrix row (sources.Declare) and is then
// built, sunk and read like the sources the embedded matrix declares; a row that is not valid,
// that names an embedded source or one declared before, is refused.
func TestASourceOutsideTheModuleDeclaresItsOwnRow(t *testing.T) {
	m, err := matrix.Default()
	if err != nil {
		t.Fatal(err)
	}
	row, ok := m.Row("webhook")
	if !ok {
		t.Fatal("no webhook row")
	}
	name := fmt.Sprintf("outside-the-module-%d", declaredRuns.Add(1)) // -count=N declares anew
	if _, err := sources.Declaration(name); err == nil {
		t.Fatal("an undeclared source has a declaration")
	}
	if err := sources.Declare(row); err == nil || !strings.Contains(err.Error(), "embedded") {
		t.Fatalf("declaring an embedded source again: %v", err)
	}
	invalid := row
	invalid.Source = name + "-invalid"
	invalid.Continuation.Method = "telepathy"
	if err := sources.Declare(invalid); err == nil {
		t.Fatal("an invalid row was declared")
	}

	row.Source = name
	if err := sources.Declare(row); err != nil {
		t.Fatal(err)
	}
	if err := sources.Declare(row); err == nil {
		t.Fatal("a row declared twice")
	}
	if got, err := sources.Declaration(name); err != nil || got.Source != name {
		t.Fatalf("Declaration: %+v %v", got, err)
	}
	sources.Register(name, func(cfg sources.Config) (sources.Source, error) { return stoppingSource{name: name}, nil })
	if _, err := sources.New(name, sources.Config{Instance: "one", Principal: "alice"}); err != nil {
		t.Fatalf("New of a declared source: %v", err)
	}
	plane := taskplane.New(storetest.OpenSQLite(t))
	if _, err := sources.NewSink(plane, name); err != nil {
		t.Fatalf("a sink of a declared source: %v", err)
	}
	// Its row declares reply-anchor continuation (webhook's): an executor may ask its people a
	// question, as for an embedded source of that row.
	if err := plane.QuestionAllowed(name); err != nil {
		t.Fatalf("a question on a declared reply-anchor source: %v", err)
	}
	listed := false
	for _, in := range sources.List(m, nil) {
		listed = listed || (in.Name == name && in.Row != nil && in.Row.Source == name && in.Registered)
	}
	if !listed {
		t.Fatal("the declared source is not listed with its row")
	}
}
