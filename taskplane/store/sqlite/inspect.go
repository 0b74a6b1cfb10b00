package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"

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
