package sqlite_test

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/channels-dev/channels/taskplane/store/sqlite"
)

// TestASchemaNewerThanTheBinaryIsRefused: a database migrated by a newer build is not opened by an
// older one, which would write rows the newer schema does not expect.
func TestASchemaNewerThanTheBinaryIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "channels.db")
	openAt(t, path).Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO schema_migrations VALUES (99, 'future', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := sqlite.Open(context.Background(), &url.URL{Scheme: "sqlite", Path: path})
	if err == nil {
		s.Close()
		t.Fatal("a schema at version 99 was opened")
	}
	if !strings.Contains(err.Error(), "newer") {
		t.Errorf("refused with %q, want it to say the schema is newer", err)
	}
}
