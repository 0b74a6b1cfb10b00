package main

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/internal/config"
	"github.com/channels-dev/channels/taskplane/a2aservice"
)

// webhookSource is a valid webhook instance; cases change it.
const webhookSource = `sources:
  - type: webhook
    name: ci
    principal: ci-team
    options:
      secret_env: TEST_WEBHOOK_SECRET
      identity: event.id
      conversation: [thread]
      text: event.text
`

// TestConfigCheckCatchesEachMistake: every kind of mistake is reported with what to fix, and
// exits 1; a valid file exits 0. Secret values are never echoed.
func TestConfigCheckCatchesEachMistake(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "empty-secret")
	if err := os.WriteFile(secretFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, yaml string
		want       []string // substrings of the report
		valid      bool
	}{
		{"valid", "listen: 127.0.0.1:8788\nadmin_token_env: TEST_ADMIN_TOKEN\n" + webhookSource, []string{"ok: the configuration is valid", "webhook ci (principal ci-team)"}, true},
		{"unknown key with a suggestion", "lisen: 127.0.0.1:1\n", []string{"unknown keys lisen (did you mean listen?)"}, false},
		{"plain secret", "admin_token: hunter2hunter2hunter2\n", []string{"admin_token is a secret: give it as admin_token_env"}, false},
		{"missing secret variable", "admin_token_env: NO_SUCH_VARIABLE\n", []string{"environment variable NO_SUCH_VARIABLE is empty or unset"}, false},
		{"empty secret file", "admin_token_file: " + secretFile + "\n", []string{"is empty"}, false},
		{"password in the store URL", "store: postgres://u:pw@db/x\n", []string{"store carries a password: move the URL to store_env"}, false},
		{"password in the store URL's query", "store: postgres://u@db/x?sslmode=require&password=hunter2hunter2hunter2\n", []string{"store carries a password: move the URL to store_env"}, false},
		{"bad public URL", "public_url: ftp://example.com\n", []string{"public_url \"ftp://example.com\": want an absolute http or https URL"}, false},
		{"store without a driver", "store: mysql://db/x\n", []string{`scheme "mysql" has no driver`}, false},
		// What serve's driver refuses in the URL's form is found without --connect.
		{"sqlite URL with a query", "store: sqlite:///tmp/channels.db?mode=ro\n", []string{"the URL takes no query parameters or fragment"}, false},
		{"bad duration", "retention: forever\n", []string{"key retention: want a duration such as 90s or 1h"}, false},
		{"negative refresh", "admin_refresh: -1s\n", []string{"admin_refresh must be whole seconds, at least 1s"}, false},
		{"sub-second refresh", "admin_refresh: 500ms\n", []string{"admin_refresh must be whole seconds, at least 1s"}, false},
		{"open listener", "listen: 0.0.0.0:8788\n", []string{"no credentials are configured", "admin_token is unset"}, false},
		{"plain secret in source options", strings.Replace(webhookSource, "secret_env: TEST_WEBHOOK_SECRET", "secret: hunter2hunter2hunter2", 1),
			[]string{"sources[0] (webhook ci): option secret is a secret: give it as secret_env"}, false},
		{"source secret variable unset", strings.Replace(webhookSource, "TEST_WEBHOOK_SECRET", "NO_SUCH_SECRET", 1),
			[]string{"option secret_env names the environment variable NO_SUCH_SECRET, which is unset or empty"}, false},
		{"unknown source type", strings.Replace(webhookSource, "type: webhook", "type: carrier-pigeon", 1),
			[]string{`no source "carrier-pigeon" is registered in this binary: want one of`}, false},
		{"options the source refuses", strings.Replace(webhookSource, "      identity: event.id\n", "", 1),
			[]string{"identity, conversation and text paths are required"}, false},
		{"unknown option", strings.Replace(webhookSource, "text: event.text", "text: event.text\n      txet: typo", 1),
			[]string{`unknown field "txet"`}, false},
		{"instance named twice", webhookSource + strings.TrimPrefix(webhookSource, "sources:\n"), []string{"webhook ci is configured twice"}, false},
		{"two instances sharing a secret", webhookSource + strings.Replace(strings.TrimPrefix(webhookSource, "sources:\n"), "name: ci", "name: cd", 1),
			[]string{`source webhook instances "ci" and "cd" share one secret`}, false},
		{"bad instance name", strings.Replace(webhookSource, "name: ci", "name: CI Builds", 1), []string{`name "CI Builds": want lower-case letters`}, false},
		{"missing principal", strings.Replace(webhookSource, "principal: ci-team", "principal: \"\"", 1), []string{"principal is required"}, false},
		{"the anonymous callers' principal", strings.Replace(webhookSource, "principal: ci-team", "principal: anonymous", 1),
			[]string{`principal "anonymous" is reserved for unauthenticated A2A callers`}, false},
		{"misspelt instance field", strings.Replace(webhookSource, "principal:", "principle:", 1), []string{`unknown field "principle"`}, false},
		// A problem the loader finds does not hide the ones found after loading.
		{"a bad value and an open listener", "listen: 0.0.0.0:8788\nretention: 1h\n", []string{"retention 1h0m0s: at least", "no credentials are configured"}, false},
		{"an unknown key and an unknown source", "lisen: x\n" + strings.Replace(webhookSource, "type: webhook", "type: carrier-pigeon", 1),
			[]string{"unknown keys lisen", `no source "carrier-pigeon" is registered`}, false},
		{"a bad value and a missing manifest", "retention: 1h\nworkflow_manifest: /no/such/manifest.yaml\n", []string{"retention 1h0m0s: at least", "/no/such/manifest.yaml"}, false},
		{"an unknown executor", "executor: foo\nretention: 1h\n", []string{`executor "foo": want one of`}, false},
		{"an executor missing its settings", "executor: exec\nretention: 1h\n", []string{"executor exec needs exec_command"}, false},
		// An instance the loader reported is not built again to report the same thing twice.
		{"a source whose secrets are unset", "sources:\n  - type: slack\n    name: ws\n    principal: team-a\n    options:\n      bot_token_env: NO_SUCH_BOT\n      app_token_env: NO_SUCH_APP\n",
			[]string{"NO_SUCH_BOT, which is unset", "NO_SUCH_APP, which is unset", "invalid: 2 errors"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, path := operatorCLI(t, tc.yaml)
			code := c.run(context.Background(), "config", "check", "--config", path)
			out := c.stdout.String()
			if tc.valid != (code == 0) || (!tc.valid && code != 1) {
				t.Fatalf("exit %d (valid %v):\n%s%s", code, tc.valid, out, c.stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("report lacks %q:\n%s", w, out)
				}
			}
			seen := map[string]bool{}
			for _, line := range strings.Split(out, "\n") {
				if line != "" && seen[line] {
					t.Errorf("report repeats %q:\n%s", line, out)
				}
				seen[line] = true
			}
			for _, secret := range []string{"hunter2hunter2hunter2", plantedWebhookSecret, plantedAdminToken, ":pw@"} {
				if strings.Contains(out+c.stderr.String(), secret) {
					t.Errorf("report echoes the secret %q", secret)
				}
			}
		})
	}
}

