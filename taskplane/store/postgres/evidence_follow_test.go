package postgres_test

import (
	"context"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestAFollowerReadsOnlyTheRunItsHorizonSaw: a record that commits after the follower's horizon
// is worked out and before its records are read, above an id still in flight, is not read then
// (which would step over the id in flight): the read stays within the run of ids the horizon saw.
func TestAFollowerReadsOnlyTheRunItsHorizonSaw(t *testing.T) {
	u := newSchema(t)
	s := open(t, u)
	ctx := context.Background()
	ins := func(ctx context.Context, tx store.Tx, kind string) error {
		return tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: kind, CreatedAt: time.Now()})
	}
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return ins(ctx, tx, "first") }); err != nil {
		t.Fatal(err)
	}
	ev, _ := s.ListEvidence(ctx, store.EvidenceFilter{})
	after := ev[0].ID

	// open starts a transaction that inserts kind (drawing its id) and commits when released.
	open := func(kind string) (release func(), done <-chan error) {
		drawn, rel := make(chan struct{}), make(chan struct{})
		d := make(chan error, 1)
		go func() {
			d <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
				if err := ins(ctx, tx, kind); err != nil {
					return err
				}
				if _, err := postgres.TxID(ctx, tx); err != nil {
					return err
				}
				close(drawn)
				<-rel
				return nil
			})
		}()
		<-drawn
		var once sync.Once
		return func() { once.Do(func() { close(rel) }) }, d
	}
	releaseSlow, slowDone := open("slow") // id after+1, stays open
	defer releaseSlow()
	releaseFast, fastDone := open("fast") // id after+2
	defer releaseFast()

	// The follower's read: "fast" commits after the horizon is computed, before the records are read.
	var once sync.Once
	r := s.HookedReader(func(sql string) {
		if strings.HasPrefix(sql, "SELECT id, principal") {
			once.Do(func() {
				releaseFast()
				if err := <-fastDone; err != nil {
					t.Error(err)
				}
			})
		}
	})
	got, err := r.ListEvidence(ctx, store.EvidenceFilter{AfterID: after, Follow: true, Forward: true})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range got {
		seen = append(seen, e.Kind)
		after = max(after, e.ID)
	}
	releaseSlow()
	if err := <-slowDone; err != nil {
		t.Fatal(err)
	}
	got, err = s.ListEvidence(ctx, store.EvidenceFilter{AfterID: after, Follow: true, Forward: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range got {
		seen = append(seen, e.Kind)
	}
	if strings.Join(seen, " ") != "slow fast" {
		t.Fatalf("the follower read %v, want [slow fast]: it stepped over a record committed late", seen)
	}
}

// TestAFollowerReadsEveryRecordOnceUnderConcurrentWriters: writers that commit out of id order,
// roll back savepoints and whole transactions, and hold their ids for a while; a follower reading
// all along reads every record that committed exactly once.
func TestAFollowerReadsEveryRecordOnceUnderConcurrentWriters(t *testing.T) {
	u := newSchema(t)
	s := open(t, u)
	postgres.SetEvidenceWait(t, 200*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const ins = `INSERT INTO evidence (principal, source, kind, task_id, detail, created_at)
		VALUES ('alice', '', 'k', '', NULL, now())`
	var wg sync.WaitGroup
	var stop atomic.Bool
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return
				}
				if rand.IntN(2) == 0 { // some already hold an xid from other work
					tx.Exec(ctx, `SELECT pg_current_xact_id()`)
				}
				tx.Exec(ctx, `SAVEPOINT a`)
				if _, err := tx.Exec(ctx, ins); err != nil {
					t.Error(err)
				}
				if rand.IntN(4) == 0 {
					tx.Exec(ctx, `ROLLBACK TO SAVEPOINT a`)
				} else {
					tx.Exec(ctx, `RELEASE SAVEPOINT a`)
				}
				time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
				if rand.IntN(5) == 0 {
					tx.Rollback(ctx)
				} else {
					tx.Commit(ctx)
				}
			}
		}()
	}
	seen := map[int64]int{}
	var after int64
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		got, err := s.ListEvidence(ctx, store.EvidenceFilter{AfterID: after, Follow: true, Forward: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			seen[e.ID]++
			after = max(after, e.ID)
		}
	}
	stop.Store(true)
	wg.Wait()
	for i := 0; i < 20; i++ {
		got, err := s.ListEvidence(ctx, store.EvidenceFilter{AfterID: after, Follow: true, Forward: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			seen[e.ID]++
			after = max(after, e.ID)
		}
	}
	all, err := s.ListEvidence(ctx, store.EvidenceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	missed := 0
	for _, e := range all {
		if seen[e.ID] != 1 {
			missed++
			if missed < 10 {
				t.Errorf("id %d read %d times", e.ID, seen[e.ID])
			}
		}
	}
	t.Logf("%d records, %d not read exactly once", len(all), missed)
}

// TestAFollowerIsNotHeldByATransactionThatWroteNoEvidence: a filtered follower behind more than
// the horizon's scan of committed records gets past them while a transaction that never wrote
// evidence (here in another database) stays open: only writers of evidence can hold an id.
func TestAFollowerIsNotHeldByATransactionThatWroteNoEvidence(t *testing.T) {
	u := newSchema(t)
	s := open(t, u)
	postgres.SetEvidenceWait(t, 200*time.Millisecond)
	ctx := context.Background()

	other := *u
	other.Path = "/postgres"
	other.RawQuery = url.Values{"sslmode": {"disable"}}.Encode()
	oc := connect(t, &other)
	otx, err := oc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer otx.Rollback(ctx)                                                 //nolint:errcheck
	if _, err := otx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil { // e.g. an idle-in-transaction session of another app
		t.Fatal(err)
	}

	insert := func(kind string) {
		t.Helper()
		if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			return tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: kind, CreatedAt: time.Now()})
		}); err != nil {
			t.Fatal(err)
		}
	}
	insert("wanted")
	first, err := s.ListEvidence(ctx, store.EvidenceFilter{Kind: "wanted"})
	if err != nil || len(first) != 1 {
		t.Fatalf("seed: %v %v", err, first)
	}
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for range 10050 {
			if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Kind: "noise", CreatedAt: time.Now()}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	insert("wanted")
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := s.ListEvidence(ctx, store.EvidenceFilter{Kind: "wanted", AfterID: first[0].ID, Forward: true, Follow: true, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second wanted record, behind %d contiguous committed records, was not listed while an unrelated transaction in another database stays open", 10050)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
