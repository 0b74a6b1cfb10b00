//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
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
	id fileID   // db's, in held while the lock lasts
}

// fileID names a file whatever its path: device and inode.
type fileID struct{ dev, ino uint64 }

// held lists the database files a store of this process has locked, from lockDatabase to unlock
// (which Close calls once SQLite has let go of the file). Closing any descriptor of a file drops
// every fcntl lock this process holds on it, SQLite's own included; so a second Open or an
// Inspect in this process of a file a store here holds, under any name, is refused without
// opening the file: otherwise the running store would be left without the locks that keep
// another SQLite client (the sqlite3 shell) from checkpointing and removing its WAL under it.
// The mutex is held through each check and lock, so no two of them interleave.
var held struct {
	sync.Mutex
	ids map[fileID]bool
}

// errHeldHere is the refusal of a database file a store of this process holds.
var errHeldHere = fmt.Errorf("a store of this process has this database file open (under this or another name): %w", store.ErrInUse)

// heldHere returns the id of the file at path, or errHeldHere when a store of this process holds
// it. The caller holds held's mutex.
func heldHere(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, fmt.Errorf("stat database file: %w", err)
	}
	id := fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)} // (the field types differ by platform)
	if held.ids[id] {
		return id, errHeldHere
	}
	return id, nil
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
	held.Lock()
	defer held.Unlock()
	id, err := heldHere(path)
	if err != nil {
		return err
	}
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
	if held.ids == nil {
		held.ids = map[fileID]bool{}
	}
	held.ids[id] = true
	l.db, l.id = f, id
	return nil
}

// unlock releases the lock. The file stays: removing it would let a process that opened the old
// file and one that creates a new one both hold "the" lock.
func (l *fileLock) unlock() error {
	var errs []error
	if l.db != nil {
		held.Lock()
		errs = append(errs, unix.Flock(int(l.db.Fd()), unix.LOCK_UN), l.db.Close())
		delete(held.ids, l.id)
		held.Unlock()
	}
	errs = append(errs, unix.Flock(int(l.f.Fd()), unix.LOCK_UN), l.f.Close())
	return errors.Join(errs...)
}

// checkUnlocked reports store.ErrInUse when a process holds the database file at path (the flock
// of lockDatabase), taking nothing itself beyond a moment's shared lock.
func checkUnlocked(path string) error {
	held.Lock()
	defer held.Unlock()
	if _, err := heldHere(path); err != nil {
		return err
	}
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
