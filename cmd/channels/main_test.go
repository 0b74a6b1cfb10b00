package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/channels-dev/channels/internal/safebuf"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// cli runs the binary's entry point in-process with a fresh XDG home and the given environment.
type cli struct {
	env            map[string]string
	stdout, stderr *safebuf.Buffer
}

func newCLI(t *testing.T, env map[string]string) *cli {
	t.Helper()
	home := t.TempDir()
	t.Setenv("XDG_DATA_HOME", filepath.Join(home, "data"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	if env == nil {
		env = map[string]string{}
	}
	return &cli{env: env, stdout: &safebuf.Buffer{}, stderr: &safebuf.Buffer{}}
}

func (c *cli) run(ctx context.Context, args ...string) int {
	var environ []string
	for k, v := range c.env {
		environ = append(environ, k+"="+v)
	}
	return run(ctx, args, env{stdout: c.stdout, stderr: c.stderr, getenv: func(k string) string { return c.env[k] }, environ: environ})
}

// logLine returns the first JSON log line whose msg is msg, waiting up to 10 s.
func (c *cli) logLine(t *testing.T, msg string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(c.stderr.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %q log line; stderr:\n%s", msg, c.stderr.String())
	return nil
}

// startServe runs "channels serve" with args until the test ends and returns its base URL.
func startServe(t *testing.T, c *cli, args ...string) (base string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() { code <- c.run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...) }()
	var once sync.Once
	exit := -1
	stop = func() int {
		once.Do(func() {
			cancel()
			select {
			case exit = <-code:
			case <-time.After(30 * time.Second):
				t.Fatalf("serve did not stop; stderr:\n%s", c.stderr.String())
			}
		})
		return exit
	}
	t.Cleanup(func() { stop() })
	select {
	case ec := <-code:
		t.Fatalf("serve exited with %d; stderr:\n%s", ec, c.stderr.String())
	default:
	}
	line := c.logLine(t, "channels serving")
	return "http://" + line["listen"].(string), stop
}

func get(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

func TestServeWithNoConfigUsesSQLiteAndEchoAndShutsDownCleanly(t *testing.T) {
	c := newCLI(t, nil)
	base, stop := startServe(t, c)
	if code, body := get(t, base+"/healthz"); code != 200 || body["status"] != "ok" {
		t.Fatalf("healthz %d %v", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 200 || body["store"] != "sqlite" {
		t.Fatalf("readyz %d %v", code, body)
	}
	line := c.logLine(t, "channels serving")
	wantStore := "sqlite://" + filepath.Join(os.Getenv("XDG_DATA_HOME"), "channels", "channels.db")
	if line["store"] != wantStore || line["executor"] != "echo" {
		t.Fatalf("serving with store %v executor %v, want %s and echo", line["store"], line["executor"], wantStore)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d; stderr:\n%s", code, c.stderr.String())
	}
	c.logLine(t, "stopped")
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("server still answers after shutdown")
	}
	// The store was closed: a new process can open it (SQLite refuses a second one).
	c2 := newCLI(t, nil)
	c2.env["CHANNELS_STORE"] = wantStore
	if code := c2.run(context.Background(), "migrate"); code != 0 {
		t.Fatalf("reopen after shutdown: %d %s", code, c2.stderr.String())
	}
}

// TestServeStoppedWhileItsStoreOpensExitsCleanly: a stop signal while the store has not answered
// yet (a Postgres that accepted the connection and says nothing) ends serve at once with exit 0
// and a log line saying it stopped before serving, not with a connect error.
func TestServeStoppedWhileItsStoreOpensExitsCleanly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if conn, err := ln.Accept(); err == nil {
			accepted <- conn
		}
	}()
	c := newCLI(t, map[string]string{"CHANNELS_STORE": "postgres://u@" + ln.Addr().String() + "/db?sslmode=disable"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() { code <- c.run(ctx, "serve", "--listen", "127.0.0.1:0") }()
	select {
	case conn := <-accepted:
		defer conn.Close()
	case ec := <-code:
		t.Fatalf("serve exited with %d before connecting to its store; stderr:\n%s", ec, c.stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("serve did not connect to its store; stderr:\n%s", c.stderr.String())
	}
	cancel()
	select {
	case ec := <-code:
		if ec != 0 {
			t.Fatalf("serve stopped while opening its store exited %d; stderr:\n%s", ec, c.stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("serve did not stop; stderr:\n%s", c.stderr.String())
	}
	c.logLine(t, "stopped before serving")
}

// TestServeSetsSlogsDefaultToItsLogger: the parts that log through slog's package default (the
// sources' host, the Slack source, the Postgres store) follow log_level and the JSON format while
// serve runs: with log_level error, a warning through the default is dropped and an error is a
// JSON line on serve's stderr, not a text line elsewhere. The default comes back afterwards.
func TestServeSetsSlogsDefaultToItsLogger(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newCLI(t, map[string]string{"CHANNELS_LOG_LEVEL": "error"})
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() { code <- c.run(ctx, "serve", "--listen", addr) }()
	stop := sync.OnceFunc(func() {
		cancel()
		<-code
	})
	defer stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not answer; stderr:\n%s", c.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	slog.Warn("probe warning through the default")
	slog.Error("probe error through the default")
	var line map[string]any
	for _, l := range strings.Split(c.stderr.String(), "\n") {
		if strings.Contains(l, "probe warning") {
			t.Fatalf("a warning through slog's default passed log_level error: %s", l)
		}
		if strings.Contains(l, "probe error") {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("not a JSON line: %s", l)
			}
		}
	}
	if line["level"] != "ERROR" || line["msg"] != "probe error through the default" {
		t.Fatalf("no JSON error line through slog's default on serve's stderr:\n%s", c.stderr.String())
	}
	stop()
	if !slog.Default().Handler().Enabled(context.Background(), slog.LevelInfo) {
		t.Fatal("slog's default still drops info after serve returned")
	}
}

func TestSecondServeOnOneSQLiteStoreIsRefused(t *testing.T) {
	c := newCLI(t, nil)
	startServe(t, c)
	dbURL := "sqlite://" + filepath.Join(os.Getenv("XDG_DATA_HOME"), "channels", "channels.db")
	c2 := newCLI(t, map[string]string{"CHANNELS_STORE": dbURL})
	if code := c2.run(context.Background(), "serve", "--listen", "127.0.0.1:0"); code == 0 {
		t.Fatal("second serve on one SQLite store started")
	}
	if !strings.Contains(c2.stderr.String(), "in use") {
		t.Fatalf("second serve error unclear: %s", c2.stderr.String())
	}
}

func TestServeRefusesAnonymousNonLoopback(t *testing.T) {
	c := newCLI(t, nil)
	if code := c.run(context.Background(), "serve", "--listen", "0.0.0.0:0"); code != 1 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(c.stderr.String(), "allow_anonymous") {
		t.Fatalf("error does not say how to fix it: %s", c.stderr.String())
	}
}

func TestConfigFileUnknownKeyStopsStartup(t *testing.T) {
	c := newCLI(t, nil)
	path := filepath.Join(t.TempDir(), "channels.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\nlisten_port: 9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := c.run(context.Background(), "serve", "--config", path); code != 1 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(c.stderr.String(), "unknown keys listen_port") {
		t.Fatalf("stderr: %s", c.stderr.String())
	}
}

// TestShellCompletionWorksWithABrokenConfigFile: the completion scripts and cobra's hidden
// __complete (which they call) read no configuration, so a config file with an unknown key does
// not break them.
func TestShellCompletionWorksWithABrokenConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "channels.yaml")
	if err := os.WriteFile(path, []byte("listen_port: 9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"completion", "bash"}, {"completion", "zsh"}} {
		c := newCLI(t, map[string]string{"CHANNELS_CONFIG": path})
		if code := c.run(context.Background(), args...); code != 0 || !strings.Contains(c.stdout.String(), "completion") {
			t.Errorf("%v: exit %d\nstdout: %.200s\nstderr: %s", args, code, c.stdout.String(), c.stderr.String())
		}
	}
	for _, name := range []string{"__complete", "__completeNoDesc"} {
		c := newCLI(t, map[string]string{"CHANNELS_CONFIG": path})
		if code := c.run(context.Background(), name, "ser"); code != 0 || !strings.HasPrefix(c.stdout.String(), "serve") {
			t.Errorf("%s ser: exit %d\nstdout: %s\nstderr: %s", name, code, c.stdout.String(), c.stderr.String())
		}
	}
}

func TestDefaultConfigFileIsRead(t *testing.T) {
	c := newCLI(t, nil)
	dir := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "channels")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "channels.yaml"), []byte("executor: conformance\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startServe(t, c)
	if line := c.logLine(t, "channels serving"); line["executor"] != "conformance" {
		t.Fatalf("executor %v, want conformance from the default config file", line["executor"])
	}
}

func TestBadFlagIsAUsageError(t *testing.T) {
	c := newCLI(t, nil)
	if code := c.run(context.Background(), "serve", "--no-such-flag"); code != 2 {
		t.Fatalf("exit %d", code)
	}
}

// A mistake in the positional arguments is a usage mistake, as a bad flag is: exit 2 with a
// message saying what was wrong, before any configuration is read. A command group alone is a
// missing argument: its help on stderr, exit 2. "channels" alone prints its help and exits 0.
func TestArgumentMistakesAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"foo"}, `unknown command "foo" for "channels"`},
		{[]string{"taks"}, "did you mean tasks?"},
		{[]string{"tasks", "foo"}, `unknown command "foo" for "channels tasks"`},
		{[]string{"tasks", "get"}, "accepts 1 arg(s), received 0 (usage: channels tasks get"},
		{[]string{"tasks", "get", "a", "b"}, "accepts 1 arg(s), received 2"},
		{[]string{"deliveries", "resolve"}, "(usage: channels deliveries resolve ID"},
		{[]string{"evidence", "extra"}, `unknown command "extra" for "channels evidence"`},
		{[]string{"serve", "extra"}, `unknown command "extra" for "channels serve"`},
		{[]string{"config", "check", "extra"}, `unknown command "extra" for "channels config check"`},
		{[]string{"completion", "foo"}, `unknown command "foo" for "channels completion"`},
		{[]string{"help", "foo"}, `unknown help topic "foo"`},
		{[]string{"help", "tasks", "foo"}, `unknown help topic "tasks foo"`},
		{[]string{"tasks"}, `channels tasks needs a command: one of get, list`},
		{[]string{"config"}, `Usage:`},
		{[]string{"deliveries"}, `channels deliveries needs a command: one of list, resolve`},
		{[]string{"bench"}, `channels bench needs a command`},
	} {
		// A broken config file would exit 1: the mistake is found before it is read.
		c := newCLI(t, map[string]string{"CHANNELS_CONFIG": "/nonexistent/channels.yaml"})
		if code := c.run(context.Background(), tc.args...); code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", tc.args, code, c.stderr.String())
		}
		if !strings.Contains(c.stderr.String(), tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, c.stderr.String(), tc.want)
		}
	}
	for _, args := range [][]string{{}, {"--help"}, {"tasks", "--help"}, {"help"}, {"help", "tasks", "get"}} {
		c := newCLI(t, map[string]string{"CHANNELS_CONFIG": "/nonexistent/channels.yaml"})
		if code := c.run(context.Background(), args...); code != 0 || !strings.Contains(c.stdout.String(), "Usage:") {
			t.Errorf("%v: exit %d: %s%s", args, code, c.stdout.String(), c.stderr.String())
		}
	}
}

