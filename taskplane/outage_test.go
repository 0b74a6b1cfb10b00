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

// unreachable fails every transaction while down is set, counting them.
type unreachable struct {
	store.Store
	down  atomic.Bool
	calls atomic.Int64
}

func (u *unreachable) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if u.down.Load() {
		u.calls.Add(1)
		return errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	}
	return u.Store.Update(ctx, fn)
}

// While the store is down the dispatcher's claimers back off together (from the poll, doubling
// up to a cap) and the log says so once, then once when the store is back. They claimed at every
// poll and logged each failure.
func TestAStoreOutageBacksTheDispatchersClaimsOffAndLogsOnce(t *testing.T) {
	st := &unreachable{Store: storetest.OpenSQLite(t)}
	lines := &logcapture.Lines{}
	p := taskplane.New(st, taskplane.WithLogger(slog.New(lines)))
	exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error { return nil })
	st.down.Store(true)
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 4, Poll: 10 * time.Millisecond, Lease: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(600 * time.Millisecond)
	st.down.Store(false)
	// 10, 20, 40, 80, 160, 320 ms: about 7 claims in 600 ms; a claim a poll would be 60 or more.
	if calls := st.calls.Load(); calls < 2 || calls > 15 {
		t.Errorf("%d claims in 600 ms of outage with a 10 ms poll, want a backoff (about 7)", calls)
	}
	if n := lines.Count("ERROR claim wake"); n != 1 {
		t.Errorf("%d ERROR lines for the outage, want 1: %q", n, lines.All())
	}
	deadline := time.Now().Add(5 * time.Second)
	for lines.Count("INFO claim wake: store reachable again") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery line within 5 s of the store coming back: %q", lines.All())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A hint is a commit of this process that enqueued a wake: the store answers again. A claimer
// that takes one while the claimers back off from an outage claims at once; it dropped the hint,
// and the wake waited for a poll after the back-off (up to 10 s).
func TestAHintDuringAnOutagesBackOffIsClaimedAtOnce(t *testing.T) {
	st := &unreachable{Store: storetest.OpenSQLite(t)}
	p := taskplane.New(st, taskplane.WithLogger(slog.New(&logcapture.Lines{})))
	waiting := waitingNativeTask(t, p)
	ran := make(chan string, 1)
	exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		ran <- turn.Grant().TaskID
		return nil
	})
	st.down.Store(true)
	// A poll of a minute: the back-off after the first failed claim is its cap, 10 s.
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 1, Poll: time.Minute, Lease: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for st.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	st.down.Store(false)
	// The answer continues the waiting task (no hand-off: an explicit task id), leaving a hint.
	ev := nativeEvent("alice", "e2", "conv", "four")
	ev.TaskID = waiting.Grant().TaskID
	mustAccept(t, p, ev)
	select {
	case id := <-ran:
		if id != waiting.Grant().TaskID {
			t.Fatalf("turn of %s, want %s", id, waiting.Grant().TaskID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the continued task's turn did not start within 5 s: its hint was dropped during the back-off")
	}
}

// Hints pile up while every claimer is busy; when the store then goes away, a hint of a commit
// made before the outage does not end the claimers' back-off. Each queued hint ran a claim that
// failed, some hundreds in a burst.
func TestHintsQueuedBeforeAnOutageDoNotBreakItsBackOff(t *testing.T) {
	st := &unreachable{Store: storetest.OpenSQLite(t)}
	p := taskplane.New(st, taskplane.WithLogger(slog.New(&logcapture.Lines{})))
	started, release := make(chan struct{}, 1), make(chan struct{})
	exec := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
		// Finished before the outage, so the turn's end needs no write during it: the claimer is
		// free to take the hints at once.
		err := turn.Complete(ctx, &taskplane.Message{ID: "r-" + turn.Grant().TaskID, Role: taskplane.RoleAgent,
			Parts: []taskplane.Part{taskplane.TextPart("done")}})
		select {
		case started <- struct{}{}:
			<-release
		default:
		}
		return err
	})
	d := &taskplane.Dispatcher{Plane: p, Executor: exec, Concurrency: 1, Poll: time.Minute, Lease: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	mustAccept(t, p, nativeEvent("alice", "e0", "conv-0", "first"))
	<-started // the only claimer is busy: the next acceptances leave hints
	for i := 1; i <= 100; i++ {
		id := fmt.Sprint("e", i)
		mustAccept(t, p, nativeEvent("alice", id, "conv-"+id, "more"))
	}
	st.down.Store(true)
	close(release)
	time.Sleep(500 * time.Millisecond)
	// The first claim after the turn; then the back-off.
	if n := st.calls.Load(); n > 3 {
		t.Errorf("%d transactions failed in 500 ms of outage, want a few: the queued hints each ran a claim", n)
	}
}
