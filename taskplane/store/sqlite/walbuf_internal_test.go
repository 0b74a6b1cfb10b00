package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

// TestAFailedWALWriteLosesNoFrame: while the WAL's writes fail as on a full disk, whatever
// needed the buffer written (a read of a page the transaction wrote to the WAL early, the
// commit's sync) fails, and the buffered bytes stay; once the writes succeed again, the next
// flush writes them out where they belong. So a statement that failed and was rolled back alone
// (SQLite goes on with the transaction after a full disk) leaves the transaction's other rows
// whole: the commit, or a rollback of the whole, leaves the database with exactly the rows
// committed and passing SQLite's integrity check.
func TestAFailedWALWriteLosesNoFrame(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	db, err := sql.Open("sqlite", WriterDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { walBuf.failWrites.Store(false) })
	exec := func(q string, args ...any) error {
		_, err := db.ExecContext(ctx, q, args...)
		return err
	}
	for _, q := range []string{"CREATE TABLE r (id INTEGER PRIMARY KEY, body TEXT NOT NULL)", "PRAGMA cache_size=8"} {
		if err := exec(q); err != nil {
			t.Fatal(err)
		}
	}
	body := strings.Repeat("b", 3000)
	committed, statementOnly := 0, 0
	for round := range 6 {
		if err := exec("BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		// pending counts the rows of the open transaction. After a failed statement, SQLite
		// has rolled back the statement, or the whole transaction: a BEGIN tells which.
		pending, failed, rolledBack := 0, 0, 0
		failure := func() {
			failed++
			walBuf.failWrites.Store(false)
			switch err := exec("BEGIN IMMEDIATE"); {
			case err == nil:
				pending = 0
				rolledBack++
			case !strings.Contains(err.Error(), "within a transaction"):
				t.Fatalf("round %d: %v", round, err)
			}
		}
		for i := range 120 {
			if err := exec("INSERT INTO r (body) VALUES (?)", body); err != nil {
				failure()
				continue
			}
			pending++
			// A row written a while ago: its page is in the WAL (or the buffer), not the
			// cache, and the update reads it back. For a stretch in the middle of the
			// transaction, after it has written pages to the WAL early, the WAL's writes fail
			// meanwhile. (An update may fail on a constraint, so SQLite can roll back the
			// statement alone.)
			walBuf.failWrites.Store(i >= 40 && i < 50)
			if err := exec("UPDATE r SET body = ?2 WHERE id BETWEEN (SELECT min(id) FROM r) + ?1 AND (SELECT min(id) FROM r) + ?1 + 1", i/2, body); err != nil {
				failure()
			}
		}
		walBuf.failWrites.Store(false)
		if failed == 0 {
			t.Fatalf("round %d: no statement failed while the WAL's writes did", round)
		}
		if failed > rolledBack {
			statementOnly++
		}
		if err := exec("COMMIT"); err != nil {
			t.Fatalf("round %d: commit: %v", round, err)
		}
		committed += pending
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM r").Scan(&n); err != nil || n != committed {
			t.Fatalf("round %d: %d rows (%v), want %d", round, n, err, committed)
		}
	}
	if statementOnly == 0 {
		t.Fatal("every failure rolled back its whole transaction: the case this test is for did not happen")
	}

	// A commit whose sync cannot write its frames fails, and nothing of it is seen.
	if err := exec("BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if err := exec("INSERT INTO r (body) VALUES ('small')"); err != nil {
		t.Fatal(err)
	}
	walBuf.failWrites.Store(true)
	err = exec("COMMIT")
	walBuf.failWrites.Store(false)
	if err == nil {
		t.Fatal("a commit whose frames could not be written succeeded")
	}
	_ = exec("ROLLBACK")

	// Another connection, and the database opened again, see exactly the committed rows.
	check := func(db *sql.DB) {
		t.Helper()
		var ok string
		if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
			t.Fatalf("integrity check: %q (%v)", ok, err)
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM r WHERE body = ?", body).Scan(&n); err != nil || n != committed {
			t.Fatalf("%d rows (%v), want %d", n, err, committed)
		}
	}
	reader, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	check(reader)
	reader.Close()
	db.Close()
	again, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	check(again)
}
