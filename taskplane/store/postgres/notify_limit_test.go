package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// A hint NOTIFY cannot carry (its payload, principal/taskID, of 8,000 bytes or more) is left out,
// and the other hints of its group are still sent: they share one pg_notify statement, which the
// long one failed whole.
func TestALongPrincipalsHintDoesNotLoseTheGroupsOtherHints(t *testing.T) {
	t.Parallel()
	u := newSchema(t)
	setParam(u, "pool_max_conns", "4") // 2 committers
	listener, writer := open(t, u), open(t, u)
	const alice = "alice"
	long := strings.Repeat("p", 8000)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan [2]string, 1000)
	done := make(chan error, 1)
	go func() { done <- listener.Listen(ctx, func(p, id string) { got <- [2]string{p, id} }, nil) }()
	defer func() { cancel(); <-done }()

	appendTo := func(principal, taskID string) error {
		return writer.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := storetest.AppendNext(ctx, tx, principal, taskID, "status", []byte(`{}`), t0)
			return err
		})
	}
	seedTask(t, writer, alice, "warm")
	seedTask(t, writer, alice, "task-a")
	seedTask(t, writer, long, "task-l")
	// Listen gives no readiness signal: append until the first hint arrives.
	deadline := time.After(10 * time.Second)
warm:
	for {
		if err := appendTo(alice, "warm"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
			break warm
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no notification within 10s")
		}
	}

	// Hold both committers so that the two appends below queue and share one group.
	release := holdCommitters(ctx, t, writer, nil)
	errs := make(chan error, 2)
	go func() { errs <- appendTo(alice, "task-a") }()
	go func() { errs <- appendTo(long, "task-l") }()
	for writer.Queued() < 2 {
		select {
		case <-ctx.Done():
			t.Fatal("the appends did not queue")
		case <-time.After(time.Millisecond):
		}
	}
	release()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	// Both appends committed; alice's task must be hinted (well before a follower's 2 s re-read).
	timeout := time.After(10 * time.Second) // a hint lost is never sent: no re-read here
	for {
		select {
		case h := <-got:
			if h == [2]string{alice, "task-a"} {
				return
			}
		case <-timeout:
			t.Fatal("alice's committed task-a event was never hinted: the long principal's payload " +
				"failed the group's one pg_notify statement")
		}
	}
}
