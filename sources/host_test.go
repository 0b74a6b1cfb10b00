package sources_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// registerOnce keeps -count=N from registering a name twice (Register panics).
var registerOnce struct{ email, github sync.Once }

// stoppingSource's Run returns err at once; it has no HealthChecker.
type stoppingSource struct {
	name string
	err  error
}

func (s stoppingSource) Name() string { return s.name }
func (s stoppingSource) Run(ctx context.Context, _ *sources.Sink) error {
	if s.err != nil {
		return s.err
	}
	<-ctx.Done()
	return nil
}

// A source that stops with an error while the server runs (no HealthChecker to say so) is
// reported unhealthy from then on, with its error, not only when the server stops.
func TestASourceThatStopsIsReportedUnhealthy(t *testing.T) {
	registerOnce.email.Do(func() {
		sources.Register("email", func(sources.Config) (sources.Source, error) {
			return stoppingSource{name: "email", err: errors.New("provider connection refused")}, nil
		})
	})
	h, err := sources.NewHost(taskplane.New(storetest.OpenSQLite(t)), nil,
		[]sources.Instance{{Source: "email", Config: sources.Config{Instance: "box", Principal: "alice"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := h.Health(ctx); err != nil {
		t.Fatalf("health before the start: %v", err)
	}
	h.Start(ctx)
	for deadline := time.Now().Add(5 * time.Second); h.Health(ctx) == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stopped source was never reported unhealthy")
		}
	}
	hs := h.Healths(ctx)
	if len(hs) != 1 || hs[0].Err == nil || !hs[0].Checks || !strings.Contains(hs[0].Err.Error(), "provider connection refused") {
		t.Fatalf("Healths = %+v", hs)
	}
	cancel()
	if err := h.Wait(); err == nil || !strings.Contains(err.Error(), "email instance box") {
		t.Fatalf("Wait = %v", err)
	}
}

// A source whose Name is not the name it was registered under is refused when the host is built
// (it ran against no sink and crashed the process).
func TestASourceMustBeNamedAsItIsRegistered(t *testing.T) {
	registerOnce.github.Do(func() {
		sources.Register("github", func(sources.Config) (sources.Source, error) { return stoppingSource{name: "webhook"}, nil })
	})
	_, err := sources.NewHost(taskplane.New(storetest.OpenSQLite(t)), nil,
		[]sources.Instance{{Source: "github", Config: sources.Config{Instance: "org", Principal: "alice"}}})
	if err == nil || !strings.Contains(err.Error(), `calls itself "webhook"`) {
		t.Fatalf("NewHost = %v, want a refusal", err)
	}
}

// A Sink fixed to an instance's principal records nothing for another: a source that took the
// principal from what its provider sent cannot file work or evidence under someone else.
func TestASinkRecordsOnlyForItsInstancesPrincipal(t *testing.T) {
	plane := taskplane.New(storetest.OpenSQLite(t))
	sink, err := sources.NewSink(plane, "webhook", sources.ForPrincipal("alice"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ev := sources.Event{Principal: "mallory", Identity: "ev-1", ConversationKey: "c1",
		Message: taskplane.Message{ID: "m-1", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("hi")}}}
	if _, err := sink.Accept(ctx, ev); !errors.Is(err, sources.ErrForeignPrincipal) || sources.Permanent(err) {
		t.Fatalf("Accept for another principal: %v", err)
	}
	if err := sink.NonWork(ctx, "mallory", "bot", nil); !errors.Is(err, sources.ErrForeignPrincipal) {
		t.Fatalf("NonWork for another principal: %v", err)
	}
	if err := sink.Malformed(ctx, "mallory", "bad", nil, nil); !errors.Is(err, sources.ErrForeignPrincipal) {
		t.Fatalf("Malformed for another principal: %v", err)
	}
	sink.Rejected(ctx, "mallory", "bad-signature")
	if err := sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"mallory", "alice"} {
		rows, err := plane.Store().ListEvidence(ctx, store.EvidenceFilter{Principal: p})
		if err != nil {
			t.Fatal(err)
		}
		if p == "mallory" && len(rows) != 0 {
			t.Errorf("the sink recorded %d rows for mallory", len(rows))
		}
		if p == "alice" && (len(rows) != 1 || rows[0].Kind != sources.EvidenceRejected) {
			t.Errorf("alice's evidence: %+v, want the one rejected request", rows)
		}
	}
	ev.Principal = "alice"
	if acc, err := sink.Accept(ctx, ev); err != nil || acc.Outcome != taskplane.Created {
		t.Fatalf("Accept for the sink's principal: %v %v", acc.Outcome, err)
	}
}
