package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
)

// sqlStater is a database error with its SQLSTATE (Postgres: pgconn.PgError).
type sqlStater interface{ SQLState() string }

// sqliteCoder is a database error with its SQLite result code (modernc.org/sqlite's *Error);
// an extended code's low byte is its primary code.
type sqliteCoder interface{ Code() int }

// SQLite primary result codes of a storage failure, and of a lock held too long.
const (
	sqliteBusy     = 5  // SQLITE_BUSY: the database file is locked (by another connection or process)
	sqliteLocked   = 6  // SQLITE_LOCKED: a table is locked (by the same process)
	sqliteReadOnly = 8  // SQLITE_READONLY: attempt to write a readonly database
	sqliteIOErr    = 10 // SQLITE_IOERR: a disk I/O error
	sqliteCorrupt  = 11 // SQLITE_CORRUPT: the database disk image is malformed
	sqliteFull     = 13 // SQLITE_FULL: database or disk is full
	sqliteCantOpen = 14 // SQLITE_CANTOPEN: unable to open the database file
	sqliteNotADB   = 26 // SQLITE_NOTADB: file is not a database
)

// StorageFault reports whether err carries a failure of the database's storage — it cannot
// write (read-only, disk full) or read its files (I/O error, corruption) — rather than an answer
// to the statement (a constraint, a row not found): on Postgres SQLSTATE class 53 (insufficient
// resources: disk full, out of memory), class 58 (system error: I/O) or 25006 (read-only
// transaction: a read-only database or a standby); on SQLite the result codes READONLY, IOERR,
// CORRUPT, FULL, CANTOPEN and NOTADB, extended codes included. Such a failure shows at the
// statement, inside a transaction's fn, which returns it as its own error; callers that tell
// the store's failures from their own (readiness, the metrics) ask this.
//
// It recognises the drivers' errors by their methods, so that shared code needs neither driver.
func StorageFault(err error) bool {
	var s sqlStater
	if errors.As(err, &s) {
		code := s.SQLState()
		return strings.HasPrefix(code, "53") || strings.HasPrefix(code, "58") || code == "25006"
	}
	var c sqliteCoder
	if errors.As(err, &c) {
		switch c.Code() & 0xff {
		case sqliteReadOnly, sqliteIOErr, sqliteCorrupt, sqliteFull, sqliteCantOpen, sqliteNotADB:
			return true
		}
	}
	return false
}

// retrier is a driver error that says whether the operation may be tried again as it is
// (pgconn's: a connection closed before it was used, a lost connection before anything was sent).
type retrier interface{ SafeToRetry() bool }

// Unavailable reports whether err says the store could not be reached or could not do the work
// for a reason of its own, one that passes: a connection refused, reset or closed (the database
// restarting, failing over, a network fault), a server shutting down or starting up (Postgres
// SQLSTATE class 08, 57P01-57P03), an SQLite database locked for longer than the busy timeout
// (BUSY, LOCKED: another process holds its write lock, e.g. a migration or a backup), a
// storage fault (StorageFault), or a store closed under the caller (ErrClosed, and the closed
// handles of database/sql and pgxpool under a read). The caller may try again
// later; a client is told 503 rather than 500. Errors of the caller's own (not found, a
// conflict, a constraint) and a cancelled context are not.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the caller's context ended (a deadline satisfies net.Error too)
	}
	if StorageFault(err) || errors.Is(err, ErrClosed) || closedHandle(err) {
		return true
	}
	var s sqlStater
	if errors.As(err, &s) {
		code := s.SQLState()
		return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03"
	}
	var c sqliteCoder
	if errors.As(err, &c) && (c.Code()&0xff == sqliteBusy || c.Code()&0xff == sqliteLocked) {
		return true
	}
	var r retrier
	if errors.As(err, &r) && r.SafeToRetry() {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, sql.ErrConnDone)
}

// closedHandle reports whether err is, or wraps, the error database/sql ("sql: database is
// closed", "sql: statement is closed": neither exported) or pgxpool (puddle's ErrClosedPool,
// "closed pool", matched here by its text so that this package needs no driver) return for a
// read on a handle closed under it.
func closedHandle(err error) bool {
	switch e := err.(type) {
	case nil:
		return false
	case interface{ Unwrap() []error }:
		for _, u := range e.Unwrap() {
			if closedHandle(u) {
				return true
			}
		}
		return false
	}
	if msg := err.Error(); msg == "sql: database is closed" || msg == "sql: statement is closed" || msg == "closed pool" {
		return true
	}
	return closedHandle(errors.Unwrap(err))
}
