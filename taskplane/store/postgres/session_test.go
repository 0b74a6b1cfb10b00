package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/postgres"
)

// A process cut off mid-transaction — its host gone quiet before its COMMIT arrives — does not
// hold the others for long: the server ends its session once it has been idle in its transaction
// for idle_in_transaction_session_timeout (a session default of the store, lowered here so the
// test is short), its row locks go, and another process's acceptance of the same
// event, and unrelated work meeting the wake counter it held, go on.
func TestAProcessCutOffMidTransactionDoesNotHoldTheOthers(t *testing.T) {
	u := newSchema(t)
	b := open(t, u)
	proxy := newCutProxy(t, u.Host)
	ua := *u
	ua.Host = proxy.addr
	postgres.SetSessionDefault(t, "idle_in_transaction_session_timeout", "1s") // the default, shortened
	a := open(t, &ua)
	t.Cleanup(proxy.cut) // before a closes (cleanups run last first): its connections are dead
	ctx := context.Background()
	seedTask(t, b, "alice", "task-1")

	inserted := make(chan struct{})
	go a.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, _, err := tx.InsertClaim(ctx, store.Claim{Principal: "alice", Source: "slack", Identity: "Ev1",
			Digest: "d", State: store.ClaimDone, CreatedAt: t0, UpdatedAt: t0}); err != nil {
			return err
		}
		if err := tx.InsertWake(ctx, store.Wake{Principal: "alice", ID: "wa", TaskID: "task-1", State: store.WakePending,
			CreatedAt: t0, UpdatedAt: t0}); err != nil {
			return err
		}
		if _, err := tx.GetClaim(ctx, "alice", "slack", "Ev1"); err != nil { // sends the held-back wake
			return err
		}
		proxy.freeze() // the host goes away before its COMMIT
		close(inserted)
		return nil
	})
	<-inserted

	run := func(name string, fn func(ctx context.Context, tx store.Tx) error) bool {
		done := make(chan error, 1)
		go func() { done <- b.Update(ctx, fn) }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			return true
		case <-time.After(15 * time.Second):
			t.Errorf("%s: still blocked after 15 s on the transaction of a process cut off mid-transaction", name)
			return false
		}
	}
	// The provider redelivers Ev1 to B: once A's session is ended, B's claim goes in (A's never
	// committed).
	run("redelivered Ev1 on B", func(ctx context.Context, tx store.Tx) error {
		_, inserted, err := tx.InsertClaim(ctx, store.Claim{Principal: "alice", Source: "slack", Identity: "Ev1",
			Digest: "d", State: store.ClaimDone, CreatedAt: t0, UpdatedAt: t0})
		if err == nil && !inserted {
			err = fmt.Errorf("the claim of the process cut off was committed")
		}
		return err
	})
	// Unrelated work: one transaction in 64 meets the wake counter slot A's transaction held.
	for i := range 70 {
		if !run(fmt.Sprintf("unrelated wake %d", i), func(ctx context.Context, tx store.Tx) error {
			return tx.InsertWake(ctx, store.Wake{Principal: "bob", ID: fmt.Sprintf("wb-%d", i), TaskID: fmt.Sprintf("other-%d", i),
				State: store.WakePending, CreatedAt: t0, UpdatedAt: t0})
		}) {
			break
		}
	}
}

// Every connection of the store bounds a session that stops answering: idle in a transaction for a
// minute, or silent to TCP keepalives for about a minute, and the server ends it.
func TestStoreSessionsAreBoundedByDefault(t *testing.T) {
	u := newSchema(t)
	s := open(t, u)
	conn, err := s.Pool().Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for name, want := range map[string]string{"idle_in_transaction_session_timeout": "1min", "tcp_keepalives_idle": "30",
		"tcp_keepalives_interval": "10", "tcp_keepalives_count": "3"} {
		var got string
		if err := conn.QueryRow(context.Background(), "SELECT current_setting($1)", name).Scan(&got); err != nil || got != want {
			t.Errorf("%s = %q (%v), want %q", name, got, err, want)
		}
	}
}
