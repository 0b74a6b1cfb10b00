package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/sqlite"
)

// TestTheWritersWALWritesLoseNothing: the writer's WAL writes go out coalesced (walbuf.go),
// many SQLite writes to one system call, and nothing is lost or seen early by it. Transactions
// larger than the writer's page cache (SQLite then writes pages to the WAL before the commit,
// and reads them back) commit, or roll back when their fn fails; readers on their own
// connections, reading all along, only ever see whole transactions, with every row intact; and
// the database, closed and opened again, holds exactly the committed rows and passes SQLite's
// integrity check.
func TestTheWritersWALWritesLoseNothing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	s := openAt(t, path)
	const (
		txs   = 40
		perTx = 20
	)
	pad := strings.Repeat("p", 3000)
	detail := func(n int) []byte { return fmt.Appendf(nil, `{"n":%d,"pad":%q}`, n, pad) }
	// check reads alice's evidence and reports what is wrong with it, if anything: a count
	// that is not a whole number of transactions, or a row that is not the one written or out
	// of the order written.
	check := func(st store.Store) (int, error) {
		evs, err := st.ListEvidence(ctx, store.EvidenceFilter{Principal: "alice", Forward: true, Limit: txs * perTx * 2})
		if err != nil {
			return 0, err
		}
		if len(evs)%perTx != 0 {
			return len(evs), fmt.Errorf("%d rows: not a whole number of transactions of %d", len(evs), perTx)
		}
		prev := 0
		for i, e := range evs {
			var d struct {
				N   int    `json:"n"`
				Pad string `json:"pad"`
			}
			if err := json.Unmarshal(e.Detail, &d); err != nil || d.Pad != pad {
				return len(evs), fmt.Errorf("row %d: detail %.40q… (%v)", i, e.Detail, err)
			}
			if d.N <= prev {
				return len(evs), fmt.Errorf("row %d: n %d after %d", i, d.N, prev)
			}
			prev = d.N
		}
		return len(evs), nil
	}
	insert := func(ctx context.Context, tx store.Tx, first int) error {
		for j := range perTx {
			if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "walbuf", Kind: "accepted",
				Detail: detail(first + j), CreatedAt: time.Now()}); err != nil {
				return err
			}
		}
		return nil
	}

	// A transaction that fits the page cache: its commit's writes go out in a few calls.
	writes0, out0 := sqlite.WALWrites()
	if err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return insert(ctx, tx, 1) }); err != nil {
		t.Fatal(err)
	}
	committed := 1
	writes, out := sqlite.WALWrites()
	if writes-writes0 < 2*perTx || out-out0 > (writes-writes0)/8 {
		t.Fatalf("a commit's %d WAL writes went out in %d system calls, want them coalesced", writes-writes0, out-out0)
	}

	// A page cache of a few pages: every transaction below spills.
	if err := sqlite.SetWriterPragma(ctx, s, "cache_size=8"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	readErr := make(chan error, 1)
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := check(s); err != nil {
				readErr <- err
				return
			}
		}
	})
	errRolledBack := errors.New("this transaction rolls back")
	for i := 1; i < txs; i++ {
		err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			if err := insert(ctx, tx, i*perTx+1); err != nil {
				return err
			}
			if i%4 == 3 {
				return errRolledBack
			}
			return nil
		})
		switch {
		case i%4 == 3 && !errors.Is(err, errRolledBack):
			t.Fatalf("transaction %d: %v, want it rolled back", i, err)
		case i%4 != 3 && err != nil:
			t.Fatalf("transaction %d: %v", i, err)
		case err == nil:
			committed++
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-readErr:
		t.Fatalf("a reader saw: %v", err)
	default:
	}
	if n, err := check(s); err != nil || n != committed*perTx {
		t.Fatalf("before closing: %d rows (%v), want %d", n, err, committed*perTx)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	var ok string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity check: %q (%v)", ok, err)
	}
	db.Close()
	again := openAt(t, path)
	if n, err := check(again); err != nil || n != committed*perTx {
		t.Fatalf("opened again: %d rows (%v), want %d", n, err, committed*perTx)
	}
}
