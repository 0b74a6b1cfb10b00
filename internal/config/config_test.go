package config

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func envOf(m map[string]string) (func(string) string, []string) {
	var environ []string
	for k, v := range m {
		environ = append(environ, k+"="+v)
	}
	return func(k string) string { return m[k] }, environ
}

func TestNoConfigGivesLoopbackSQLiteEcho(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "/data")
	getenv, environ := envOf(nil)
	l, err := Load("", nil, getenv, environ)
	if err != nil {
		t.Fatal(err)
	}
	if l.Listen != "127.0.0.1:8788" || l.Executor != "echo" || l.Store != "sqlite:///data/channels/channels.db" {
		t.Fatalf("defaults: %+v", l.Config)
	}
	if !l.ListensOnLoopback() || l.EffectivePublicURL() != "http://127.0.0.1:8788" {
		t.Fatalf("loopback %v, public %s", l.ListensOnLoopback(), l.EffectivePublicURL())
	}
}

// With no setting, the server keeps terminal tasks and idempotency claims for the documented 30
// days (DESIGN.md §4, invariant 3), whatever the task plane's own default.
func TestRetentionDefaultsToThirtyDays(t *testing.T) {
	getenv, environ := envOf(nil)
	l, err := Load("", nil, getenv, environ)
	if err != nil {
		t.Fatal(err)
	}
	if l.Retention != 30*24*time.Hour {
		t.Fatalf("retention %s, want 720h (30 days)", l.Retention)
	}
}

// With neither XDG_DATA_HOME nor HOME the default store has no place: there is none (a command
// that needs it fails with ErrNoStore), never one in the temporary directory; a store given
// explicitly is used as ever.
func TestNoDataHomeGivesNoDefaultStore(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", "")
	if d, s := DataHome(), Default().Store; d != "" || s != "" {
		t.Fatalf("data home %q, default store %q", d, s)
	}
	getenv, environ := envOf(nil)
	l, err := Load("", nil, getenv, environ)
	if err != nil || l.Store != "" {
		t.Fatalf("store %q, %v", l.Store, err)
	}
	getenv, environ = envOf(map[string]string{"CHANNELS_STORE": "sqlite:///srv/c.db"})
	if l, err := Load("", nil, getenv, environ); err != nil || l.Store != "sqlite:///srv/c.db" {
		t.Fatalf("explicit store: %v", err)
	}
	t.Setenv("HOME", "/home/op")
	if s := Default().Store; s != "sqlite:///home/op/.local/share/channels/channels.db" {
		t.Fatalf("default store with HOME: %q", s)
	}
}

func TestPrecedenceFlagOverEnvOverFileOverDefault(t *testing.T) {
	path := writeFile(t, "c.yaml", "listen: 127.0.0.1:1000\nexecutor: conformance\nconcurrency: 3\nblocking_timeout: 5s\n")
	getenv, environ := envOf(map[string]string{"CHANNELS_LISTEN": "127.0.0.1:2000", "CHANNELS_CONCURRENCY": "4"})
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	AddFlags(fs)
	if err := fs.Parse([]string{"--listen", "127.0.0.1:3000"}); err != nil {
		t.Fatal(err)
	}
	l, err := Load(path, fs, getenv, environ)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		got    any
		want   any
		origin Source
	}{
		"listen":           {l.Listen, "127.0.0.1:3000", FromFlag},
		"concurrency":      {l.Concurrency, 4, FromEnv},
		"executor":         {l.Executor, "conformance", FromFile},
		"blocking_timeout": {l.BlockingTimeout, 5 * time.Second, FromFile},
		"log_level":        {l.LogLevel, "info", FromDefault},
	}
	for key, w := range want {
		if w.got != w.want || l.Origin[key] != w.origin {
			t.Errorf("%s = %v from %s, want %v from %s", key, w.got, l.Origin[key], w.want, w.origin)
		}
	}
}

func TestEveryKeyHasAFlagOfTheSameName(t *testing.T) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	AddFlags(fs)
	for _, k := range Keys() {
		if fs.Lookup(strings.ReplaceAll(k, "_", "-")) == nil {
			t.Errorf("key %s has no flag", k)
		}
	}
}

func TestUnknownKeysAreRejectedByName(t *testing.T) {
	path := writeFile(t, "c.yaml", "listen: 127.0.0.1:1\nlisten_adress: x\nfoo: 1\n")
	getenv, environ := envOf(nil)
	_, err := Load(path, nil, getenv, environ)
	if err == nil || !strings.Contains(err.Error(), "unknown keys foo, listen_adress") {
		t.Fatalf("err = %v", err)
	}
}

