package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// configCheckConnect runs "config check --connect" on the store at url and returns its report,
// failing the test unless it exits with want.
func configCheckConnect(t *testing.T, url string, want int) string {
	t.Helper()
	c := newCLI(t, nil)
	if code := c.run(context.Background(), "config", "check", "--store", url, "--connect"); code != want {
		t.Fatalf("config check --connect --store %s: exit %d, want %d\n%s%s", url, code, want, c.stdout.String(), c.stderr.String())
	}
	return c.stdout.String()
}

// TestConfigCheckConnectChangesNothing: --connect checks that the store can be reached and says
// what serve will do with it, but creates, locks and migrates nothing.
func TestConfigCheckConnectChangesNothing(t *testing.T) {
	t.Run("a missing SQLite file and its directories are not created", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "some", "missing")
		out := configCheckConnect(t, "sqlite://"+filepath.Join(dir, "x.db"), 0)
		if !strings.Contains(out, "does not exist yet: serve will create a new, empty store there") {
			t.Errorf("report:\n%s", out)
		}
		if _, err := os.Stat(filepath.Dir(dir)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the check created %s (%v)", filepath.Dir(dir), err)
		}
	})

	// A store serve could not create is an error, not "serve will create it": a link to a
	// directory that is not there, a place no directory can be made, a role that may not create
	// the schema's tables.
	t.Run("a SQLite store serve could not create is an error", func(t *testing.T) {
		dir := t.TempDir()
		link := filepath.Join(dir, "link.db")
		if err := os.Symlink(filepath.Join(dir, "nowhere", "real.db"), link); err != nil {
			t.Fatal(err)
		}
		if out := configCheckConnect(t, "sqlite://"+link, 1); !strings.Contains(out, "error: store: sqlite store "+link+": cannot create it: it is a link to") {
			t.Errorf("a dangling link:\n%s", out)
		}
		file := filepath.Join(dir, "file")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if out := configCheckConnect(t, "sqlite://"+filepath.Join(file, "x.db"), 1); !strings.Contains(out, "not a directory") {
			t.Errorf("under a file:\n%s", out)
		}
		if before, after := "file,link.db", dirNames(t, dir); after != before {
			t.Errorf("files after the checks: %s, before: %s", after, before)
		}
	})

	t.Run("an older SQLite schema is reported, not migrated", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "old.db")
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL);
			INSERT INTO schema_migrations VALUES (1, 'init', 0)`); err != nil {
			t.Fatal(err)
		}
		db.Close()
		before := dirNames(t, filepath.Dir(path))
		out := configCheckConnect(t, "sqlite://"+path, 0)
		if !strings.Contains(out, "has schema version 1, older than this binary's") || !strings.Contains(out, "serve will migrate it") {
			t.Errorf("report:\n%s", out)
		}
		if after := dirNames(t, filepath.Dir(path)); after != before {
			t.Errorf("files after the check: %s, before: %s", after, before)
		}
		db, err = sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var v int
		if err := db.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil || v != 1 {
			t.Errorf("schema version after the check = %d (%v), want 1", v, err)
		}
	})

	t.Run("a current SQLite store is ok", func(t *testing.T) {
		url := "sqlite://" + filepath.Join(t.TempDir(), "cur.db")
		st, err := store.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
		if out := configCheckConnect(t, url, 0); strings.Contains(out, "store:") {
			t.Errorf("report:\n%s", out)
		}
	})

	t.Run("a SQLite store a server holds is reported", func(t *testing.T) {
		url := "sqlite://" + filepath.Join(t.TempDir(), "held.db")
		st, err := store.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if out := configCheckConnect(t, url, 0); !strings.Contains(out, "warning: store: in use by another process") {
			t.Errorf("report:\n%s", out)
		}
	})

	t.Run("a Postgres database is not migrated", func(t *testing.T) {
		url := storetest.PostgresURL(t)
		out := configCheckConnect(t, url, 0)
		if !strings.Contains(out, "has no schema yet: serve will create it") {
			t.Errorf("report:\n%s", out)
		}
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var table *string
		if err := conn.QueryRow(context.Background(), `SELECT to_regclass('schema_migrations')::text`).Scan(&table); err != nil || table != nil {
			t.Errorf("schema_migrations after the check: %v (%v), want none", table, err)
		}
	})

	t.Run("a Postgres role that may not create the schema is an error", func(t *testing.T) {
		url := storetest.PostgresURL(t)
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		role := fmt.Sprintf("nocreate_%d", time.Now().UnixNano())
		var schema string
		if err := conn.QueryRow(context.Background(), `SELECT current_schema()`).Scan(&schema); err != nil {
			t.Fatal(err)
		}
		// The role may use the test's schema, not create in it.
		if _, err := conn.Exec(context.Background(), `CREATE ROLE `+role+` LOGIN; GRANT USAGE ON SCHEMA `+pgx.Identifier{schema}.Sanitize()+` TO `+role); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			conn.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role)
		})
		u, err := neturl.Parse(url)
		if err != nil {
			t.Fatal(err)
		}
		u.User = neturl.User(role)
		if out := configCheckConnect(t, u.String(), 1); !strings.Contains(out, "may not create tables in schema") {
			t.Errorf("report:\n%s", out)
		}
	})
}

// dirNames lists the names in dir, for comparing what a command left behind.
func dirNames(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return strings.Join(names, ",")
}

// TestConfigCheckTakesServesFlags: config check reads serve's command line as serve does, so the
// warning serve logs for a plain --admin-token is listed, and a bad flag value is reported.
func TestConfigCheckTakesServesFlags(t *testing.T) {
	c := newCLI(t, nil)
	if code := c.run(context.Background(), "config", "check", "--admin-token", "0123456789abcdef0123"); code != 0 {
		t.Fatalf("exit %d: %s%s", code, c.stdout.String(), c.stderr.String())
	}
	if out := c.stdout.String(); !strings.Contains(out, "warning: flag --admin-token puts a secret in the process list") || strings.Contains(out, "0123456789abcdef0123") {
		t.Errorf("report:\n%s", out)
	}
	c = newCLI(t, nil)
	if code := c.run(context.Background(), "config", "check", "--listen", "0.0.0.0:8788"); code != 1 || !strings.Contains(c.stdout.String(), "error:") {
		t.Errorf("--listen off loopback without credentials: exit %d\n%s", code, c.stdout.String())
	}
}
