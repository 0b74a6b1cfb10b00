package sourcetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// SlowStore is a store whose write transactions wait Delay before they run (a busy disk, a write
// lock another writer holds), as long as their caller still wants them: a caller whose context
// ends first gets its error, as from a store's queue.
type SlowStore struct {
	store.Store
	Delay atomic.Int64 // nanoseconds
}

// Update waits Delay, or until ctx ends, then runs fn on the store.
func (s *SlowStore) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if d := time.Duration(s.Delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Store.Update(ctx, fn)
}

// WaitForTasks waits up to 5 s for principal to have n tasks on p (an acceptance the test no
// longer waits for, still running), and fails t if it does not.
func WaitForTasks(t testing.TB, p *taskplane.Plane, principal string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		page, err := p.ListTasks(context.Background(), principal, taskplane.ListQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Tasks) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d tasks after 5 s, want %d", principal, len(page.Tasks), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