// Several migrations of one new Postgres schema at once: they serialize on the migration lock,
// and each reports the version it found under it, so only the one that applied anything reports
// a migration from 0 (the version read before the lock said 0 to all of them).
func TestConcurrentMigrationsReportWhatEachApplied(t *testing.T) {
	url := storetest.PostgresURL(t)
	const n = 3
	reports := make([]migrateReport, n)
	// newCLI calls t.Setenv, which must not run on several goroutines at once.
	clis := make([]*cli, n)
	for i := range clis {
		clis[i] = newCLI(t, nil)
	}
	var wg sync.WaitGroup
	for i, c := range clis {
		wg.Go(func() {
			if code := c.run(context.Background(), "migrate", "--store", url, "--json"); code != 0 {
				t.Errorf("migrate %d: exit %d: %s", i, code, c.stderr.String())
				return
			}
			if err := json.Unmarshal([]byte(c.stdout.String()), &reports[i]); err != nil {
				t.Errorf("migrate %d: %q: %v", i, c.stdout.String(), err)
			}
		})
	}
	wg.Wait()
	fromZero := 0
	for _, r := range reports {
		switch r.FromVersion {
		case 0:
			fromZero++
		case r.SchemaVersion:
		default:
			t.Errorf("a report from version %d to %d", r.FromVersion, r.SchemaVersion)
		}
	}
	if fromZero != 1 {
		t.Fatalf("%d of %d concurrent migrations report migrating from 0, want 1: %+v", fromZero, n, reports)
	}
}

