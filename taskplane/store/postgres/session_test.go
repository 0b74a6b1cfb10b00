package postgres_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/postgres"
)

// freezeProxy forwards TCP to the database; freeze stops forwarding in both directions without
// closing anything: the host of the process behind it is partitioned away (or paused), and the
// server sees a client that simply went quiet.
type freezeProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	frozen chan struct{}
	conns  []net.Conn
}

func newFreezeProxy(t *testing.T, target string) *freezeProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln, frozen: make(chan struct{})}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, d)
			p.mu.Unlock()
			go p.pipe(d, c)
			go p.pipe(c, d)
		}
	}()
	t.Cleanup(p.cut)
	return p
}

// cut closes the proxy and every connection through it.
func (p *freezeProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

func (p *freezeProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-p.frozen:
				<-make(chan struct{}) // partitioned: nothing passes any more
			default:
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			dst.Close()
			return
		}
	}
}

func (p *freezeProxy) freeze() { close(p.frozen) }

// A process cut off mid-transaction — its host gone quiet before its COMMIT arrives — does not
// hold the others for long: the server ends its session once it has been idle in its transaction
// for idle_in_transaction_session_timeout (a session default of the store, lowered here so the
// test is short), its row locks go, and another process's acceptance of the same
// event, and unrelated work meeting the wake counter it held, go on.
func TestAProcessCutOffMidTransactionDoesNotHoldTheOthers(t *testing.T) {
	u := newSchema(t)
	b := open(t, u)
	proxy := newFreezeProxy(t, u.Host)
	ua := *u
	ua.Host = proxy.ln.Addr().String()
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
