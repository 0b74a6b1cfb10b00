package redact_test

import (
	"strings"
	"testing"

	"github.com/channels-dev/channels/internal/redact"
)

// A store URL's password hides in its userinfo or in a password or sslpassword parameter of its
// query (any case, escaped or not), or, in libpq's key=value form, in a parameter: every one is
// replaced, and the rest of the string is kept as written.
func TestPasswordHidesUserinfoQueryAndKeyValuePasswords(t *testing.T) {
	for raw, want := range map[string]string{
		"postgres://channels:hunter2@db:5432/channels":                         "postgres://channels:xxxxx@db:5432/channels",
		"postgres://channels@db/channels?password=hunter2":                     "postgres://channels@db/channels?password=xxxxx",
		"postgres://channels@db/channels?sslmode=require&password=hunter2&x=1": "postgres://channels@db/channels?sslmode=require&password=xxxxx&x=1",
		"postgresql://db/channels?PassWord=hunter2":                            "postgresql://db/channels?PassWord=xxxxx",
		"postgres://db/channels?sslpassword=hunter2&sslkey=/k.pem":             "postgres://db/channels?sslpassword=xxxxx&sslkey=/k.pem",
		"postgres://db/channels?pass%77ord=hunter2":                            "postgres://db/channels?pass%77ord=xxxxx",
		"postgres://db/channels?sslmode=disable;password=hunter2":              "postgres://db/channels?sslmode=disable;password=xxxxx",
		"postgres://u:hunter2@db/channels?password=hunter2":                    "postgres://u:xxxxx@db/channels?password=xxxxx",
		"host=db user=channels password=hunter2 dbname=channels":               "host=db user=channels password=xxxxx dbname=channels",
		"host=db password = 'hunter2 with spaces' sslpassword=hunter2":         "host=db password = xxxxx sslpassword=xxxxx",
		"PASSWORD='it\\'s hunter2'":                                            "PASSWORD=xxxxx",
		"postgres://u:hunter%zz2@db/channels":                                  "[unparsable URL]",
		"sqlite:///var/lib/channels/channels.db":                               "sqlite:///var/lib/channels/channels.db",
		"postgres://channels@db/channels?sslmode=verify-full&passfile=/run/p":  "postgres://channels@db/channels?sslmode=verify-full&passfile=/run/p",
		"postgres://channels@db/channels?password=":                            "postgres://channels@db/channels?password=",
	} {
		got := redact.Password(raw)
		if got != want {
			t.Errorf("Password(%q) = %q, want %q", raw, got, want)
		}
		if strings.Contains(got, "hunter") {
			t.Errorf("Password(%q) = %q still holds the password", raw, got)
		}
		if has := redact.HasPassword(raw); has != (got != raw && got != "[unparsable URL]") {
			t.Errorf("HasPassword(%q) = %v", raw, has)
		}
	}
	// A password that happens to read like the mask is still a password.
	if !redact.HasPassword("postgres://db/x?password=xxxxx") || !redact.HasPassword("postgres://u:xxxxx@db/x") {
		t.Error("HasPassword missed a password equal to the mask")
	}
}