// TestTheDefaultStoreIsUnderADataHomeWithAnyName: a data home whose name has '#', '%' or a space
// (characters a URL gives meaning to) still holds the default store, at the path it names.
func TestTheDefaultStoreIsUnderADataHomeWithAnyName(t *testing.T) {
	c := newCLI(t, nil)
	home := filepath.Join(t.TempDir(), "my data #1 at 50%")
	t.Setenv("XDG_DATA_HOME", home)
	if code := c.run(context.Background(), "migrate", "--json"); code != 0 {
		t.Fatalf("migrate the default store under %q: exit %d: %s", home, code, c.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(home, "channels", "channels.db")); err != nil {
		t.Fatalf("the default store is not under the data home: %v; stdout %s", err, c.stdout.String())
	}
}

func TestMigrateReportsJSON(t *testing.T) {
	c := newCLI(t, nil)
	url := "sqlite://" + filepath.Join(t.TempDir(), "m.db")
	if code := c.run(context.Background(), "migrate", "--store", url, "--json"); code != 0 {
		t.Fatalf("exit %d: %s", code, c.stderr.String())
	}
	var r migrateReport
	if err := json.Unmarshal([]byte(c.stdout.String()), &r); err != nil || r.Driver != "sqlite" || r.Store != url ||
		r.FromVersion != 0 || r.SchemaVersion < 1 {
		t.Fatalf("report of a new store %q: %+v %v", c.stdout.String(), r, err)
	}
	// Again: nothing to apply, and the report says so.
	before := len(c.stdout.String())
	if code := c.run(context.Background(), "migrate", "--store", url, "--json"); code != 0 {
		t.Fatalf("exit %d: %s", code, c.stderr.String())
	}
	var again migrateReport
	if err := json.Unmarshal([]byte(c.stdout.String()[before:]), &again); err != nil || again.FromVersion != r.SchemaVersion ||
		again.SchemaVersion != r.SchemaVersion {
		t.Fatalf("report of a current store %q: %+v %v", c.stdout.String()[before:], again, err)
	}
	before = len(c.stdout.String())
	if code := c.run(context.Background(), "migrate", "--store", url); code != 0 {
		t.Fatalf("exit %d: %s", code, c.stderr.String())
	}
	if out := c.stdout.String()[before:]; !strings.Contains(out, "already at version "+strconv.Itoa(r.SchemaVersion)) {
		t.Fatalf("text report of a current store: %q", out)
	}
}

func TestVersionPrints(t *testing.T) {
	c := newCLI(t, map[string]string{"CHANNELS_CONFIG": "/nonexistent/channels.yaml"})
	if code := c.run(context.Background(), "version", "--json"); code != 0 {
		t.Fatal(code)
	}
	var b buildInfo
	if err := json.Unmarshal([]byte(c.stdout.String()), &b); err != nil || b.Version == "" || b.Go == "" {
		t.Fatalf("version %q: %v", c.stdout.String(), err)
	}
}

func TestBenchAcceptPrintsOneJSONLine(t *testing.T) {
	c := newCLI(t, map[string]string{"CHANNELS_STORE": "postgres://u:secret@nowhere/db"})
	if code := c.run(context.Background(), "bench", "accept", "--events", "200", "--concurrency", "8", "--probe", "100ms"); code != 0 {
		t.Fatalf("exit %d: %s", code, c.stderr.String())
	}
	out := strings.TrimSpace(c.stdout.String())
	if strings.Count(out, "\n") != 0 {
		t.Fatalf("want one line, got %q", out)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"accepts_per_sec", "p50_ms", "p99_ms", "events", "concurrency", "store", "fsyncs_per_sec"} {
		if _, ok := r[k]; !ok {
			t.Errorf("missing %s in %s", k, out)
		}
	}
	// Without --store the bench used a temporary SQLite store, not the configured one.
	if s, _ := r["store"].(string); !strings.HasPrefix(s, "sqlite://") || r["events"] != 200.0 || r["concurrency"] != 8.0 {
		t.Fatalf("result %s", out)
	}
}

func TestBenchRedactsTheStorePassword(t *testing.T) {
	if got := redactedStore("postgres://u:secret@db:5432/channels"); strings.Contains(got, "secret") {
		t.Fatalf("redacted store %s", got)
	}
}

// A no-config serve trusts requests without credentials because it listens on loopback; a
// request under a foreign Host name (a page re-pointed at 127.0.0.1 by DNS rebinding) gets no
// share of that trust, neither the A2A operations nor the admin pages.
func TestServeRefusesLoopbackTrustUnderAForeignHostName(t *testing.T) {
	c := newCLI(t, nil)
	base, _ := startServe(t, c)
	for _, path := range []string{"/tasks", "/admin/api/summary", "/metrics", "/sources/tasks"} {
		for host, want := range map[string]int{"rebind.attacker.example": http.StatusMisdirectedRequest, "localhost": http.StatusOK} {
			if path == "/sources/tasks" && want == http.StatusOK {
				want = http.StatusNotFound // no source registered it, and sources is no tenant
			}
			req, err := http.NewRequest(http.MethodGet, base+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = host
			if want == http.StatusMisdirectedRequest {
				req.Header.Set("Authorization", "Bearer made-up") // a page can add one: no way past
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("GET %s as %s: %d, want %d", path, host, resp.StatusCode, want)
			}
			// An A2A client is told in the A2A error format, which it reads; the operator's
			// routes answer as text.
			if want == http.StatusMisdirectedRequest {
				a2a := path == "/tasks" || path == "/sources/tasks" // no source took it: the A2A catch-all
				if got := resp.Header.Get("Content-Type"); a2a != strings.HasPrefix(got, "application/json") ||
					a2a != strings.Contains(string(body), `"reason":"MISDIRECTED_REQUEST"`) {
					t.Errorf("GET %s as %s: %s %s", path, host, got, body)
				}
			}
		}
	}
	// JSON-RPC's refusal is a JSON-RPC error.
	req, err := http.NewRequest(http.MethodPost, base+"/jsonrpc", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "rebind.attacker.example"
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
		!strings.Contains(string(body), `"jsonrpc":"2.0","id":null,"error":{"code":-31403`) ||
		!strings.Contains(string(body), `"reason":"MISDIRECTED_REQUEST"`) {
		t.Errorf("POST /jsonrpc as a foreign host: %d %s", resp.StatusCode, body)
	}
}

// mainArgsEnv makes the test binary run main with the arguments it holds (one per line): the
// tests that need a real process and its signals start the test binary so.
const mainArgsEnv = "CHANNELS_TEST_MAIN_ARGS"

// The first SIGTERM starts a graceful shutdown that waits for requests in flight; a second one
// ends the process at once.
func TestASecondSignalEndsTheShutdownAtOnce(t *testing.T) {
	// Port 0, the address read from the "channels serving" line: a port picked by listening and
	// closing could be taken by another process before serve bound it.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+t.TempDir(),
		mainArgsEnv+"=serve\n--listen\n127.0.0.1:0\n--shutdown-timeout\n60s")
	var stderr safebuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	addr := ""
	for deadline := time.Now().Add(30 * time.Second); addr == ""; time.Sleep(20 * time.Millisecond) {
		for _, line := range strings.Split(stderr.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "channels serving" {
				addr, _ = m["listen"].(string)
			}
		}
		if addr == "" && time.Now().After(deadline) {
			t.Fatalf("serve never reported its address; stderr:\n%s", stderr.String())
		}
	}
	// A request whose body never finishes holds the graceful shutdown. It asks for a 100
	// Continue, which the server sends when the handler starts reading the body: the request is
	// in flight from then on (a fixed sleep could end before the server had even accepted it).
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /message:send HTTP/1.1\r\nHost: "+addr+"\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 100 ") {
		t.Fatalf("no 100 Continue for the request (%q, %v); stderr:\n%s", status, err, stderr.String())
	}
	if _, err := io.WriteString(conn, "{"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		t.Fatalf("serve exited (%v) with a request in flight, before the shutdown timeout; stderr:\n%s", err, stderr.String())
	case <-time.After(time.Second):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
			t.Errorf("serve ended with %v, want the second SIGTERM's default action", cmd.ProcessState)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("serve still running 10 s after a second SIGTERM; stderr:\n%s", stderr.String())
	}
}

// A Postgres password may sit in the store URL's query (?password=, ?sslpassword=): no command
// prints it, neither in its errors nor in its output or logs.
func TestAStorePasswordInItsQueryIsNeverPrinted(t *testing.T) {
	// Nothing listens on port 1: every command fails to connect, and says so.
	unreachable := "postgres://channels@127.0.0.1:1/channels?sslmode=disable&password=hunter2&sslpassword=hunter2"
	for _, args := range [][]string{
		{"migrate"},
		{"migrate", "--json"},
		{"serve", "--listen", "127.0.0.1:0"},
		{"config", "check", "--connect"},
		{"config", "check", "--connect", "--json"},
		{"tasks", "list"},
		{"evidence"},
	} {
		c := newCLI(t, map[string]string{"CHANNELS_STORE": unreachable})
		if code := c.run(context.Background(), args...); code != 1 {
			t.Errorf("%v: exit %d", args, code)
		}
		out := c.stdout.String() + c.stderr.String()
		if strings.Contains(out, "hunter2") {
			t.Errorf("%v printed the password:\n%s", args, out)
		}
		if !strings.Contains(out, "password=xxxxx") && !strings.Contains(out, "cannot open") && !strings.Contains(out, "connect") {
			t.Errorf("%v does not say what failed:\n%s", args, out)
		}
	}

	// A server that starts logs its store and settings.
	storeURL := storetest.PostgresURL(t) + "&password=hunter2"
	c := newCLI(t, map[string]string{"CHANNELS_STORE": storeURL})
	_, stop := startServe(t, c)
	line := c.logLine(t, "channels serving")
	if s, _ := line["store"].(string); !strings.Contains(s, "password=xxxxx") {
		t.Errorf("serving with store %q", s)
	}
	stop()
	if strings.Contains(c.stderr.String(), "hunter2") {
		t.Errorf("serve logged the password:\n%s", c.stderr.String())
	}
	c = newCLI(t, map[string]string{"CHANNELS_STORE": storeURL})
	if code := c.run(context.Background(), "migrate", "--json"); code != 0 || strings.Contains(c.stdout.String()+c.stderr.String(), "hunter2") {
		t.Errorf("migrate: exit %d:\n%s%s", code, c.stdout.String(), c.stderr.String())
	}
}

// With neither XDG_DATA_HOME nor HOME and no store configured, a command that needs the store
// fails and says what to set, and config check reports it; a command without a store still runs.
func TestNoDataHomeAndNoStoreFailsAndSaysWhatToSet(t *testing.T) {
	for _, args := range [][]string{{"serve", "--listen", "127.0.0.1:0"}, {"migrate"}, {"config", "check"}, {"tasks", "list"}, {"evidence"}} {
		c := newCLI(t, nil)
		t.Setenv("XDG_DATA_HOME", "")
		t.Setenv("HOME", "")
		// A serve that started would run until the context ends, and exit 0.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		code := c.run(ctx, args...)
		cancel()
		if code != 1 {
			t.Errorf("%v: exit %d:\n%s%s", args, code, c.stdout.String(), c.stderr.String())
		}
		if out := c.stdout.String() + c.stderr.String(); !strings.Contains(out, "set XDG_DATA_HOME") || !strings.Contains(out, "or store") {
			t.Errorf("%v does not say what to set:\n%s", args, out)
		}
	}
	c := newCLI(t, nil)
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", "")
	if code := c.run(context.Background(), "sources"); code != 0 {
		t.Errorf("sources: exit %d: %s", code, c.stderr.String())
	}
}

// Secrets go on the command line as files: serve --admin-token-file guards /admin/api with the
// file's token, and --store-file names the store of any command.
func TestSecretFlagsTakeFiles(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin_token")
	const token = "0123456789abcdef-admin-from-file"
	storeURL := "sqlite://" + filepath.Join(dir, "s.db")
	storeFile := filepath.Join(dir, "store_url")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(storeFile, []byte(storeURL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t, nil)
	if code := c.run(context.Background(), "migrate", "--store-file", storeFile, "--json"); code != 0 || !strings.Contains(c.stdout.String(), storeURL) {
		t.Fatalf("migrate --store-file: exit %d: %s%s", code, c.stdout.String(), c.stderr.String())
	}
	c = newCLI(t, nil)
	if code := c.run(context.Background(), "bench", "accept", "--store-file", storeFile, "--events", "10", "--concurrency", "1", "--probe", "10ms"); code != 0 ||
		!strings.Contains(c.stdout.String(), storeURL) {
		t.Fatalf("bench accept --store-file: exit %d: %s%s", code, c.stdout.String(), c.stderr.String())
	}
	c = newCLI(t, nil)
	base, _ := startServe(t, c, "--admin-token-file", tokenFile, "--store-file", storeFile)
	if code, _ := getText(t, base+"/admin/api/summary", ""); code == http.StatusOK {
		t.Fatal("/admin/api answered without the token")
	}
	if code, body := getText(t, base+"/admin/api/summary", token); code != http.StatusOK {
		t.Fatalf("/admin/api with the file's token: %d %s", code, body)
	}
	if strings.Contains(c.stderr.String(), "process list") {
		t.Fatalf("a secret given by file warned:\n%s", c.stderr.String())
	}

	// The plain flag still works, and warns.
	c = newCLI(t, nil)
	base, _ = startServe(t, c, "--admin-token", token)
	if code, _ := getText(t, base+"/admin/api/summary", token); code != http.StatusOK {
		t.Fatalf("/admin/api with --admin-token: %d", code)
	}
	if w := c.logLine(t, "flag --admin-token puts a secret in the process list, where other users of the host can read it: give it as --admin-token-file, CHANNELS_ADMIN_TOKEN_FILE or admin_token_file in the config file"); w["level"] != "WARN" {
		t.Fatalf("warning %v", w)
	}
}

// serve's help says what a stop signal does in the order serve does it: the executor first (its
// running turns interrupted, or given turn_drain_timeout), the streams, blocking sends and
// worker claims ended, the requests drained, and only then the delivery engine and the sources,
// as the README's Shutdown says.
func TestServeHelpDescribesTheShutdownAsServeRunsIt(t *testing.T) {
	c := newCLI(t, map[string]string{"CHANNELS_CONFIG": "/nonexistent/channels.yaml"})
	if code := c.run(context.Background(), "serve", "--help"); code != 0 {
		t.Fatalf("exit %d: %s", code, c.stderr.String())
	}
	help := strings.Join(strings.Fields(c.stdout.String()), " ")
	order := []string{"SIGTERM or SIGINT", "/readyz turns 503", "claims no new turn", "turn_drain_timeout",
		"blocking sends", "worker claims", "in-flight requests drain", "delivery engine and the sources stop", "store closes"}
	at := 0
	for _, p := range order {
		i := strings.Index(help[at:], p)
		if i < 0 {
			t.Fatalf("serve --help lacks %q after %q:\n%s", p, help[:at], help)
		}
		at += i + len(p)
	}
}