// An admin_token_file that cannot be read is an error; the warning that admin_token is unset
// would send the operator looking for a setting that is there.
func TestAnUnreadableAdminTokenFileIsNotAlsoUnset(t *testing.T) {
	c, path := operatorCLI(t, "listen: 0.0.0.0:8788\nadmin_token_file: /no/such/admin-token\n")
	if code := c.run(context.Background(), "config", "check", "--config", path); code != 1 {
		t.Fatalf("exit %d: %s%s", code, c.stdout.String(), c.stderr.String())
	}
	out := c.stdout.String()
	if !strings.Contains(out, "/no/such/admin-token") || strings.Contains(out, "admin_token is unset") {
		t.Fatalf("report:\n%s", out)
	}
}

func TestConfigCheckJSON(t *testing.T) {
	c, path := operatorCLI(t, "listen: 0.0.0.0:8788\ncredentials: /no/such/tokens.json\n"+webhookSource)
	if code := c.run(context.Background(), "config", "check", "--config", path, "--json", "--connect"); code != 1 {
		t.Fatalf("exit %d: %s", code, c.stderr.String())
	}
	var r configReport
	if err := json.Unmarshal([]byte(c.stdout.String()), &r); err != nil {
		t.Fatalf("%v\n%s", err, c.stdout.String())
	}
	if r.Valid || r.File != path || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "credentials") ||
		len(r.Sources) != 1 || r.Sources[0].Name != "ci" || r.Settings["listen"] != "0.0.0.0:8788" {
		t.Fatalf("report %+v", r)
	}
	if !strings.Contains(strings.Join(r.Warnings, "\n"), "admin_token is unset") {
		t.Fatalf("warnings %v", r.Warnings)
	}
}

// The config refuses sources the principal the A2A service gives anonymous callers: the two
// names must be one.
func TestConfigReservesTheAnonymousCallersPrincipal(t *testing.T) {
	if config.AnonymousPrincipal != a2aservice.AnonymousPrincipal {
		t.Fatalf("config reserves %q, the A2A service's anonymous callers are %q", config.AnonymousPrincipal, a2aservice.AnonymousPrincipal)
	}
}

