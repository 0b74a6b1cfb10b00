package sqlite_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/channels-dev/channels/taskplane/store/sqlite"
)

// TestInspectAgreesWithOpenOnWhereAStoreCanBeMade: for a database that is not there yet, Inspect
// (config check --connect) refuses exactly the places where Open (serve) could not make it: a link
// that leads nowhere, in place of the file or of a directory above it, and a path under a file.
// Missing directories, and a link to a directory that exists, are fine.
func TestInspectAgreesWithOpenOnWhereAStoreCanBeMade(t *testing.T) {
	for _, tc := range []struct {
		name string
		lay  func(t *testing.T, dir string) string // builds the layout, returns the store's path
	}{
		{"missing directories", func(t *testing.T, dir string) string { return filepath.Join(dir, "a", "b", "channels.db") }},
		{"a link to an existing directory", func(t *testing.T, dir string) string {
			mustDo(t, os.Mkdir(filepath.Join(dir, "real"), 0o700), os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "data")))
			return filepath.Join(dir, "data", "channels.db")
		}},
		{"a file link whose target's directory exists", func(t *testing.T, dir string) string {
			mustDo(t, os.Mkdir(filepath.Join(dir, "data"), 0o700), os.Symlink(filepath.Join(dir, "data", "real.db"), filepath.Join(dir, "channels.db")))
			return filepath.Join(dir, "channels.db")
		}},
		{"a file link whose target's directory is missing", func(t *testing.T, dir string) string {
			mustDo(t, os.Symlink(filepath.Join(dir, "nowhere", "real.db"), filepath.Join(dir, "channels.db")))
			return filepath.Join(dir, "channels.db")
		}},
		{"a directory link that leads nowhere", func(t *testing.T, dir string) string {
			mustDo(t, os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "data")))
			return filepath.Join(dir, "data", "channels.db")
		}},
		{"a path under a file", func(t *testing.T, dir string) string {
			mustDo(t, os.WriteFile(filepath.Join(dir, "file"), nil, 0o600))
			return filepath.Join(dir, "file", "channels.db")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &url.URL{Scheme: "sqlite", Path: tc.lay(t, t.TempDir())}
			in, ierr := sqlite.Inspect(context.Background(), u)
			if ierr == nil && in.Exists {
				t.Fatalf("Inspect found a store that is not there")
			}
			s, oerr := sqlite.Open(context.Background(), u)
			if s != nil {
				s.Close()
			}
			if (ierr == nil) != (oerr == nil) {
				t.Fatalf("Inspect: %v; Open: %v; want both to succeed or both to fail", ierr, oerr)
			}
		})
	}
}

func mustDo(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
