package config

import (
	"strings"
	"testing"
	"time"
)

// A mistake inside the sources list is reported at its line in the config file (a re-marshalled
// copy of the list once gave the line inside the copy: "line 3", not the file's line 7).
func TestSourcesErrorNamesTheFilesLine(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	path := writeFile(t, "channels.yaml",
		"listen: 127.0.0.1:8788\n"+ // 1
			"executor: echo\n"+ // 2
			"\n"+ // 3
			"sources:\n"+ // 4
			"  - type: webhook\n"+ // 5
			"    name: ci\n"+ // 6
			"    principle: ci-team\n") // 7: the misspelt field
	getenv, environ := envOf(nil)
	_, err := Load(path, nil, getenv, environ)
	if err == nil {
		t.Fatal("a misspelt source field loaded")
	}
	if !strings.Contains(err.Error(), "line 7") {
		t.Fatalf("the error does not name the file's line 7 where the misspelt field is:\n%v", err)
	}
}

// A config file of two YAML documents is refused: the second would be neither applied nor
// checked, so its unknown key and its invalid executor would pass without a word.
func TestASecondYAMLDocumentIsNotSilentlyIgnored(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	path := writeFile(t, "channels.yaml", "listen: 127.0.0.1:8788\n---\nexecutor: nonsense\nno_such_key: 1\n")
	getenv, environ := envOf(nil)
	l, err := Load(path, nil, getenv, environ)
	if err == nil {
		t.Fatalf("a second YAML document was ignored silently (executor %q; no_such_key unreported)", l.Executor)
	}
}

// listen is host:port with a port: an empty one (which serve would take as any free port) and one
// out of range (which config check passed and serve then failed on) are refused.
func TestListenNeedsAValidPort(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	for _, listen := range []string{"127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:-1"} {
		c := Default()
		c.Listen = listen
		if err := c.Validate(); err == nil {
			t.Errorf("listen %q validated", listen)
		}
	}
}

// Host names are case-insensitive: LOCALHOST is the loopback name localhost (as
// netguard.LoopbackHost reads a Host header), so serve starts on it without credentials.
func TestListenOnLOCALHOSTIsLoopback(t *testing.T) {
	c := Default()
	c.Listen = "LOCALHOST:8788"
	if !c.ListensOnLoopback() {
		t.Fatal("LOCALHOST:8788 is not seen as loopback")
	}
}

// admin_refresh is "how often the /admin page reloads itself (0 = never)" in whole seconds: a
// sub-second value, which the page would read as never, is refused.
func TestSubSecondAdminRefreshIsNotSilentlyNever(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	c := Default()
	c.AdminRefresh = 500 * time.Millisecond
	if err := c.Validate(); err == nil && int(c.AdminRefresh/time.Second) == 0 {
		t.Fatal("admin_refresh 500ms validated, and the dashboard then never refreshes")
	}
}

// A refresh of a second and a half would reload every second: refused, as the docs give it in
// whole seconds, rather than rounded without a word.
func TestAdminRefreshOfAFractionOfASecondIsRefused(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	c := Default()
	c.AdminRefresh = 1500 * time.Millisecond
	if err := c.Validate(); err == nil {
		t.Fatal("admin_refresh 1.5s validated; the page would reload every 1s")
	}
	c.AdminRefresh = 90 * time.Second
	if err := c.Validate(); err != nil {
		t.Fatalf("admin_refresh 90s: %v", err)
	}
}
