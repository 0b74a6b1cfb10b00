package postgres_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/channels-dev/channels/internal/logcapture"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/postgres"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// While the database is away, the listener's reconnects fail in a row: the log says so once at
// WARN and once when it listens again. It logged a WARN for every reconnect (every 2.5–5 s of
// an outage, per process).
func TestTheListenersReconnectsDuringAnOutageAreLoggedOnce(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	s := open(t, u)
	seedTask(t, s, "alice", "task-1")
	proxy := newCutProxy(t, u.Host)
	pu := *u
	pu.Host = proxy.addr
	listener := open(t, &pu)
	lines := &logcapture.Lines{}
	listener.SetLogger(slog.New(lines))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 100)
	go listener.Listen(ctx, func(_, id string) { got <- id }, nil)
	awaitHint(t, s, got)
	proxy.cut()
	// 100, 200, 400, 800 ms (with jitter): four or more reconnects fail.
	time.Sleep(1500 * time.Millisecond)
	proxy.mend()
	for len(got) > 0 {
		<-got
	}
	awaitHint(t, s, got)
	if n := lines.Count("WARN postgres store: task event listener disconnected"); n != 1 {
		t.Errorf("%d WARN lines for one outage, want 1: %q", n, lines.All())
	}
	if n := lines.Count("INFO postgres store: task event listener disconnected: store reachable again"); n != 1 {
		t.Errorf("%d recovery lines, want 1: %q", n, lines.All())
	}
	if n := len(lines.All()); n != 2 {
		t.Errorf("%d lines for one outage, want 2: %q", n, lines.All())
	}
}

// awaitHint appends events to alice's task-1 through s until the listener passes a notification
// of one on got, failing the test after 15 s.
func awaitHint(t *testing.T, s *postgres.Store, got <-chan string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
			_, err := storetest.AppendNext(ctx, tx, "alice", "task-1", "status", nil, t0)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
			return
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("no notification within 15s")
		}
	}
}
