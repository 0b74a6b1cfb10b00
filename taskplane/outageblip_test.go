package taskplane_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/internal/logcapture"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// restarting fails the transactions in flight when the database restarts: each fails after a
// little while (the server's shutdown reaches every connection at once), not one by one.
type restarting struct {
	store.Store
	down  atomic.Bool
	calls atomic.Int64
}

func (r *restarting) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if r.down.Load() {
		r.calls.Add(1)
		time.Sleep(50 * time.Millisecond)
		return errors.New("FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")
	}
	return r.Store.Update(ctx, fn)
}

// TestABlipSeenByConcurrentClaimersDoesNotStallClaimsForTheCap: the claimers share one
// outage.Tracker; a blip that fails the claims of many claimers at once (at start, or while they
// drain a backlog) counts as one failure, not as many in a row: the claimers do not back off to
// the 10 s cap although the store answered again at once.
func TestABlipSeenByConcurrentClaimersDoesNotStallClaimsForTheCap(t *testing.T) {
	st := &restarting{Store: storetest.OpenSQLite(t)}
	p := taskplane.New(st, taskplane.WithLogger(slog.New(&logcapture.Lines{})))
	ctx := context.Background()
	const tasks = 3
	for i := range tasks {
		id := fmt.Sprint("m", i)
		if _, err := p.Accept(ctx, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: id,
			Message: textMsg(id, "hello")}); err != nil {
			t.Fatal(err)
		}
	}
	var ran atomic.Int64
	exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		ran.Add(1)
		return turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted})
	})
	st.down.Store(true) // a blip: each claimer's first claim fails
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: taskplane.DefaultConcurrency, Poll: 100 * time.Millisecond, Lease: time.Minute}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(rctx) }()
	defer func() { cancel(); <-done }()
	// The claimers' first claims, at start, all fail; the store is back once they are in.
	for n := int64(-1); n != st.calls.Load(); {
		n = st.calls.Load()
		time.Sleep(20 * time.Millisecond)
	}
	failed := st.calls.Load()
	st.down.Store(false) // back within a few milliseconds
	back := time.Now()
	for ran.Load() < tasks {
		if time.Since(back) > time.Second {
			t.Fatalf("%d of %d waiting turns ran in the second after a blip that failed %d claims at once (poll 100 ms): the claimers backed off as if the store had failed %d times in a row",
				ran.Load(), tasks, failed, failed)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("all turns ran %v after the store came back (%d claims failed)", time.Since(back), failed)
}