func TestBadValuesAreRejected(t *testing.T) {
	for name, body := range map[string]string{
		"duration": "retention: forever\n",
		"short":    "retention: 10m\n",
		"int":      "concurrency: many\n",
		"executor": "executor: gpt\n",
		"zero":     "concurrency: 0\n",
		"public":   "public_url: /relative\n",
		"portonly": "public_url: http://:8788\n", // an authority of only a port names no host
		"lease":    "turn_lease: 4s\n",           // renewed every third: a store stall of a second or two stops every turn
		"listen":   "listen: nocolon\n",
		"dedupe":   "message_id_dedupe: sometimes\n",
		"tiny":     "task_timeout: 3ns\n", // positive, but serve's sweep would tick every 0s
		"negative": "health_interval: -1s\n",
		"spin":     "keep_alive: 1ns\n", // a comment written without pause
		"spin1ms":  "keep_alive: 1ms\n", // a comment every millisecond on every stream
		"prune":    "retention_interval: 1ms\n",
		"health":   "health_interval: 1ms\n",
		"worker":   "worker_lease: 1ms\n",       // every worker turn lost at once
		"drain":    "turn_drain_timeout: 30s\n", // the shutdown deadline (30s) would cut it
		"drainneg": "turn_drain_timeout: -1s\n",
	} {
		t.Run(name, func(t *testing.T) {
			getenv, environ := envOf(nil)
			if _, err := Load(writeFile(t, "c.yaml", body), nil, getenv, environ); err == nil {
				t.Fatalf("%q accepted", body)
			}
		})
	}
}

// TestPublicURLWithUserinfoQueryOrFragmentIsRefused: the agent card advertises URLs built from
// public_url, so a user and password (published on the card), a query or a fragment (which the
// bindings' paths would follow) is refused, and the error does not quote the password.
func TestPublicURLWithUserinfoQueryOrFragmentIsRefused(t *testing.T) {
	for name, raw := range map[string]string{
		"user and password":           "https://user:PUBPASSWORD@agents.example.com/a2a",
		"user":                        "https://user@agents.example.com/a2a",
		"query":                       "https://agents.example.com/a2a?x=1",
		"empty query":                 "https://agents.example.com/a2a?",
		"fragment":                    "https://agents.example.com/a2a#frag",
		"empty fragment":              "https://agents.example.com/a2a#",
		"all of them":                 "https://user:PUBPASSWORD@agents.example.com/a2a?x=1#frag",
		"bad scheme, with a password": "ftp://user:PUBPASSWORD@agents.example.com/",
	} {
		t.Run(name, func(t *testing.T) {
			getenv, environ := envOf(map[string]string{"CHANNELS_PUBLIC_URL": raw})
			_, err := Load(writeFile(t, "c.yaml", ""), nil, getenv, environ)
			if err == nil || !strings.Contains(err.Error(), "public_url") {
				t.Fatalf("%q: err = %v", raw, err)
			}
			if strings.Contains(err.Error(), "PUBPASSWORD") {
				t.Fatalf("the error quotes the password: %v", err)
			}
		})
	}
	getenv, environ := envOf(map[string]string{"CHANNELS_PUBLIC_URL": "https://agents.example.com/a2a/"})
	if _, err := Load(writeFile(t, "c.yaml", ""), nil, getenv, environ); err != nil {
		t.Fatalf("a base URL with a path: %v", err)
	}
}

// The URL public_url's error suggests without the user and password is one it accepts.
func TestPublicURLsSuggestedFixIsAccepted(t *testing.T) {
	err := CheckPublicURL("https://u:PUBPASSWORD@agents.example.com/a2a?x=1#frag")
	m := regexp.MustCompile(`as in "([^"]*)"`).FindStringSubmatch(fmt.Sprint(err))
	if m == nil {
		t.Fatalf("no suggestion in %v", err)
	}
	if err := CheckPublicURL(m[1]); err != nil || m[1] != "https://agents.example.com/a2a" {
		t.Fatalf("suggested %q: %v", m[1], err)
	}
}

