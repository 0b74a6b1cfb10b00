package postgres_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/postgres"
)

// An NTP step of one host's wall clock between two measurements of the database's clock does not
// move that process's Now: Now runs on from the last measurement by the monotonic clock. A step
// forward that moved it would have the process take a turn another process still holds the lease
// of, and two executors work one turn.
func TestAStepOfAHostsClockDoesNotMoveItsNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := newSchema(t)
	var step atomic.Int64
	b, err := postgres.OpenOnHost(ctx, u, func() time.Time { return time.Now().Add(time.Duration(step.Load())) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	a := open(t, u)
	pa, pb := taskplane.New(a), taskplane.New(b)
	if _, err := pa.Accept(ctx, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "m1",
		Message: taskplane.Message{ID: "m1", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("hi")}}}); err != nil {
		t.Fatal(err)
	}
	held, err := pa.ClaimTurn(ctx, taskplane.ClaimRequest{Owner: "proc-a", Lease: time.Minute})
	if err != nil || held == nil {
		t.Fatalf("the first process's claim: %v, %v", held, err)
	}
	before := b.Now()
	step.Store(int64(2 * time.Minute)) // the second host's clock is stepped 2 minutes forward
	if moved := b.Now().Sub(before); moved < 0 || moved > 5*time.Second {
		t.Fatalf("a 2-minute step of the host's clock moved its Now by %v", moved)
	}
	taken, err := pb.ClaimTurn(ctx, taskplane.ClaimRequest{Owner: "proc-b", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if taken != nil {
		t.Fatalf("the stepped process took the turn of task %s while the first one's lease runs to %s",
			taken.TaskID, held.LeaseUntil.Format(time.RFC3339))
	}
}

// No two calls of Now return the same microsecond, the precision the store keeps, however close
// together and from however many goroutines: a stream tells a task's updates apart by their
// events' times, and two updates stamped alike would read as one.
func TestNowNeverReturnsAMicrosecondTwice(t *testing.T) {
	t.Parallel()
	s := open(t, newSchema(t))
	const goroutines, calls = 4, 5000
	got := make([][]int64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range calls {
				got[g] = append(got[g], s.Now().UnixMicro())
			}
		})
	}
	wg.Wait()
	seen := make(map[int64]bool, goroutines*calls)
	for g := range got {
		for i, us := range got[g] {
			if i > 0 && us <= got[g][i-1] {
				t.Fatalf("Now went from %d µs to %d µs in one goroutine", got[g][i-1], us)
			}
			if seen[us] {
				t.Fatalf("Now returned the microsecond %d twice", us)
			}
			seen[us] = true
		}
	}
}
