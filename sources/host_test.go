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