func TestStorePasswordOnlyByReference(t *testing.T) {
	getenv, environ := envOf(map[string]string{"PGURL": "postgres://u:hunter2@db/channels"})
	_, err := Load(writeFile(t, "c.yaml", "store: postgres://u:hunter2@db/channels\n"), nil, getenv, environ)
	if err == nil || !strings.Contains(err.Error(), "store_env") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("plain password in file: err = %v", err)
	}

	l, err := Load(writeFile(t, "c.yaml", "store_env: PGURL\n"), nil, getenv, environ)
	if err != nil {
		t.Fatal(err)
	}
	if l.Store != "postgres://u:hunter2@db/channels" || l.Origin["store"] != FromFile {
		t.Fatalf("store_env: %q from %s", l.Store, l.Origin["store"])
	}
	secret := writeFile(t, "pg", "postgres://u:hunter2@db/channels\n")
	l, err = Load(writeFile(t, "c.yaml", "store_file: "+secret+"\n"), nil, getenv, environ)
	if err != nil || l.Store != "postgres://u:hunter2@db/channels" {
		t.Fatalf("store_file: %q, %v", l.Store, err)
	}
	if _, err := Load(writeFile(t, "c.yaml", "store_env: NOPE\n"), nil, getenv, environ); err == nil {
		t.Fatal("unset store_env accepted")
	}
	if _, err := Load(writeFile(t, "c.yaml", "listen_env: X\n"), nil, getenv, environ); err == nil {
		t.Fatal("_env reference accepted for a key that is not a secret")
	}
	// A store without a password may be written plainly.
	if _, err := Load(writeFile(t, "c.yaml", "store: postgres://u@db/channels\n"), nil, getenv, environ); err != nil {
		t.Fatal(err)
	}
}

// Postgres takes a password in the URL's query as well as in its userinfo: such a store is a
// secret too, refused as a plain value of the file, and redacted wherever the config is printed.
func TestAStoreWithAPasswordInItsQueryIsASecret(t *testing.T) {
	for _, raw := range []string{
		"postgres://channels@db:5432/channels?sslmode=require&password=hunter2",
		"postgres://channels@db/channels?PASSWORD=hunter2",
		"postgres://channels@db/channels?sslkey=/k.pem&sslpassword=hunter2",
	} {
		getenv, environ := envOf(map[string]string{"PGURL": raw})
		_, err := Load(writeFile(t, "c.yaml", "store: "+raw+"\n"), nil, getenv, environ)
		if err == nil || !strings.Contains(err.Error(), "store carries a password: move the URL to store_env") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("plain %s in the file: err = %v", raw, err)
		}
		l, err := Load(writeFile(t, "c.yaml", "store_env: PGURL\n"), nil, getenv, environ)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", &l.Config)
		for _, printed := range []string{RedactURL(raw), l.Redacted()["store"], l.String(), buf.String()} {
			if strings.Contains(printed, "hunter2") || !strings.Contains(printed, "@db") {
				t.Errorf("store %s printed as %s", raw, printed)
			}
		}
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	c := Default()
	c.Store = "postgres://u:hunter2@db/channels"
	c.AgentURL = "https://agent.example/a/hunter3?api_key=hunter4"
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", &c)
	for _, s := range []string{c.String(), buf.String()} {
		if strings.Contains(s, "hunter") {
			t.Fatalf("secret printed: %s", s)
		}
		if !strings.Contains(s, "postgres://u:xxxxx@db/channels") {
			t.Fatalf("store missing from %s", s)
		}
		if !strings.Contains(s, "https://agent.example") {
			t.Fatalf("agent URL's origin missing from %s", s)
		}
	}
}

// Every secret key has a --KEY-file flag, so a secret need not sit in the process list; the plain
// --admin-token still works but warns, as does a --store that carries a password.
func TestSecretFlagsTakeAFile(t *testing.T) {
	token := writeFile(t, "admin", "0123456789abcdef-from-file\n")
	pg := writeFile(t, "pg", "postgres://u:hunter2@db/channels\n")
	agent := writeFile(t, "agent", "https://agent.example/k/hunter3\n")
	load := func(args ...string) (*Loaded, error) {
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		getenv, environ := envOf(nil)
		return Load("", fs, getenv, environ)
	}
	l, err := load("--admin-token-file", token, "--store-file", pg, "--agent-url-file", agent)
	if err != nil {
		t.Fatal(err)
	}
	if l.AdminToken != "0123456789abcdef-from-file" || l.Store != "postgres://u:hunter2@db/channels" || l.AgentURL != "https://agent.example/k/hunter3" ||
		l.Origin["admin_token"] != FromFlag || l.Origin["store"] != FromFlag || len(l.Warnings) != 0 {
		t.Fatalf("from files: token %q store %q agent %q origins %v warnings %v", l.AdminToken, l.Store, l.AgentURL, l.Origin, l.Warnings)
	}
	for _, fl := range []string{"listen-file", "credentials-file"} {
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		AddFlags(fs)
		if fs.Lookup(fl) != nil {
			t.Errorf("--%s registered for a key that is not a secret", fl)
		}
	}

	l, err = load("--admin-token", "0123456789abcdef-plain", "--store", "postgres://u:hunter2@db/channels")
	if err != nil || l.AdminToken != "0123456789abcdef-plain" {
		t.Fatalf("plain flag: %v", err)
	}
	w := strings.Join(l.Warnings, "\n")
	if len(l.Warnings) != 2 || !strings.Contains(w, "--admin-token-file") || !strings.Contains(w, "--store-file") || strings.Contains(w, "hunter2") {
		t.Fatalf("warnings %v", l.Warnings)
	}
	if l, err := load("--store", "postgres://u@db/channels"); err != nil || len(l.Warnings) != 0 {
		t.Fatalf("a store without a password: %v %v", l.Warnings, err)
	}

	if _, err := load("--admin-token", "0123456789abcdef-plain", "--admin-token-file", token); err == nil || !strings.Contains(err.Error(), "both set") {
		t.Fatalf("both flags: %v", err)
	}
	if _, err := load("--admin-token-file", filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "--admin-token-file") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestUnknownEnvironmentVariableWarns(t *testing.T) {
	getenv, environ := envOf(map[string]string{"CHANNELS_LISTN": "x", "CHANNELS_CONFIG": "/c.yaml", "CHANNELS_STORE_FILE": ""})
	l, err := Load("", nil, getenv, environ)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0], "CHANNELS_LISTN") {
		t.Fatalf("warnings %v", l.Warnings)
	}
}

