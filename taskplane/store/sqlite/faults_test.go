package sqlite_test

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/sqlite"
)

// A database that refuses writes — read-only (SQLITE_READONLY, as a file the process may not
// write), or full (SQLITE_FULL) — fails the statement inside fn with an error that
// store.StorageFault recognises, whatever wraps it: readiness and the metrics count it as the
// store's failure, not the caller's.
func TestAWriteTheDatabaseRefusesIsAStorageFault(t *testing.T) {
	for _, c := range []struct{ name, pragma, want string }{
		{"read-only", "query_only=ON", "readonly"},
		{"full", "max_page_count=1", "full"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			s, err := sqlite.Open(ctx, &url.URL{Scheme: "sqlite", Path: filepath.Join(t.TempDir(), "c.db")})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			write := func(detail string) error {
				return s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
					return tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "webhook", Kind: "accepted",
						Detail: []byte(`{"pad":"` + detail + `"}`), CreatedAt: time.Now()})
				})
			}
			if err := write("x"); err != nil {
				t.Fatal(err)
			}
			if err := sqlite.SetWriterPragma(ctx, s, c.pragma); err != nil {
				t.Fatal(err)
			}
			// max_page_count cannot go below the pages in use: writes fail once the free ones
			// are used up.
			pad := strings.Repeat("x", 4000)
			for range 100 {
				if err = write(pad); err != nil {
					break
				}
			}
			if err == nil {
				t.Fatal("every write succeeded")
			}
			if !strings.Contains(err.Error(), c.want) || !store.StorageFault(err) {
				t.Fatalf("StorageFault(%v) = %v, want true", err, store.StorageFault(err))
			}
			if store.StorageFault(store.ErrNotFound) || store.StorageFault(context.Canceled) {
				t.Fatal("a caller's outcome is a storage fault")
			}
		})
	}
}