// config check is the gate before serve (systemd's ExecStartPre): what serve refuses to start
// with — an executor its constructor refuses, unreadable or invalid worker tokens, an unreadable
// or invalid workflow manifest — config check refuses too, with the same message.
func TestConfigCheckRefusesWhatServeRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	shortTokens := write("short.json", `{"workers":[{"name":"w1","token":"short"}]}`)
	noWorkers := write("none.json", `{"workers":[]}`)
	notJSON := write("broken.json", `{"workers":`)
	misspelt := write("misspelt.json", `{"workers":[{"name":"w1","token":"0123456789abcdef-worker","principal":["alice"]}]}`)
	unscoped := write("unscoped.json", `{"workers":[{"name":"w1","token":"0123456789abcdef-worker"}]}`)
	sharedToken := write("shared.json", `{"workers":[{"name":"w1","token":"0123456789abcdef-worker","principals":["*"]},
		{"name":"w2","token":"0123456789abcdef-worker","principals":["bob"]}]}`)
	sameName := write("samename.json", `{"workers":[{"name":"w1","token":"0123456789abcdef-one","principals":["alice"]},
		{"name":"w1","token":"0123456789abcdef-two","principals":["bob"]}]}`)
	const credToken = "s3cr3t-credential-token-0123456789"
	repeatedToken := write("repeated.json", `{"credentials":[{"token":"`+credToken+`","principal":"alice"},{"token":"`+credToken+`","principal":"bob"}]}`)
	anonymousCred := write("anonymous.json", `{"credentials":[{"token":"`+credToken+`","principal":"anonymous"}]}`)
	misspeltCreds := write("credential.json", `{"credential":[{"token":"`+credToken+`","principal":"alice"}]}`)
	noCreds := write("nocreds.json", `{"credentials":[]}`)
	badManifest := write("manifest.yaml", "outputs:\n  - name: Not A Name\n")
	unknownField := write("manifest2.yaml", "outputs:\n  - name: summary\n    colour: red\n")
	for _, tc := range []struct{ name, yaml, want string }{
		{"agent token variable unset", "executor: a2a\nagent_url: https://agent.example.com\nagent_token_env: NO_SUCH_AGENT_TOKEN\n",
			"agent_token_env names NO_SUCH_AGENT_TOKEN, which is empty or unset"},
		{"agent over plain http", "executor: a2a\nagent_url: http://agent.example.com\n", "is not https"},
		{"worker tokens missing", "executor: worker\nworker_tokens: " + filepath.Join(dir, "missing.json") + "\n", "read worker tokens"},
		{"worker tokens not JSON", "executor: worker\nworker_tokens: " + notJSON + "\n", "parse worker tokens"},
		{"worker token too short", "executor: worker\nworker_tokens: " + shortTokens + "\n", "needs a name and a token of at least 16 characters"},
		{"no workers", "executor: worker\nworker_tokens: " + noWorkers + "\n", "no workers listed"},
		{"worker tokens unknown key", "executor: worker\nworker_tokens: " + misspelt + "\n", `unknown field "principal"`},
		{"worker without principals", "executor: worker\nworker_tokens: " + unscoped + "\n", `write "principals": ["*"] for all`},
		{"workers sharing a token", "executor: worker\nworker_tokens: " + sharedToken + "\n", `workers "w1" and "w2" have the same token`},
		{"workers sharing a name", "executor: worker\nworker_tokens: " + sameName + "\n", `two workers are named "w1"`},
		{"workflow manifest missing", "workflow_manifest: " + filepath.Join(dir, "missing.yaml") + "\n", "read workflow manifest"},
		{"workflow manifest invalid", "workflow_manifest: " + badManifest + "\n", `output name "Not A Name" does not match`},
		{"workflow manifest unknown field", "workflow_manifest: " + unknownField + "\n", "field colour not found"},
		{"credentials repeating a token", "credentials: " + repeatedToken + "\n", "credential 1 repeats the token of credential 0"},
		{"credentials with the anonymous principal", "credentials: " + anonymousCred + "\n", `principal "anonymous" is reserved`},
		{"credentials with a misspelt key", "credentials: " + misspeltCreds + "\n", `unknown field "credential"`},
		{"credentials without entries", "credentials: " + noCreds + "\n", "no entries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, path := operatorCLI(t, tc.yaml)
			if code := c.run(context.Background(), "config", "check", "--config", path); code != 1 || !strings.Contains(c.stdout.String(), "error: ") ||
				!strings.Contains(c.stdout.String(), tc.want) {
				t.Errorf("config check: exit %d, want 1 and %q:\n%s%s", code, tc.want, c.stdout.String(), c.stderr.String())
			}
			s := c.again()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if code := s.run(ctx, "serve", "--config", path, "--listen", "127.0.0.1:0"); code != 1 || !strings.Contains(s.stderr.String(), tc.want) {
				t.Errorf("serve: exit %d, want 1 and %q:\n%s", code, tc.want, s.stderr.String())
			}
			if strings.Contains(c.stdout.String()+c.stderr.String()+s.stderr.String(), credToken) {
				t.Errorf("a report quotes a credential's token")
			}
		})
	}

	// And what serve starts with passes, the variable agent_token_env names read the same way.
	tokens := write("workers.json", `{"workers":[{"name":"w1","token":"0123456789abcdef-worker","principals":["*"]}]}`)
	manifest := write("ok.yaml", "outputs:\n  - name: summary\n")
	for _, yaml := range []string{
		"executor: worker\nworker_tokens: " + tokens + "\nworkflow_manifest: " + manifest + "\n",
		"executor: a2a\nagent_url: https://agent.example.com\nagent_token_env: TEST_AGENT_TOKEN\n",
	} {
		c, path := operatorCLI(t, yaml)
		c.env["TEST_AGENT_TOKEN"] = "agent-token"
		if code := c.run(context.Background(), "config", "check", "--config", path); code != 0 {
			t.Errorf("config check of %q: exit %d:\n%s%s", yaml, code, c.stdout.String(), c.stderr.String())
		}
		s := c.again()
		startServe(t, s, "--config", path)
	}
}

