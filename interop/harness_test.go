package interop_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/channels-dev/channels/internal/safebuf"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// binary is the channels binary TestMain built for this run.
var binary string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "channels-interop-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "interop:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "channels")
	build := exec.Command("go", "build", "-o", binary, "./cmd/channels")
	build.Dir = ".." // the module root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "interop: go build ./cmd/channels:", err)
		return 1
	}
	return m.Run()
}

// Credentials of the two principals every server of these tests knows.
const (
	tokenAlice = "interop-alice-token-0123456789"
	tokenBob   = "interop-bob-token-0123456789"
)

// server is one running "channels serve" process.
type server struct {
	t      *testing.T
	URL    string // http://127.0.0.1:<port>, also the public URL
	Store  string
	cmd    *exec.Cmd
	stderr *safebuf.Buffer
	exited chan struct{}
	code   int // exit code, once exited is closed
}

// credentialsFile writes the credentials file of alice and bob and returns its path.
func credentialsFile(t *testing.T) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"credentials": []map[string]string{
		{"token": tokenAlice, "principal": "alice"},
		{"token": tokenBob, "principal": "bob"},
	}})
	p := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startServer runs the binary as "channels serve --listen 127.0.0.1:0 --executor conformance"
// with the credentials of alice and bob on storeURL, plus args, and waits for its "channels
// serving" log line. The process is killed when the test ends if it still runs. A messageId is an
// idempotency key here (--message-id-dedupe on), as on any server but one run for the A2A
// conformance kit: the clients' idempotency is part of what these tests prove.
func startServer(t *testing.T, storeURL, creds string, args ...string) *server {
	t.Helper()
	home := t.TempDir()
	argv := append([]string{"serve", "--listen", "127.0.0.1:0", "--executor", "conformance", "--message-id-dedupe", "on",
		"--store", storeURL, "--shutdown-timeout", "20s", "--keep-alive", "1s"}, args...)
	if creds != "" {
		argv = append(argv, "--credentials", creds)
	}
	cmd := serveCommand(home, argv)
	s := &server{t: t, Store: storeURL, cmd: cmd, stderr: &safebuf.Buffer{}, exited: make(chan struct{}), code: -1}
	cmd.Stderr = s.stderr
	cmd.Stdout = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		s.code = cmd.ProcessState.ExitCode()
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
			return
		default:
		}
		_ = cmd.Process.Kill()
		<-s.exited
		if t.Failed() {
			t.Logf("serve stderr:\n%s", s.stderr.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if line := s.logLine("channels serving"); line != nil {
			addr, _ := line["listen"].(string)
			s.URL = "http://" + addr
			return s
		}
		select {
		case <-s.exited:
			t.Fatalf("serve exited with %d before serving:\n%s", s.code, s.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not report its address in 30 s:\n%s", s.stderr.String())
		}
	}
}

// serveCommand is the binary run with argv in an environment cleaned of the developer's settings:
// the child sees no CHANNELS_* variable, and its XDG directories are under home, so no config file
// or default store of the developer's is read.
func serveCommand(home string, argv []string) *exec.Cmd {
	cmd := exec.Command(binary, argv...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHANNELS_") && !strings.HasPrefix(kv, "XDG_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "XDG_DATA_HOME="+filepath.Join(home, "data"), "XDG_CONFIG_HOME="+filepath.Join(home, "config"))
	dieWithTest(cmd)
	return cmd
}

// logLine returns the first JSON log line whose msg is msg, or nil.
func (s *server) logLine(msg string) map[string]any { return logLineIn(s.stderr.String(), msg) }

// logLineIn returns the first JSON log line of out whose msg is msg, or nil.
func logLineIn(out, msg string) map[string]any {
	for line := range strings.SplitSeq(out, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			return m
		}
	}
	return nil
}

// sigterm sends SIGTERM and returns the exit code, failing the test if the process does not
// exit within 30 s.
func (s *server) sigterm() int {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatal(err)
	}
	select {
	case <-s.exited:
		return s.code
	case <-time.After(30 * time.Second):
		s.t.Fatalf("serve did not exit within 30 s of SIGTERM:\n%s", s.stderr.String())
		return -1
	}
}

// sqliteStore returns a store URL of a fresh SQLite database in a temporary directory.
func sqliteStore(t *testing.T) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "channels.db")
}

// forEachStore runs fn once on SQLite and once on Postgres (see storetest.PostgresURL).
func forEachStore(t *testing.T, fn func(t *testing.T, storeURL string)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, sqliteStore(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, storetest.PostgresURL(t)) })
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// ctxT is a context that ends after 30 s or with the test.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// firstEventID opens GET {base}/tasks/{id}:subscribe as token with a raw HTTP request and returns
// the SSE id of its first event (the snapshot's sequence in the task's event log), then closes it.
func firstEventID(t *testing.T, base, token, taskID string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/tasks/"+url.PathEscape(taskID)+":subscribe", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("subscribe %s: HTTP %d", taskID, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			return id
		}
	}
	t.Fatalf("subscribe %s: no event id (%v)", taskID, sc.Err())
	return ""
}
