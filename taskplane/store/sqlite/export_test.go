package sqlite

import "context"

// Hooks for the external tests (package sqlite_test) to observe the writer.

// Batches reports how many transactions the writer has run.
func Batches(s *Store) int64 { return s.w.batches.Load() }

// Queued reports how many Updates wait in the writer's queue.
func Queued(s *Store) int { return s.w.q.Len() }

// Closing is closed once Close has begun.
func Closing(s *Store) <-chan struct{} { return s.w.q.Closing() }

// CachedStatements reports how many read statements the read pool's cache holds or will prepare.
func CachedStatements(s *Store) int {
	c := s.reader.db.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.stmts) + len(c.missed)
}

// SetWriterPragma runs "PRAGMA <pragma>" on the writer's connection (between its batches): a
// test makes the database refuse writes with query_only=ON, as a read-only database file does
// (root, which tests run as, ignores a file's permissions), or fills it with max_page_count.
func SetWriterPragma(ctx context.Context, s *Store, pragma string) error {
	_, err := s.wdb.ExecContext(ctx, "PRAGMA "+pragma)
	return err
}

// WriterPragma reads "PRAGMA <name>" on the writer's connection.
func WriterPragma(ctx context.Context, s *Store, name string) (string, error) {
	var v string
	err := s.wdb.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v)
	return v, err
}

// WALSizeLimit is walSizeLimit.
const WALSizeLimit = walSizeLimit

// WALAutoCheckpoint is walAutoCheckpoint.
const WALAutoCheckpoint = walAutoCheckpoint

// HoldRead starts a read on the store's read pool and keeps its connection until release: a
// dashboard count still running on a large store.
func HoldRead(ctx context.Context, s *Store) (release func(), err error) {
	c, err := s.rdb.Conn(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := c.QueryContext(ctx, "SELECT 1 UNION ALL SELECT 2")
	if err != nil {
		c.Close()
		return nil, err
	}
	rows.Next() // the statement is under way
	return func() { rows.Close(); c.Close() }, nil
}

// WALWrites reports the writes SQLite made to the writer's WAL files, and the writes that went
// out to the file system for them (walbuf.go), since the process started.
func WALWrites() (writes, out int64) { return walBuf.writes.Load(), walBuf.writesOut.Load() }