// A CHANNELS_ variable the configuration names — by a KEY_env reference of the file or of a
// source's options, as agent_token_env, or in exec_env — is no typo of a setting: no warning.
func TestVariablesTheConfigNamesDoNotWarn(t *testing.T) {
	getenv, environ := envOf(map[string]string{
		"CHANNELS_PG_URL":         "postgres://u:hunter2@db/channels",
		"CHANNELS_ADMIN":          "0123456789abcdef0123",
		"CHANNELS_WEBHOOK_SECRET": "0123456789abcdef0123",
		"CHANNELS_AGENT_TOKEN":    "t",
		"CHANNELS_EXEC_EXTRA":     "x",
		"CHANNELS_LISTN":          "x",
	})
	path := writeFile(t, "c.yaml", `store_env: CHANNELS_PG_URL
admin_token_env: CHANNELS_ADMIN
agent_token_env: CHANNELS_AGENT_TOKEN
exec_env: LANG, CHANNELS_EXEC_EXTRA
sources:
  - type: webhook
    name: ci
    principal: ci-team
    options:
      secret_env: CHANNELS_WEBHOOK_SECRET
`)
	l, err := Load(path, nil, getenv, environ)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0], "CHANNELS_LISTN") {
		t.Fatalf("warnings %v, want only the one of CHANNELS_LISTN", l.Warnings)
	}
}

func TestDefaultPathOnlyWhenFileExists(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	if p := DefaultPath(); p != "" {
		t.Fatalf("DefaultPath = %q with no file", p)
	}
	if err := os.MkdirAll(filepath.Join(dir, "channels"), 0o700); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "channels", "channels.yaml")
	if err := os.WriteFile(want, []byte("listen: 127.0.0.1:9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if p := DefaultPath(); p != want {
		t.Fatalf("DefaultPath = %q, want %q", p, want)
	}
}

func TestPublicURLFollowsListen(t *testing.T) {
	for listen, want := range map[string]string{
		"127.0.0.1:9000": "http://127.0.0.1:9000",
		"0.0.0.0:9000":   "http://127.0.0.1:9000",
		":9000":          "http://127.0.0.1:9000",
		"[::1]:9000":     "http://[::1]:9000",
	} {
		c := Default()
		c.Listen = listen
		if got := c.EffectivePublicURL(); got != want {
			t.Errorf("listen %s: public URL %s, want %s", listen, got, want)
		}
	}
}

func TestCommandFlagsOfTheSameNameAreNotSettings(t *testing.T) {
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	fs.Int("concurrency", 64, "bench's own flag")
	if err := fs.Parse([]string{"--concurrency", "0"}); err != nil {
		t.Fatal(err)
	}
	getenv, environ := envOf(nil)
	l, err := Load("", fs, getenv, environ)
	if err != nil {
		t.Fatal(err)
	}
	if l.Concurrency != Default().Concurrency {
		t.Fatalf("concurrency %d taken from a flag that is not a setting", l.Concurrency)
	}
}

