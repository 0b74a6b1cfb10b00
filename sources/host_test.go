package sources_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/checkpoint"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// registerOnce keeps -count=N from registering a name twice (Register panics).
var registerOnce struct{ email, github, slack sync.Once }

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

// panickingSource is a source with a bug: instance "run" panics in Run, instance "health" in
// Health; any other instance runs and is healthy.
type panickingSource struct{ instance string }

func (panickingSource) Name() string { return "slack" }
func (s panickingSource) Run(ctx context.Context, _ *sources.Sink) error {
	if s.instance == "run" {
		panic("run bug")
	}
	<-ctx.Done()
	return nil
}
func (s panickingSource) Health(context.Context) error {
	if s.instance == "health" {
		panic("health check bug")
	}
	return nil
}

// A panic in one instance's Run or Health stops or fails that instance only: it is reported
// unhealthy with the panic, and the process and the other instances keep running (the panic
// used to take the whole server down).
func TestAPanickingSourceStopsOnlyItsOwnInstance(t *testing.T) {
	registerOnce.slack.Do(func() {
		sources.Register("slack", func(cfg sources.Config) (sources.Source, error) {
			return panickingSource{instance: cfg.Instance}, nil
		})
	})
	var instances []sources.Instance
	for _, name := range []string{"run", "health", "fine"} {
		instances = append(instances, sources.Instance{Source: "slack", Config: sources.Config{Instance: name, Principal: "alice"}})
	}
	h, err := sources.NewHost(taskplane.New(storetest.OpenSQLite(t)), nil, instances)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.Start(ctx)
	var hs []sources.InstanceHealth
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if hs = h.Healths(ctx); hs[0].Err != nil || time.Now().After(deadline) {
			break
		}
	}
	if hs[0].Err == nil || !strings.Contains(hs[0].Err.Error(), "panicked: run bug") {
		t.Errorf("the instance whose Run panicked: %v, want unhealthy with the panic", hs[0].Err)
	}
	if hs[1].Err == nil || !strings.Contains(hs[1].Err.Error(), "health check panicked: health check bug") {
		t.Errorf("the instance whose Health panicked: %v, want unhealthy with the panic", hs[1].Err)
	}
	if hs[2].Err != nil {
		t.Errorf("the instance without a bug: %v, want healthy", hs[2].Err)
	}
	cancel()
	if err := h.Wait(); err == nil || !strings.Contains(err.Error(), "slack instance run: panicked") {
		t.Fatalf("Wait = %v, want the panic of instance run (and only that)", err)
	} else if strings.Contains(err.Error(), "instance health") || strings.Contains(err.Error(), "instance fine") {
		t.Fatalf("Wait = %v, want only instance run's panic", err)
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

// A Sink fixed to an instance's principal does not reach another principal's intake state
// either: it neither reads nor resyncs their checkpoint (nor writes its evidence) and records no
// reply anchor on their task.
func TestAFixedPrincipalSinkRefusesResyncAnchorsAndCheckpointsOfOthers(t *testing.T) {
	plane := taskplane.New(storetest.OpenSQLite(t))
	ctx := context.Background()
	// mallory's own state, written through a Sink fixed to mallory: a task waiting for an
	// answer and a checkpoint.
	theirs, err := sources.NewSink(plane, "webhook", sources.ForPrincipal("mallory"))
	if err != nil {
		t.Fatal(err)
	}
	acc, err := theirs.Accept(ctx, sources.Event{Principal: "mallory", Identity: "ev-1", ConversationKey: "c1",
		Message: taskplane.Message{ID: "m-1", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("hi")}}})
	if err != nil {
		t.Fatal(err)
	}
	q := &taskplane.Message{ID: "q-1", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("which one?")}}
	if _, err := plane.Apply(ctx, "mallory", acc.Task.ID, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateInputRequired, Message: q}); err != nil {
		t.Fatal(err)
	}
	if _, err := theirs.Resync(ctx, "mallory", checkpoint.Position{Instance: "box", Seq: 7}, "uidvalidity changed"); err != nil {
		t.Fatal(err)
	}
	evidence := func() int {
		ev, err := plane.Store().ListEvidence(ctx, store.EvidenceFilter{Principal: "mallory"})
		if err != nil {
			t.Fatal(err)
		}
		return len(ev)
	}
	before := evidence()

	sink, err := sources.NewSink(plane, "webhook", sources.ForPrincipal("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := sink.Checkpoint(ctx, "mallory", "box"); !errors.Is(err, sources.ErrForeignPrincipal) {
		t.Errorf("Checkpoint of mallory through alice's sink: %+v, %v", c, err)
	}
	if _, err := sink.Resync(ctx, "mallory", checkpoint.Position{Instance: "box", Seq: 1 << 32}, "uidvalidity changed"); !errors.Is(err, sources.ErrForeignPrincipal) {
		t.Errorf("Resync of mallory through alice's sink: %v", err)
	}
	if err := sink.RecordAnchor(ctx, "mallory", "q-anchor", acc.Task.ID); !errors.Is(err, sources.ErrForeignPrincipal) {
		t.Errorf("RecordAnchor on mallory's task through alice's sink: %v", err)
	}
	if c, err := theirs.Checkpoint(ctx, "mallory", "box"); err != nil || c.Position.Seq != 7 {
		t.Errorf("mallory's checkpoint: %+v, %v, want seq 7", c, err)
	}
	if n := evidence(); n != before {
		t.Errorf("mallory's evidence went from %d to %d rows", before, n)
	}
	if a, err := plane.Store().GetAnchor(ctx, "mallory", "webhook", "q-anchor"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an anchor on mallory's task: %+v, %v", a, err)
	}
	if _, err := sink.Resync(ctx, "alice", checkpoint.Position{Instance: "box", Seq: 3}, "uidvalidity changed"); err != nil {
		t.Errorf("Resync of the sink's own principal: %v", err)
	}
}
