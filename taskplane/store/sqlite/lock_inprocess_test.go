package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/sqlite"
)

// posixLocksOn returns the /proc/locks lines of POSIX (fcntl) locks this process holds on the
// file at path: SQLite's own locks.
func posixLocksOn(t *testing.T, path string) []string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Skip("no /proc/locks")
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 && f[1] == "POSIX" && f[4] == fmt.Sprint(os.Getpid()) && strings.HasSuffix(f[5], fmt.Sprintf(":%d", ino)) {
			out = append(out, l)
		}
	}
	return out
}

// A refused second Open through another name of the database (a hard link) must leave the
// running store as it was. lockDatabase opens the file and, refused, closes it: closing any
// descriptor of a file drops every POSIX lock this process holds on it, SQLite's included.
func TestRefusedOpenKeepsTheRunningStoresSQLiteLocks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	path := filepath.Join(dir, "channels.db")
	s := openAt(t, path)
	if err := s.Update(ctx, insertClaim("one")); err != nil {
		t.Fatal(err)
	}
	before := posixLocksOn(t, path)
	if len(before) == 0 {
		t.Fatal("the running store holds no SQLite lock on its database")
	}
	link := filepath.Join(dir, "hard-link.db")
	if err := os.Link(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(ctx, &url.URL{Scheme: "sqlite", Path: link}); !errors.Is(err, store.ErrInUse) {
		t.Fatalf("Open through a hard link = %v, want ErrInUse", err)
	}
	if after := posixLocksOn(t, path); len(after) == 0 {
		t.Errorf("the refused Open dropped the running store's SQLite locks on the database (before: %q, after: none)", before)
	}
}

const lockChildEnv = "CHANNELS_SQLITE_LOCK_CHILD_DB"

// End to end: the store runs in a child process, which also tries (and fails, rightly) to open
// the database a second time through a hard link. An operator then looks at the live database
// with the sqlite3 shell. The store acknowledges an Update and the process dies. The
// acknowledged Update must be in the database. With its locks gone, the shell's close took
// SQLite's "last connection" path: it checkpointed, then unlinked the -wal and -shm files under
// the running store, whose later commits went into an unlinked file.
func TestAcknowledgedUpdateSurvivesARefusedOpenAndAnOperatorsSQLiteShell(t *testing.T) {
	if path := os.Getenv(lockChildEnv); path != "" {
		lockChild(path)
		return
	}
	cli, err := exec.LookPath("sqlite3")
	if err != nil {
		if os.Getenv("CI") == "true" { // scripts/test.sh installs it
			t.Fatal("no sqlite3 shell")
		}
		t.Skip("no sqlite3 shell")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "channels.db")
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAcknowledgedUpdateSurvivesARefusedOpenAndAnOperatorsSQLiteShell$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockChildEnv+"="+path)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	expect := func(want string) {
		t.Helper()
		for lines.Scan() {
			if lines.Text() == want {
				return
			}
		}
		t.Fatalf("child never said %q", want)
	}
	expect("ready")
	out, err := exec.CommandContext(ctx, cli, path, "SELECT count(*) FROM claims").CombinedOutput()
	if err != nil {
		t.Fatalf("sqlite3: %v\n%s", err, out)
	}
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Errorf("the sqlite3 shell removed the running store's WAL: %v", err)
	}
	fmt.Fprintln(stdin, "go")
	expect("acked")
	cmd.Process.Kill() // the store's process dies after the acknowledgement
	cmd.Wait()

	s, err := sqlite.Open(ctx, &url.URL{Scheme: "sqlite", Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetClaim(ctx, "alice", "slack", "two"); err != nil {
		t.Errorf("the acknowledged Update is gone: %v", err)
	}
}

func lockChild(path string) {
	ctx := context.Background()
	die := func(err error) { fmt.Fprintln(os.Stderr, "child:", err); os.Exit(2) }
	s, err := sqlite.Open(ctx, &url.URL{Scheme: "sqlite", Path: path})
	if err != nil {
		die(err)
	}
	if err := s.Update(ctx, insertClaim("one")); err != nil {
		die(err)
	}
	link := path + "-hard-link.db"
	if err := os.Link(path, link); err != nil {
		die(err)
	}
	if _, err := sqlite.Open(ctx, &url.URL{Scheme: "sqlite", Path: link}); !errors.Is(err, store.ErrInUse) {
		die(fmt.Errorf("second open: %v", err))
	}
	os.Remove(link)
	fmt.Println("ready")
	bufio.NewScanner(os.Stdin).Scan()
	if err := s.Update(ctx, insertClaim("two")); err != nil {
		die(err)
	}
	fmt.Println("acked")
	time.Sleep(time.Minute) // killed by the parent
	os.Exit(0)
}

// Close releases the process lock only once the store no longer has the database open: a read
// still running on the read pool keeps its connection (database/sql's DB.Close does not wait for
// connections in use), and a second store must not open the file beside it.
func TestCloseWaitsForReadsBeforeReleasingTheLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "c.db")
	s, err := sqlite.Open(ctx, &url.URL{Scheme: "sqlite", Path: path})
	if err != nil {
		t.Fatal(err)
	}
	release, err := sqlite.HoldRead(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		release()
		t.Fatalf("Close returned (%v) while a read still had the database open", err)
	case <-time.After(300 * time.Millisecond):
	}
	if s2, err := sqlite.Open(ctx, &url.URL{Scheme: "sqlite", Path: path}); !errors.Is(err, store.ErrInUse) {
		if err == nil {
			s2.Close()
		}
		t.Errorf("a second store opening the database while the closing one still reads it: %v, want ErrInUse", err)
	}
	release()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return once the read ended")
	}
	s2, err := sqlite.Open(ctx, &url.URL{Scheme: "sqlite", Path: path})
	if err != nil {
		t.Fatalf("open after Close: %v", err)
	}
	s2.Close()
}