// A resent A2A messageId returns the earlier outcome, except with the conformance executor, whose
// test kit reuses its messageIds (auto); on and off say so whatever the executor.
func TestMessageIDDedupeIsOnExceptForTheConformanceKit(t *testing.T) {
	for _, tc := range []struct {
		dedupe, executor string
		want             bool
	}{
		{"auto", "echo", true}, {"auto", "a2a", true}, {"auto", "conformance", false},
		{"on", "conformance", true}, {"off", "echo", false},
	} {
		c := Default()
		c.MessageIDDedupe, c.Executor = tc.dedupe, tc.executor
		if got := c.DedupesMessageIDs(); got != tc.want {
			t.Errorf("message_id_dedupe %s with executor %s: %v, want %v", tc.dedupe, tc.executor, got, tc.want)
		}
	}
}

// The README's configuration table is the operator's reference: it must name every key.
func TestREADMENamesEveryKey(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys() {
		if !strings.Contains(string(b), "| `"+k+"` |") {
			t.Errorf("README.md has no row for config key %s", k)
		}
	}
}

// LoadWithoutSourceSecrets (every command but serve and config check) leaves the references of
// the sources' options unresolved, so a shell without the sources' secrets can read; Load and
// LoadAll resolve them; all three refuse a plain secret in the options.
func TestOnlyLoadResolvesTheSourcesSecrets(t *testing.T) {
	getenv, environ := envOf(nil)
	source := func(options string) string {
		return writeFile(t, "c.yaml", "sources:\n  - type: webhook\n    name: ci\n    principal: ci-team\n    options:\n"+options)
	}
	unresolved := source("      secret_env: NOT_IN_THIS_SHELL\n      key_file: /no/such/secret\n")
	l, err := LoadWithoutSourceSecrets(unresolved, nil, getenv, environ)
	if err != nil || len(l.Sources) != 1 || l.Sources[0].Options["secret_env"] != "NOT_IN_THIS_SHELL" {
		t.Fatalf("LoadWithoutSourceSecrets = %+v, %v", l, err)
	}
	for name, load := range map[string]func(string, *pflag.FlagSet, func(string) string, []string) (*Loaded, error){"Load": Load, "LoadAll": LoadAll} {
		_, err := load(unresolved, nil, getenv, environ)
		if err == nil || !strings.Contains(err.Error(), "NOT_IN_THIS_SHELL, which is unset or empty") || !strings.Contains(err.Error(), "cannot read /no/such/secret") {
			t.Errorf("%s with the sources' secrets unresolvable: %v", name, err)
		}
	}
	plain := source("      secret: hunter2hunter2hunter2\n")
	if _, err := LoadWithoutSourceSecrets(plain, nil, getenv, environ); err == nil || !strings.Contains(err.Error(), "option secret is a secret") {
		t.Errorf("LoadWithoutSourceSecrets with a plain secret: %v", err)
	}
	empty := source("      secret_env: \"\"\n")
	if _, err := LoadWithoutSourceSecrets(empty, nil, getenv, environ); err == nil || !strings.Contains(err.Error(), "want the name of an environment variable") {
		t.Errorf("LoadWithoutSourceSecrets with an empty reference: %v", err)
	}
}

// TestAValueOfTheWrongKindIsOneProblemOnOneLine: config check reports each line of an error as a
// problem of its own, so a value of the wrong kind in the file (yaml's "unmarshal errors:" and
// then a line per value) must come as one line, naming the key, its line and what is wanted.
func TestAValueOfTheWrongKindIsOneProblemOnOneLine(t *testing.T) {
	for name, c := range map[string]struct{ body, want string }{
		"quoted int": {"listen: 127.0.0.1:1\nconcurrency: \"8\"\n", `key concurrency: line 2: want an integer, got "8"`},
		"bool":       {"allow_anonymous: maybe\n", `key allow_anonymous: line 1: want true or false, got "maybe"`},
		"list":       {"agent_name: [a, b]\n", `key agent_name: line 1: want a string, got a list`},
		"duration":   {"blocking_timeout: {s: 1}\n", `key blocking_timeout: line 1: want a duration such as 90s or 1h, got a mapping`},
		"sources":    {"sources: 3\n", `sources: line 1: want a list of {type, name, principal, options}, got "3"`},
		"file":       {"- listen: x\n", `line 1: want a mapping of keys (key: value), got a list`},
	} {
		t.Run(name, func(t *testing.T) {
			getenv, environ := envOf(nil)
			_, err := Load(writeFile(t, "c.yaml", c.body), nil, getenv, environ)
			if err == nil {
				t.Fatalf("%q accepted", c.body)
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, c.want) {
				t.Fatalf("err = %q, want one line holding %q", msg, c.want)
			}
		})
	}
}
