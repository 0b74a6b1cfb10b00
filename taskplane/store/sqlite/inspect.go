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

	"github.com/channels-dev/channels/taskplane/store"
)

func init() {
	store.RegisterInspector("sqlite", Inspect)
}

// Inspect reports whether the database named by u exists and its schema version, without
// creating the file, its directory or its lock file, and without migrating: the database is read
// on a read-only connection. A database a running process holds is store.ErrInUse.
func Inspect(ctx context.Context, u *url.URL) (store.Inspection, error) {
	path, err := dbPath(u)
	if err != nil {
		return store.Inspection{}, err
	}
	ms, err := migrations()
	if err != nil {
		return store.Inspection{}, err
	}
	in := store.Inspection{Latest: ms[len(ms)-1].Version}
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := creatable(path); err != nil {
			return in, fmt.Errorf("sqlite store %s: %w", path, err)
		}
		return in, nil
	}
	if err != nil {
		return in, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return in, fmt.Errorf("sqlite store %s: not a regular file", path)
	}
	in.Exists = true
	if err := checkUnlocked(path); err != nil {
		return in, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	if in.Version, err = schemaVersion(ctx, path); err != nil {
		return in, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	return in, nil
}

// schemaVersion reads the schema version of the database file at path on a read-only connection
// (SQLite's mode=ro: it writes nothing to the database; like any reader of a WAL database it may
// create the -wal and -shm files beside it, owned as the database is), 0 for a database without
// a schema.
func schemaVersion(ctx context.Context, path string) (int, error) {
	dsn := (&url.URL{Scheme: "file", Path: path, RawQuery: url.Values{
		"mode":          {"ro"},
		"_busy_timeout": {fmt.Sprint(busyTimeoutMS)},
	}.Encode()}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&tables); err != nil {
		return 0, fmt.Errorf("read schema: %w", err)
	}
	if tables == 0 {
		return 0, nil
	}
	var v int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// creatable reports why Open could not create a database at path, where there is none: Open
// makes the missing directories above path, then the file, and does neither through a link that
// leads nowhere (the file is not made at its target). What decides is whether a directory can be
// made in the nearest directory that exists, probed with one made and removed at once
// (permissions alone do not tell: root may write where a file system refuses).
func creatable(path string) error {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return errors.New("cannot create it: it is a link to a file that does not exist")
	}
	dir := filepath.Dir(path)
	for {
		fi, err := os.Stat(dir)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("cannot create it: %s is not a directory", dir)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cannot create it: %w", err)
		}
		if _, err := os.Lstat(dir); err == nil {
			return fmt.Errorf("cannot create it: %s is a link to a directory that does not exist", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	probe, err := os.MkdirTemp(dir, ".channels-check-")
	if err != nil {
		return fmt.Errorf("cannot create it in %s: %w", dir, err)
	}
	return os.Remove(probe)
}
