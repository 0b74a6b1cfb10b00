package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/channels-dev/channels/taskplane/store"
)

// TestAContextThatEndedIsNotAStoreOutage: the caller's context ending (cancelled, or past its
// deadline, which satisfies net.Error) is not the store being unavailable, as Unavailable says.
func TestAContextThatEndedIsNotAStoreOutage(t *testing.T) {
	if store.Unavailable(context.DeadlineExceeded) {
		t.Errorf("Unavailable(context.DeadlineExceeded) = true")
	}
	if store.Unavailable(fmt.Errorf("get task: %w", context.DeadlineExceeded)) {
		t.Errorf("Unavailable(wrapped context.DeadlineExceeded) = true")
	}
	// What pgx returns for a query on a context already cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := pgconn.Connect(ctx, "postgres://someone@127.0.0.1:1/somedb")
	if err == nil {
		t.Fatal("connected on a cancelled context")
	}
	if store.Unavailable(err) {
		t.Errorf("Unavailable(%v) = true for a cancelled context", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	_, err = pgconn.Connect(ctx, "postgres://someone@127.0.0.1:1/somedb")
	if err != nil && store.Unavailable(err) {
		t.Errorf("Unavailable(%v) = true for a context past its deadline", err)
	}
}
