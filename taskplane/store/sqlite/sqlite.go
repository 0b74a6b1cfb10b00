// Package sqlite is the embedded store driver: one SQLite database file (pure Go, via
// modernc.org/sqlite) used by exactly one Channels process.
//
// Importing the package registers the URL scheme "sqlite" with store.Register:
//
//	sqlite:///var/lib/channels/channels.db   absolute path
//	sqlite://data/channels.db                 relative to the working directory
//
// The database runs in WAL mode with synchronous=FULL, so a committed Update survives power loss.
// A durable commit costs an fsync, which caps single-row transactions at a few thousand per
// second; Update therefore uses group commit: a single writer goroutine runs every queued fn in
// one transaction, each inside its own savepoint, and commits once for all of them. Reads on the
// Store use a separate pool of read-only connections, which WAL lets run alongside the writer.
//
// Open takes an exclusive lock on "<db>.lock" and on the database file itself; a second process is
// refused with store.ErrInUse.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the database/sql driver "sqlite"

	"github.com/channels-dev/channels/taskplane/store"
)

func init() {
	store.RegisterURLCheck("sqlite", func(u *url.URL) error { _, err := dbPath(u); return err })
	store.Register("sqlite", func(ctx context.Context, u *url.URL) (store.Store, error) {
		s, err := Open(ctx, u)
		if err != nil {
			return nil, err // not a typed nil inside the interface
		}
		return s, nil
	})
}

// ErrClosed is returned by Update after Close, and by Updates still queued when Close ran.
var ErrClosed = fmt.Errorf("sqlite %w", store.ErrClosed)

// busyTimeoutMS bounds how long a statement waits for a lock. The flock makes this process the
// only writer, so waits are rare (a WAL checkpoint, a reader finishing); the timeout keeps them
// from surfacing as SQLITE_BUSY.
const busyTimeoutMS = 5000

// Store is a store.Store on one SQLite database file. All methods are safe for concurrent use.
type Store struct {
	reader // reads on the read-only pool

	path string
	lock *fileLock
	wdb  *sql.DB // exactly one connection, used only by the writer goroutine
	rdb  *sql.DB // read-only connections

	w writer

	migratedFrom int // the schema version Open found (store.Migrated)

	closeOnce sync.Once
	closeErr  error
	done      chan struct{} // closed by Close
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database named by u, takes the process lock, applies the
// embedded migrations and starts the writer. See the package documentation for the URL forms.
func Open(ctx context.Context, u *url.URL) (*Store, error) {
	path, err := dbPath(u)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create directory for %s: %w", path, err)
	}
	// The lock sits beside the file the path resolves to, so that every name of the database
	// (a symbolic link to it or to its directory) takes the same lock. The store keeps the path
	// as configured.
	real, err := realPath(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	lock, err := lockFile(real + ".lock")
	if err != nil {
		return nil, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	// A database this store creates is readable by its owner only (it holds message bodies and
	// push credentials); SQLite gives its -wal and -shm files the database file's mode.
	if f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	} else if !errors.Is(err, fs.ErrExist) {
		lock.unlock()
		return nil, fmt.Errorf("sqlite store %s: create database file: %w", path, err)
	}
	if err := lock.lockDatabase(path); err != nil {
		lock.unlock()
		return nil, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	s, err := open(ctx, path, lock)
	if err != nil {
		lock.unlock()
		return nil, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	return s, nil
}

// walSizeLimit is the size the WAL file is cut back to after a checkpoint that emptied it.
const walSizeLimit = 64 << 20

// walAutoCheckpoint is the WAL length, in pages, past which a commit checkpoints: 4,000 pages
// (16 MiB at 4 KiB), not SQLite's 1,000. A checkpoint copies each page once however often the
// WAL holds it, and the pages commits write are mostly the same (the rightmost leaves of the
// tables and indexes they append to): a quarter as many checkpoints, each with its fsync of the
// database file, copy fewer pages in all (the writer's checkpoint time a send fell by about two
// fifths; docs/benchmarks.md). It stays under the 4,062 frames of the WAL index's first hash
// table, so a reader looks a page up in one table. In steady use a crash leaves about that much
// WAL to recover at the next open.
const walAutoCheckpoint = 4000

// params are the connection settings of the writer and the readers alike.
func params() url.Values {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busyTimeoutMS))
	q.Set("_synchronous", "FULL")
	// Savepoint sub-journals (one per fn of a group commit) stay in memory, not in temp files.
	q.Add("_pragma", "temp_store(memory)")
	return q
}

// WriterDSN is the data source name (for the modernc driver, "sqlite") the store's writer opens
// the database at path with: WAL, durable commits (synchronous=FULL), savepoint journals in
// memory, the write lock taken at BEGIN, the WAL's writes buffered (walbuf.go). Tools that
// measure writes as the store makes them (scripts/writeceiling) open it too. One connection to
// a database at a time may use it (sql.DB.SetMaxOpenConns(1)): the WAL buffer of one
// connection may still hold the frames of a transaction it rolled back, which it writes out,
// at the offsets they had, before anything it writes later; another connection's commit in
// between would be overwritten.
func WriterDSN(path string) string {
	q := params()
	q.Set("_journal_mode", "WAL")
	// A WAL that grew in a burst (or while a long read held checkpoints back) is cut back to this
	// size once a checkpoint has copied it all, rather than keeping its largest size on disk until
	// the store closes.
	q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))
	// Writes take the database write lock at BEGIN, never half-way through a batch.
	q.Set("_txlock", "immediate")
	// The writer checkpoints the WAL into the database after a commit leaves it longer than
	// walAutoCheckpoint pages.
	q.Add("_pragma", fmt.Sprintf("wal_autocheckpoint(%d)", walAutoCheckpoint))
	// A commit's WAL writes go out in a few system calls, not two a page (walbuf.go).
	if registerWALBufVFS() == nil {
		q.Set("vfs", walBufVFSName)
	}
	return path + "?" + q.Encode()
}

