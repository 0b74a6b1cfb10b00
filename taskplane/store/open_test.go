package store_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/channels-dev/channels/taskplane/store"
)

// Redact hides a password in the query as well as in the userinfo.
func TestRedactHidesAQueryPassword(t *testing.T) {
	u, err := url.Parse("postgres://channels:hunter2@db/channels?sslmode=require&password=hunter2&sslpassword=hunter2")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := store.Redact(u), "postgres://channels:xxxxx@db/channels?sslmode=require&password=xxxxx&sslpassword=xxxxx"; got != want {
		t.Fatalf("Redact = %q, want %q", got, want)
	}
}

// Open takes URLs only; the error for anything else never holds a password, whether it is in a
// URL's query or in libpq's key=value form (whose spaces a URL would escape).
func TestOpenNeverQuotesAPassword(t *testing.T) {
	for _, raw := range []string{
		"nosuchdriver://channels@db/channels?password=hunter2",
		"host=db user=channels password=hunter2 dbname=channels",
		"host=db password='hunter2 hunter2'",
	} {
		_, err := store.Open(context.Background(), raw)
		if err == nil {
			t.Fatalf("Open(%q) succeeded", raw)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q): %v", raw, err)
		}
	}
}
