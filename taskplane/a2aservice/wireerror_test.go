package a2aservice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/channels-dev/channels/internal/logcapture"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// Only a store outage is logged as one ("a2a request failed: store unavailable", which the
// operations guide reads as the database away): a request that met a concurrent one for the same
// message or task is answered 503 with a Retry-After too, but is no outage, and is not logged.
func TestOnlyAStoreOutageIsLoggedAsOne(t *testing.T) {
	lines := &logcapture.Lines{}
	s, err := New(taskplane.New(storetest.OpenSQLite(t)), nil, nil, Config{Logger: slog.New(lines)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, e := range []error{taskplane.ErrClaimPending, fmt.Errorf("apply: %w", taskplane.ErrConcurrentModification)} {
		if we := s.WireError(ctx, "SendMessage", e); we.RetryAfter == 0 {
			t.Errorf("%v: no Retry-After", e)
		}
	}
	if n := lines.Count("WARN a2a request failed: store unavailable"); n != 0 {
		t.Fatalf("concurrent requests logged as a store outage: %q", lines.All())
	}
	s.WireError(ctx, "SendMessage", fmt.Errorf("get task: %w", taskplane.ErrStore))
	s.WireError(ctx, "GetTask", fmt.Errorf("get task: %w", errors.Join(taskplane.ErrStore, errors.New("conn closed"))))
	if n := lines.Count("WARN a2a request failed: store unavailable"); n != 2 {
		t.Fatalf("%d outage lines for two store failures, want 2: %q", n, lines.All())
	}
}
