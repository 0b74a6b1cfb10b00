package push_test

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/channels-dev/channels/internal/logcapture"
	"github.com/channels-dev/channels/push"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// noPushWork fails the notifier's read of its work while down is set, as a store that is down
// does, counting the reads.
type noPushWork struct {
	store.Store
	down  atomic.Bool
	calls atomic.Int64
}

func (s *noPushWork) ListPushWork(ctx context.Context, limit int) ([]store.PushConfig, error) {
	if s.down.Load() {
		s.calls.Add(1)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return s.Store.ListPushWork(ctx, limit)
}

// While the store is down the notifier's passes back off (from its poll, doubling up to a cap)
// and the log says so once, then once when the store is back. It passed, and logged, every poll.
func TestAStoreOutageBacksThePushPassesOffAndLogsOnce(t *testing.T) {
	st := &noPushWork{Store: storetest.OpenSQLite(t)}
	lines := &logcapture.Lines{}
	n := push.New(taskplane.New(st), push.Options{Poll: 10 * time.Millisecond, Logger: slog.New(lines)})
	st.down.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(600 * time.Millisecond)
	st.down.Store(false)
	if calls := st.calls.Load(); calls < 2 || calls > 12 {
		t.Errorf("%d passes in 600 ms of outage with a 10 ms poll, want a backoff (about 7)", calls)
	}
	if n := lines.Count("ERROR push: pass failed"); n != 1 {
		t.Errorf("%d ERROR lines for the outage, want 1: %q", n, lines.All())
	}
	deadline := time.Now().Add(5 * time.Second)
	for lines.Count("INFO push: pass failed: store reachable again") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery line within 5 s of the store coming back: %q", lines.All())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
