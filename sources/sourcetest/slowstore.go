package sourcetest

import (
	"context"
	"sync/atomic"
	"time"

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
