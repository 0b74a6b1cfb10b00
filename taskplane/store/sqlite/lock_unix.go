//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/channels-dev/channels/taskplane/store"
)

// fileLock is an exclusive flock on "<db>.lock". It keeps a second process (or a second Open in
// this one: flock locks belong to the open file description, not the process) off the database,
// because the group-commit writer assumes it is the only writer (invariant 10 of docs/architecture.md).
// The kernel releases the lock when the holder dies, so a crash never leaves a stale lock.
type fileLock struct {
	f  *os.File
	db *os.File // the database file itself, flocked too (lockDatabase)
}

// lockFile takes the lock without waiting. When another holder has it, the error wraps
// store.ErrInUse and names the file and the holder's pid, read from the lock file.
func lockFile(path string) (*fileLock, error) {
	// Go opens files with O_CLOEXEC, so child processes do not inherit the lock.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another channels process (pid %s) is using this database; lock file %s is held: %w",
				holder, path, store.ErrInUse)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The pid is only for the message a refused process prints; the lock itself is the flock.
	pid := strconv.Itoa(os.Getpid()) + "\n"
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(pid), 0)
	}
	return &fileLock{f: f}, nil
}

// readHolder returns the pid written by the lock's holder, or "unknown".
func readHolder(f *os.File) string {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid := strings.TrimSpace(string(buf[:n]))
	if _, err := strconv.Atoi(pid); err != nil {
		return "unknown"
	}
	return pid
}

// lockDatabase adds an exclusive flock on the database file itself. flock locks the file, not a
// name of it, so a process that reaches the database through a hard link (a name the lock file
// beside it cannot see) is refused too. SQLite's own locks are fcntl byte-range locks, which flock
// does not touch; the descriptor stays open until unlock, after SQLite has closed the database
// (closing a descriptor drops this process's fcntl locks on the file).
func (l *fileLock) lockDatabase(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open database file: %w", err)
	}
	// A holder of the lock file's name is refused above; what holds the database file now is
	// another name of it (a hard link) or `config check --connect` testing it for an instant
	// (checkUnlocked): the second lets go at once, so it is waited out briefly.
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	for try := 0; errors.Is(err, unix.EWOULDBLOCK) && try < 20; try++ {
		time.Sleep(10 * time.Millisecond)
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("another channels process is using this database file under another name (a hard link): %w",
				store.ErrInUse)
		}
		return fmt.Errorf("lock %s: %w", path, err)
	}
	l.db = f
	return nil
}

// unlock releases the lock. The file stays: removing it would let a process that opened the old
// file and one that creates a new one both hold "the" lock.
func (l *fileLock) unlock() error {
	var errs []error
	if l.db != nil {
		errs = append(errs, unix.Flock(int(l.db.Fd()), unix.LOCK_UN), l.db.Close())
	}
	errs = append(errs, unix.Flock(int(l.f.Fd()), unix.LOCK_UN), l.f.Close())
	return errors.Join(errs...)
}

// checkUnlocked reports store.ErrInUse when a process holds the database file at path (the flock
// of lockDatabase), taking nothing itself beyond a moment's shared lock.
func checkUnlocked(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open database file: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("another channels process is using this database: %w", store.ErrInUse)
		}
		return fmt.Errorf("lock %s: %w", path, err)
	}
	return unix.Flock(int(f.Fd()), unix.LOCK_UN)
}