func open(ctx context.Context, path string, lock *fileLock) (*Store, error) {
	wdb, err := sql.Open("sqlite", WriterDSN(path))
	if err != nil {
		return nil, err
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)

	// Check the mode took: WAL is what lets the read pool run beside the writer.
	var mode string
	if err := wdb.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open database: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		wdb.Close()
		return nil, fmt.Errorf("open database: journal_mode is %q, want wal", mode)
	}
	// And every commit syncs its WAL: durability, and the WAL buffer (walbuf.go), which writes
	// a commit's frames out at that sync, need it.
	var sync int
	if err := wdb.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open database: %w", err)
	}
	if sync < 2 {
		wdb.Close()
		return nil, fmt.Errorf("open database: synchronous is %d, want 2 (FULL) or more", sync)
	}
	from, err := migrate(ctx, wdb)
	if err != nil {
		wdb.Close()
		return nil, err
	}

	rq := params()
	rq.Set("_query_only", "1")
	rdb, err := sql.Open("sqlite", path+"?"+rq.Encode())
	if err != nil {
		wdb.Close()
		return nil, err
	}
	rdb.SetMaxOpenConns(max(4, runtime.GOMAXPROCS(0)))
	rdb.SetMaxIdleConns(max(4, runtime.GOMAXPROCS(0)))

	s := &Store{
		reader: reader{db: cachedDB{db: rdb, c: newStmtCache(rdb)}},
		path:   path,
		lock:   lock,

		migratedFrom: from,
		wdb:          wdb,
		rdb:          rdb,
		done:         make(chan struct{}),
	}
	s.w.start(s, wdb)
	return s, nil
}

// realPath resolves the symbolic links in path (for a file not created yet, in its directory), so
// that every name of one database file takes the same lock. (A hard link is another name this lock
// cannot see through; the flock on the database file itself refuses it, lockDatabase.)
func realPath(path string) (string, error) {
	p, err := filepath.EvalSymlinks(path)
	if err == nil {
		return p, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.Base(path)), nil
}

// dbPath extracts the database file path from a sqlite URL and makes it absolute, so the lock
// file and error messages name one unambiguous file.
func dbPath(u *url.URL) (string, error) {
	if u.Scheme != "sqlite" {
		return "", fmt.Errorf("sqlite store: unexpected URL scheme %q", u.Scheme)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		// Silently ignoring a parameter would hide a misconfiguration.
		return "", errors.New("sqlite store: the URL takes no query parameters or fragment")
	}
	if u.User != nil {
		return "", errors.New("sqlite store: the URL takes no user information")
	}
	var p string
	switch {
	case u.Opaque != "": // sqlite:relative/path.db
		p = u.Opaque
	case u.Host != "": // sqlite://relative/path.db: the first path element parses as the host
		p = u.Host + u.Path
	default: // sqlite:///absolute/path.db
		p = u.Path
	}
	if p == "" || strings.HasSuffix(p, "/") {
		return "", errors.New("sqlite store: the URL names no database file (want sqlite:///path/to/channels.db)")
	}
	if strings.Contains(p, "?") {
		// The driver reads everything after '?' in its DSN as parameters.
		return "", fmt.Errorf("sqlite store: database path %q must not contain '?'", p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("sqlite store: database path %q: %w", p, err)
	}
	return abs, nil
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// MigratedFrom returns the schema version Open found before migrating.
func (s *Store) MigratedFrom() int { return s.migratedFrom }

// Capabilities reports a single-process store without cross-process notifications.
func (s *Store) Capabilities() store.Capabilities {
	return store.Capabilities{Name: "sqlite", Listen: false, MultiProcess: false}
}

// Listen returns store.ErrNotSupported: only this process writes the database, so the task plane
// notifies its subscribers in-process.
func (s *Store) Listen(ctx context.Context, fn func(principal, taskID string), reconnected func()) error {
	return store.ErrNotSupported
}

// Done is closed when Close is called.
func (s *Store) Done() <-chan struct{} { return s.done }

// Close stops the writer (Updates still queued fail with ErrClosed), closes the connections and
// releases the process lock. Later calls return nil.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		s.w.stop()
		s.reader.db.c.close()
		errs := []error{s.rdb.Close(), s.wdb.Close()}
		// database/sql's Close closes idle connections only: a read still running keeps its
		// own until it ends. The lock stays until SQLite has let go of the file (unlock's closing
		// of its descriptor would drop that read's fcntl locks, and a second store could open
		// the file beside it).
		for s.rdb.Stats().OpenConnections > 0 {
			time.Sleep(5 * time.Millisecond)
		}
		errs = append(errs, s.lock.unlock())
		s.closeErr = errors.Join(errs...)
		if s.closeErr != nil {
			s.closeErr = fmt.Errorf("close sqlite store %s: %w", s.path, s.closeErr)
		}
	})
	return s.closeErr
}