// TestServeRefusesBadCredentialsBeforeOpeningTheStoreOrListening: a credentials file serve
// refuses stops it before it creates (and migrates) the store or binds the port.
func TestServeRefusesBadCredentialsBeforeOpeningTheStoreOrListening(t *testing.T) {
	dir := t.TempDir()
	creds := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(creds, []byte(`{"credentials":[{"token":"0123456789abcdef-token","principal":"anonymous"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// A port another listener holds: serve binding it first would fail with "address in use".
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	db := filepath.Join(dir, "c.db")
	c := newCLI(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code := c.run(ctx, "serve", "--store", "sqlite://"+db, "--credentials", creds, "--listen", busy.Addr().String())
	if code != 1 || !strings.Contains(c.stderr.String(), `principal "anonymous" is reserved`) {
		t.Fatalf("serve: exit %d:\n%s", code, c.stderr.String())
	}
	if _, err := os.Stat(db); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("serve created the store before refusing the credentials: %v", err)
	}
}

// TestReadingCommandsNeedNotHoldTheSourcesSecrets: a config file whose source names a secret
// variable the operator's shell does not hold (a systemd unit keeps it in /etc/channels/env)
// stops only the commands that run the sources: every reading command works with it, serve
// refuses to start, and config check reports it.
func TestReadingCommandsNeedNotHoldTheSourcesSecrets(t *testing.T) {
	dir := t.TempDir()
	storeURL := "sqlite://" + filepath.Join(dir, "c.db")
	yaml := "store: " + storeURL + "\n" + strings.Replace(webhookSource, "TEST_WEBHOOK_SECRET", "SECRET_ONLY_THE_SERVICE_HOLDS", 1)
	path := filepath.Join(dir, "channels.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A server of its own store, for evidence --server.
	base, _ := startServe(t, newCLI(t, map[string]string{"CHANNELS_STORE": "sqlite://" + filepath.Join(dir, "served.db")}))

	const unset = "SECRET_ONLY_THE_SERVICE_HOLDS, which is unset or empty"
	for _, args := range [][]string{
		{"tasks", "list"},
		{"deliveries", "list"},
		{"evidence"},
		{"evidence", "--summary"},
		{"evidence", "--server", base},
		{"sources"},
	} {
		c := newCLI(t, nil)
		if code := c.run(ctx, append(args, "--config", path)...); code != 0 {
			t.Errorf("%v with the source's secret unset: exit %d: %s", args, code, c.stderr.String())
		}
	}
	c := newCLI(t, nil)
	if code := c.run(ctx, "serve", "--listen", "127.0.0.1:0", "--config", path); code != 1 || !strings.Contains(c.stderr.String(), unset) {
		t.Errorf("serve with the source's secret unset: exit %d: %s", code, c.stderr.String())
	}
	c = newCLI(t, nil)
	if code := c.run(ctx, "config", "check", "--config", path); code != 1 || !strings.Contains(c.stdout.String(), unset) {
		t.Errorf("config check with the source's secret unset: exit %d: %s%s", code, c.stdout.String(), c.stderr.String())
	}
}
