package interop_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/channels-dev/channels/internal/safebuf"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// The chaos soak: A2A load against "channels serve" processes that are stopped (SIGTERM, twice
// in a row, or SIGKILL) and started again while it runs, and on Postgres store connections cut
// from the database's side, followed by a quiet period and checks of what every acknowledgement
// promised. It runs when TEST_SOAK=<duration> says how long the load runs (scripts/test.sh
// sets 20s).

// soakEnv is the variable that turns the soak on and says how long its load runs.
const soakEnv = "TEST_SOAK"

// soakPrincipal is the principal of tokenAlice, the one every soak request is sent as.
const soakPrincipal = "alice"

// soakLease is the processes' turn lease (turn_lease): a turn whose process was SIGKILLed is
// offered again only once its lease has run out, a minute by default.
const soakLease = 5 * time.Second

// soakQuiet bounds the quiet period after the load: it outlasts a lease plus the re-offer
// back-off and the dispatchers' polling. The period ends as soon as every task is settled.
const soakQuiet = soakLease + 45*time.Second

// soakAgent is the exec executor's command: it reads the task, works a little (so turns are in
// flight when a process is stopped), and completes.
const soakAgent = `#!/bin/sh
cat >/dev/null
sleep 0.3
echo '{"result":"complete","response":"done"}'
`

// TestAcknowledgedWorkSurvivesKillsAndRestarts is the chaos soak, run only when TEST_SOAK is
// set to a duration (the length of the load; at least 20s). On SQLite one serve process is
// stopped and started again while clients send; on Postgres (TEST_DATABASE_URL) three share a
// fresh schema, one stopped at a time, and the store's connections are cut twice. After a quiet
// period it checks, through the API and in the store, that every acknowledged messageId has
// exactly one task (a resend returned the same one), every acknowledged task is settled, each
// task's event log runs 1..last without a gap, every stream resumed with Last-Event-ID matches a
// full replay, acknowledged cancels held, and no request got a 5xx other than 503 with
// Retry-After.
func TestAcknowledgedWorkSurvivesKillsAndRestarts(t *testing.T) {
	raw := os.Getenv(soakEnv)
	if raw == "" {
		t.Skip("the chaos soak runs with its load's length set: TEST_SOAK=60s go test -run TestAcknowledgedWorkSurvivesKillsAndRestarts -v ./interop/ " +
			"(Postgres too with TEST_DATABASE_URL; see docs/architecture.md)")
	}
	load, err := time.ParseDuration(raw)
	if err != nil || load < 20*time.Second {
		t.Fatalf("%s=%q: want a duration of at least 20s", soakEnv, raw)
	}
	t.Run("sqlite", func(t *testing.T) {
		runSoak(t, soakConfig{storeURL: sqliteStore(t), nodes: 1, workers: 4, load: load})
	})
	t.Run("postgres", func(t *testing.T) {
		storeURL := storetest.PostgresURL(t)
		// The serve processes' connections carry an application_name of their own, so the test
		// can cut exactly those; a cluster restart is not the test's to make.
		app := "channels_soak_" + randomHex(t, 4)
		u, err := url.Parse(storeURL)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
		admin := os.Getenv("TEST_DATABASE_URL")
		runSoak(t, soakConfig{storeURL: u.String(), nodes: 3, workers: 6, load: load,
			cut: func(ctx context.Context) (int, error) { return storetest.TerminateBackends(ctx, admin, app) }})
	})
}

// soakConfig is one soak run.
type soakConfig struct {
	storeURL string
	nodes    int           // serve processes on the store
	workers  int           // client goroutines sending at once
	load     time.Duration // how long the clients send
	// cut ends the store's connections from the database's side and returns how many it ended;
	// nil where there are none to cut (SQLite).
	cut func(ctx context.Context) (int, error)
}

// runSoak runs one soak: start, load with chaos, quiet period, checks. Everything it starts is
// stopped when it returns or by t.Cleanup.
func runSoak(t *testing.T, cfg soakConfig) {
	// Startup, the load, the quiet period, then the checks and the shutdown.
	need := 30*time.Second + cfg.load + soakQuiet + 90*time.Second
	if dl, ok := t.Deadline(); ok && time.Until(dl) < need {
		t.Fatalf("this run needs %s; raise go test's -timeout (both subtests: at least %s)", need.Round(time.Second),
			(2 * need).Round(time.Minute))
	}
	ctx, cancel := context.WithTimeout(context.Background(), need)
	t.Cleanup(cancel)

	dir := t.TempDir()
	agent := filepath.Join(dir, "agent.sh")
	if err := os.WriteFile(agent, []byte(soakAgent), 0o755); err != nil {
		t.Fatal(err)
	}
	creds := credentialsFile(t)
	var nodes []*soakNode
	for i := range cfg.nodes {
		// Every third process of several runs the echo executor; the others run the agent
		// script, so turns are in flight when a process is stopped.
		exe := []string{"--executor", "exec", "--exec-command", agent}
		if i%3 == 2 {
			exe = []string{"--executor", "echo"}
		}
		argv := append([]string{"serve", "--store", cfg.storeURL, "--credentials", creds, "--message-id-dedupe", "on",
			"--turn-lease", soakLease.String(),
			"--blocking-timeout", "20s", "--shutdown-timeout", "10s", "--keep-alive", "1s"}, exe...)
		n := &soakNode{name: fmt.Sprintf("serve%d", i), home: filepath.Join(dir, fmt.Sprintf("home%d", i)), argv: argv,
			addr: "127.0.0.1:0", log: &safebuf.Buffer{}}
		t.Cleanup(n.kill)
		if err := n.start(ctx); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("%s log (tail):\n%s", n.name, n.tail(8<<10))
			}
		}
	})

	s := &soak{t: t, nodes: nodes, run: randomHex(t, 4), acked: map[string]string{}, taskMid: map[string]string{}, codes: map[string]int{},
		http: &http.Client{Timeout: 45 * time.Second}}
	start := time.Now()
	loadEnd := start.Add(cfg.load)
	// Acknowledgements are still sought, and streams followed, a while after the load, while the
	// last processes restart.
	ackBy := loadEnd.Add(30 * time.Second)
	followBy := loadEnd.Add(15 * time.Second)
	var wg sync.WaitGroup
	chaosCtx, stopChaos := context.WithDeadline(ctx, loadEnd.Add(-5*time.Second))
	defer stopChaos()
	wg.Go(func() { s.chaos(chaosCtx, ctx, cfg.load) })
	if cfg.cut != nil {
		wg.Go(func() { s.cutConnections(chaosCtx, cfg.cut, cfg.load) })
	}
	for range cfg.workers {
		wg.Go(func() { s.worker(ctx, loadEnd, followBy, ackBy) })
	}
	wg.Wait()
	for _, n := range nodes {
		if !n.running() {
			if err := n.start(ctx); err != nil {
				t.Fatalf("start after the load: %v", err)
			}
			s.restarts.Add(1)
		}
	}
	t.Logf("load done after %s", time.Since(start).Round(time.Second))

	quietStart := time.Now()
	unsettled := s.waitSettled(ctx, quietStart.Add(soakQuiet))
	t.Logf("quiet period: %s", time.Since(quietStart).Round(time.Second))
	for _, id := range unsettled {
		s.violation("task %s (messageId %s) is %s after the quiet period of %s", id, s.midOf(id), s.lastState[id], soakQuiet)
	}
	s.checkAPI(ctx, unsettled)

	// The store is read by the test itself once the processes are gone (a SQLite store takes
	// one process at a time).
	for _, n := range nodes {
		if err := n.stop(); err != nil {
			s.violation("%v", err)
		}
	}
	s.checkStore(ctx, cfg.storeURL)
	if ctx.Err() != nil {
		s.violation("the run passed its overall deadline of %s", need.Round(time.Second))
	}
	s.report(time.Since(start))
}

// soakNode is one serve process slot: the process is stopped and started again, on a free port,
// during the soak.
type soakNode struct {
	name string
	home string
	argv []string
	log  *safebuf.Buffer // every generation's output, one after another

	mu     sync.Mutex
	addr   string // host:port the process listens on; 127.0.0.1:0 until the first start bound one
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	// serving is whether cmd has reported its address: chaos stops only such a process, since
	// one stopped while it starts exits before serving, which start reports as a failure.
	serving bool
}

// start starts the process on a free port and waits for its "channels serving" line, which
// names the address n then has.
func (n *soakNode) start(ctx context.Context) error {
	n.mu.Lock()
	from := len(n.log.String())
	fmt.Fprintf(n.log, "=== start at %s\n", time.Now().Format(time.RFC3339Nano))
	// A free port each time: the one of the last run may have been taken meanwhile (the clients
	// read n.url at every request).
	cmd := serveCommand(n.home, append(slices.Clone(n.argv), "--listen", "127.0.0.1:0"))
	cmd.Stdout, cmd.Stderr = n.log, n.log
	if err := cmd.Start(); err != nil {
		n.mu.Unlock()
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	n.cmd, n.exited, n.serving = cmd, exited, false
	n.mu.Unlock()

	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		if line := logLineIn(n.log.String()[from:], "channels serving"); line != nil {
			addr, _ := line["listen"].(string)
			n.mu.Lock()
			n.addr, n.serving = addr, true
			n.mu.Unlock()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s %w: %s", n.name, errExitedBeforeServing, n.log.String()[from:])
		case <-deadline.C:
			return fmt.Errorf("%s did not report its address in 30 s", n.name)
		case <-ctx.Done():
			return fmt.Errorf("start %s: %w", n.name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// errExitedBeforeServing is start's error when the process exited before it served.
var errExitedBeforeServing = errors.New("exited before serving")

// url is the base URL requests to n go to.
func (n *soakNode) url() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return "http://" + n.addr
}

// running reports whether n's current process has not exited.
func (n *soakNode) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// up reports whether n's current process has started serving and has not exited.
func (n *soakNode) up() bool {
	n.mu.Lock()
	serving := n.serving
	n.mu.Unlock()
	return serving && n.running()
}

// signal sends sig to n's process and returns the channel closed when it exits; false if it is
// not running.
func (n *soakNode) signal(sig syscall.Signal) (<-chan struct{}, bool) {
	if !n.running() {
		return nil, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.cmd.Process.Signal(sig); err != nil {
		return nil, false
	}
	return n.exited, true
}

// stop ends n's process with SIGTERM, or SIGKILL if it has not exited 30 s later.
func (n *soakNode) stop() error {
	exited, ok := n.signal(syscall.SIGTERM)
	if !ok {
		return nil
	}
	select {
	case <-exited:
		return nil
	case <-time.After(30 * time.Second):
		n.kill()
		return fmt.Errorf("%s did not exit within 30 s of SIGTERM", n.name)
	}
}

// kill ends n's process, if it runs, with SIGKILL and waits for it.
func (n *soakNode) kill() {
	if exited, ok := n.signal(syscall.SIGKILL); ok {
		<-exited
	}
}

// tail is the last size bytes of n's output.
func (n *soakNode) tail(size int) string {
	s := n.log.String()
	if len(s) > size {
		s = s[len(s)-size:]
	}
	return s
}

// soak is the state of one run: its processes, what the clients were promised, and what went
// wrong.
type soak struct {
	t     *testing.T
	nodes []*soakNode
	run   string // prefix of this run's messageIds
	http  *http.Client

	seq                                  atomic.Int64 // messageIds handed out
	requests, transportErrors, retries   atomic.Int64
	kills, terms, doubleTerms, restarts  atomic.Int64
	cuts, backendsCut, unacknowledged    atomic.Int64
	cutsBegun                            atomic.Int64 // cuts started; more than cuts while one runs
	streamsMatched, unavailable, newSent atomic.Int64

	mu         sync.Mutex
	acked      map[string]string // messageId → the task its first acknowledgement named
	taskMid    map[string]string // the other way round
	ackedOrder []string          // tasks, in the order first acknowledged
	ackCount   int
	cancels    []string          // tasks whose cancel was acknowledged as CANCELED
	streams    []streamRecord    // followed streams, checked against a full replay
	codes      map[string]int    // "op status" → count
	lastState  map[string]string // task → state at the end of the quiet period
	problems   []string
}

// streamRecord is one stream followed across reconnections: the ids of the events received, the
// first of them the snapshot's.
type streamRecord struct {
	kind     string // subscribe or stream
	task     string
	mid      string // the streaming send's messageId; "" for a subscription
	ids      []int64
	final    string // the last state seen
	segments int
}

// violation records a broken promise; the test fails with all of them at the end.
func (s *soak) violation(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.problems = append(s.problems, fmt.Sprintf(format, args...))
}

// pick is a node chosen at random.
func (s *soak) pick() *soakNode { return s.nodes[rand.IntN(len(s.nodes))] }

// newMid is a messageId not used before.
func (s *soak) newMid() string { return fmt.Sprintf("soak-%s-%d", s.run, s.seq.Add(1)) }

// recordAck records that mid was acknowledged as task, and a violation if an earlier
// acknowledgement of mid named another task.
func (s *soak) recordAck(mid, task, how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ackCount++
	prev, ok := s.acked[mid]
	if !ok {
		s.acked[mid] = task
		s.taskMid[task] = mid
		s.ackedOrder = append(s.ackedOrder, task)
		return
	}
	if prev != task {
		s.problems = append(s.problems, fmt.Sprintf("messageId %s was acknowledged as task %s, then as task %s (%s)", mid, prev, task, how))
	}
}

// midOf is the messageId acknowledged as task.
func (s *soak) midOf(task string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if mid, ok := s.taskMid[task]; ok {
		return mid
	}
	return "?"
}

// randomAcked is a messageId acknowledged so far and its task, or "" before the first.
func (s *soak) randomAcked() (mid, task string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ackedOrder) == 0 {
		return "", ""
	}
	task = s.ackedOrder[rand.IntN(len(s.ackedOrder))]
	return s.taskMid[task], task
}

// count tallies a response of op and records a violation for a 5xx other than 503 with
// Retry-After. what names the request in the message.
func (s *soak) count(op, what string, code int, h http.Header, body []byte) {
	s.mu.Lock()
	s.codes[fmt.Sprintf("%s %d", op, code)]++
	s.mu.Unlock()
	switch {
	case code == http.StatusServiceUnavailable && h.Get("Retry-After") != "":
		s.unavailable.Add(1)
	case code >= 500:
		s.violation("%s: HTTP %d (Retry-After %q): %s", what, code, h.Get("Retry-After"), truncate(body))
	}
}

// truncate is b cut to 300 bytes, for a failure message.
func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// do sends one request to n as alice and returns its status and body; status 0 is a transport
// error (the process was stopped, for one).
func (s *soak) do(ctx context.Context, n *soakNode, op, what, method, path string, body []byte) (int, []byte) {
	s.requests.Add(1)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, n.url()+path, rd)
	if err != nil {
		s.violation("%s: %v", what, err)
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+tokenAlice)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.http.Do(req)
	if err != nil {
		s.transportErrors.Add(1)
		return 0, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.transportErrors.Add(1)
		return 0, nil
	}
	s.count(op, what, resp.StatusCode, resp.Header, b)
	return resp.StatusCode, b
}

// sendBody is the request of a send of a text message under mid.
func sendBody(mid string, immediate bool) []byte {
	m := map[string]any{"message": map[string]any{"messageId": mid, "role": "ROLE_USER",
		"parts": []any{map[string]any{"text": "soak " + mid}}}}
	if immediate {
		m["configuration"] = map[string]any{"returnImmediately": true}
	}
	b, _ := json.Marshal(m)
	return b
}

// wireTask is the part of an A2A Task the soak reads.
type wireTask struct {
	ID     string `json:"id"`
	Status struct {
		State string `json:"state"`
	} `json:"status"`
	History []struct {
		MessageID string `json:"messageId"`
	} `json:"history"`
}

// settled reports whether an A2A task state is one the task stays in without a new message.
func settled(state string) bool {
	switch state {
	case "TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED",
		"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED":
		return true
	}
	return false
}

// sendUntilAcked sends mid to random nodes until one acknowledges it with a task or ackBy passes,
// and returns the task ("" if none did).
func (s *soak) sendUntilAcked(ctx context.Context, mid string, immediate bool, ackBy time.Time, how string) string {
	body := sendBody(mid, immediate)
	what := "send of messageId " + mid
	for attempt := 0; time.Now().Before(ackBy) && ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			s.retries.Add(1)
		}
		code, b := s.do(ctx, s.pick(), "send", what, http.MethodPost, "/message:send", body)
		switch {
		case code == http.StatusOK:
			var resp struct {
				Task *wireTask `json:"task"`
			}
			if err := json.Unmarshal(b, &resp); err != nil || resp.Task == nil || resp.Task.ID == "" {
				s.violation("%s: 200 without a task: %s", what, truncate(b))
				return ""
			}
			if len(resp.Task.History) == 0 || resp.Task.History[0].MessageID != mid {
				s.violation("%s: task %s does not begin with the message: %s", what, resp.Task.ID, truncate(b))
			}
			s.recordAck(mid, resp.Task.ID, how)
			return resp.Task.ID
		case code != 0 && code != http.StatusServiceUnavailable:
			s.violation("%s: HTTP %d: %s", what, code, truncate(b))
			return ""
		}
		sleep(ctx, time.Duration(100+rand.IntN(400))*time.Millisecond)
	}
	s.unacknowledged.Add(1)
	return ""
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// worker sends until loadEnd: new messages (blocking or returning at once, some sent again), cancels,
// subscriptions and streaming sends followed across deliberate disconnects, gets and resends of
// earlier messages.
func (s *soak) worker(ctx context.Context, loadEnd, followBy, ackBy time.Time) {
	for time.Now().Before(loadEnd) && ctx.Err() == nil {
		switch p := rand.IntN(100); {
		case p < 50:
			mid := s.newMid()
			s.newSent.Add(1)
			immediate := rand.IntN(2) == 0
			task := s.sendUntilAcked(ctx, mid, immediate, ackBy, "send")
			if task == "" {
				continue
			}
			if rand.IntN(100) < 30 {
				s.sendUntilAcked(ctx, mid, rand.IntN(2) == 0, ackBy, "resend")
			}
			if !immediate {
				continue
			}
			switch q := rand.IntN(100); {
			case q < 25:
				s.cancel(ctx, task)
			case q < 60:
				s.follow(ctx, followBy, "subscribe", task, "")
			}
		case p < 60:
			mid := s.newMid()
			s.newSent.Add(1)
			s.follow(ctx, followBy, "stream", "", mid)
			// The streaming send's task, acknowledged again through a plain resend.
			s.sendUntilAcked(ctx, mid, true, ackBy, "resend after a stream")
		case p < 80:
			mid, task := s.randomAcked()
			if task == "" {
				continue
			}
			what := fmt.Sprintf("get of task %s (messageId %s)", task, mid)
			if code, b := s.do(ctx, s.pick(), "get", what, http.MethodGet, "/tasks/"+task+"?historyLength=1", nil); code != 0 &&
				code != http.StatusOK && code != http.StatusServiceUnavailable {
				s.violation("%s: HTTP %d: %s", what, code, truncate(b))
			}
		default:
			if mid, _ := s.randomAcked(); mid != "" {
				s.sendUntilAcked(ctx, mid, rand.IntN(2) == 0, ackBy, "resend of an earlier message")
			}
		}
	}
}

// cancel cancels task; a cancel answered with a CANCELED task must hold.
func (s *soak) cancel(ctx context.Context, task string) {
	what := "cancel of task " + task
	code, b := s.do(ctx, s.pick(), "cancel", what, http.MethodPost, "/tasks/"+task+":cancel", nil)
	switch code {
	case http.StatusOK:
		var tk wireTask
		if err := json.Unmarshal(b, &tk); err != nil {
			s.violation("%s: %v: %s", what, err, truncate(b))
			return
		}
		if tk.Status.State == "TASK_STATE_CANCELED" {
			s.mu.Lock()
			s.cancels = append(s.cancels, task)
			s.mu.Unlock()
		}
	case 0, http.StatusServiceUnavailable:
	case http.StatusBadRequest: // TASK_NOT_CANCELABLE: it finished first
		if !bytes.Contains(b, []byte("TASK_NOT_CANCELABLE")) {
			s.violation("%s: HTTP 400: %s", what, truncate(b))
		}
	default:
		s.violation("%s: HTTP %d: %s", what, code, truncate(b))
	}
}

// follow follows one task's events to the end, for up to a minute and not past until, dropping
// the connection now and then after an event or two and resuming with Last-Event-ID on a random
// node: kind "subscribe" subscribes to task; kind "stream" sends mid as a streaming message
// (resuming is resending it). The record is checked against a full replay at the end.
func (s *soak) follow(ctx context.Context, until time.Time, kind, task, mid string) {
	if minute := time.Now().Add(time.Minute); minute.Before(until) {
		until = minute
	}
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	rec := streamRecord{kind: kind, task: task, mid: mid}
	defer func() {
		if rec.task != "" && len(rec.ids) > 0 {
			s.mu.Lock()
			s.streams = append(s.streams, rec)
			s.mu.Unlock()
		}
	}()
	last := int64(-1)
	for ctx.Err() == nil {
		maxEvents := 0
		if rand.IntN(2) == 0 {
			maxEvents = 1 + rand.IntN(2)
		}
		var seg sseSegment
		if kind == "subscribe" {
			seg = s.readSSE(ctx, "subscribe to task "+task, http.MethodGet, "/tasks/"+task+":subscribe", nil, last, maxEvents)
		} else {
			seg = s.readSSE(ctx, "streaming send of messageId "+mid, http.MethodPost, "/message:stream", sendBody(mid, false), last, maxEvents)
		}
		rec.segments++
		switch {
		case seg.code == http.StatusOK:
			if seg.task != "" {
				if rec.task != "" && rec.task != seg.task {
					s.violation("streaming send of messageId %s: task %s, then task %s on a resend", mid, rec.task, seg.task)
				}
				if rec.task == "" {
					s.recordAck(mid, seg.task, "stream")
				}
				rec.task = seg.task
			}
			rec.ids = append(rec.ids, seg.ids...)
			if len(rec.ids) > 0 {
				last = rec.ids[len(rec.ids)-1]
			}
			if seg.final != "" {
				rec.final = seg.final
			}
			if seg.done {
				return
			}
		case seg.code == http.StatusBadRequest && bytes.Contains(seg.body, []byte("UNSUPPORTED_OPERATION")):
			return // a terminal task with nothing after the last id: the end
		case seg.code != 0 && seg.code != http.StatusServiceUnavailable:
			s.violation("%s %s (messageId %s): HTTP %d: %s", kind, rec.task, mid, seg.code, truncate(seg.body))
			return
		}
		sleep(ctx, time.Duration(50+rand.IntN(300))*time.Millisecond)
	}
}

// sseSegment is what one SSE connection delivered.
type sseSegment struct {
	code  int // HTTP status; 0 for a transport error
	body  []byte
	ids   []int64 // the events' ids, in order
	task  string  // the id of the first Task event, if any
	final string  // the last task state seen
	done  bool    // the task reached a settled state
}

// readSSE opens one SSE stream (with Last-Event-ID last unless it is negative) and reads it until
// the task settles, the stream ends, or maxEvents events came (0: no limit), when it hangs up.
func (s *soak) readSSE(ctx context.Context, what, method, path string, body []byte, last int64, maxEvents int) sseSegment {
	s.requests.Add(1)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.pick().url()+path, rd)
	if err != nil {
		s.violation("%s: %v", what, err)
		return sseSegment{}
	}
	req.Header.Set("Authorization", "Bearer "+tokenAlice)
	req.Header.Set("Accept", "text/event-stream")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if last >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(last, 10))
	}
	// No client timeout: ctx bounds the stream.
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.transportErrors.Add(1)
		return sseSegment{}
	}
	defer resp.Body.Close()
	op := "stream"
	if method == http.MethodGet {
		op = "subscribe"
	}
	seg := sseSegment{code: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		seg.body, _ = io.ReadAll(resp.Body)
		s.count(op, what, resp.StatusCode, resp.Header, seg.body)
		return seg
	}
	s.count(op, what, resp.StatusCode, resp.Header, nil)
	br := bufio.NewReader(resp.Body)
	var id int64 = -1
	var data, event string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return seg // the connection ended: resume
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "id:"):
			id, _ = strconv.ParseInt(strings.TrimSpace(line[3:]), 10, 64)
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimSpace(line[5:])
		case line == "" && data != "":
			if event == "error" {
				// An error after the stream started: the store out of reach is a 503's equal.
				var e struct {
					Error struct {
						Code int `json:"code"`
					} `json:"error"`
				}
				if json.Unmarshal([]byte(data), &e) != nil || e.Error.Code != http.StatusServiceUnavailable {
					s.violation("%s: error event: %s", what, truncate([]byte(data)))
				} else {
					s.unavailable.Add(1)
				}
				return seg
			}
			var ev struct {
				Task         *wireTask `json:"task"`
				StatusUpdate *struct {
					Status struct {
						State string `json:"state"`
					} `json:"status"`
				} `json:"statusUpdate"`
			}
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				s.violation("%s: event %d: %v: %s", what, id, err, truncate([]byte(data)))
				return seg
			}
			switch {
			case ev.Task != nil:
				seg.final = ev.Task.Status.State
				if seg.task == "" {
					seg.task = ev.Task.ID
				}
			case ev.StatusUpdate != nil:
				seg.final = ev.StatusUpdate.Status.State
			}
			seg.ids = append(seg.ids, id)
			data, event = "", ""
			if settled(seg.final) {
				seg.done = true
				return seg
			}
			if maxEvents > 0 && len(seg.ids) >= maxEvents {
				return seg // hang up on purpose
			}
		}
	}
}

// chaos stops a random serving process every 4–10 s (every load/8 to load/4 in a load shorter
// than 80 s, so a short run has a few stops; a round that finds no process serving, or only one
// of several, is skipped) until ctx ends, and starts it again (within run, the whole run's
// context) 1–3 s after it exited, on a free port. The stops go round SIGKILL, two SIGTERMs 300 ms
// apart, SIGTERM, SIGKILL, so that three stops have each kind. Of several processes one is always
// left running.
func (s *soak) chaos(ctx, run context.Context, load time.Duration) {
	var restarts sync.WaitGroup
	defer restarts.Wait()
	lo, hi := min(4*time.Second, load/8), min(10*time.Second, load/4)
	for round := 0; ; {
		sleep(ctx, lo+rand.N(hi-lo))
		if ctx.Err() != nil {
			return
		}
		var up []*soakNode
		for _, n := range s.nodes {
			if n.up() {
				up = append(up, n)
			}
		}
		if len(up) == 0 || len(s.nodes) > 1 && len(up) == 1 {
			continue
		}
		n := up[rand.IntN(len(up))]
		var exited <-chan struct{}
		var ok bool
		switch round % 4 {
		case 0, 3:
			if exited, ok = n.signal(syscall.SIGKILL); ok {
				s.kills.Add(1)
			}
		case 2:
			if exited, ok = n.signal(syscall.SIGTERM); ok {
				s.terms.Add(1)
			}
		case 1:
			if exited, ok = n.signal(syscall.SIGTERM); ok {
				time.Sleep(300 * time.Millisecond)
				n.signal(syscall.SIGTERM)
				s.doubleTerms.Add(1)
			}
		}
		if !ok {
			continue
		}
		round++
		restarts.Go(func() {
			<-exited
			time.Sleep(time.Duration(1000+rand.IntN(2000)) * time.Millisecond)
			// run, not ctx: a process stopped near the end is still started. One whose store
			// connections were cut while it opened the store exits, as it would in a database
			// restart (its supervisor starts it again); so does the soak, twice at most.
			for attempt := 1; ; attempt++ {
				begun, cuts := s.cutsBegun.Load(), s.cuts.Load()
				err := n.start(run)
				if err == nil {
					break
				}
				cutMeanwhile := begun > cuts || s.cutsBegun.Load() > begun
				if !errors.Is(err, errExitedBeforeServing) || !cutMeanwhile || attempt == 3 {
					s.violation("restart: %v", err)
					return
				}
			}
			s.restarts.Add(1)
		})
	}
}

// cutConnections cuts the store's connections twice, at a third and two thirds of the load.
func (s *soak) cutConnections(ctx context.Context, cut func(context.Context) (int, error), load time.Duration) {
	for range 2 {
		sleep(ctx, load/3)
		if ctx.Err() != nil {
			return
		}
		s.cutsBegun.Add(1)
		n, err := cut(ctx)
		if err != nil {
			s.violation("cut the store's connections: %v", err)
			return
		}
		s.cuts.Add(1)
		s.backendsCut.Add(int64(n))
	}
}

// waitSettled polls the acknowledged tasks through the API until every one is settled or until
// quietEnd, and returns those that are not.
func (s *soak) waitSettled(ctx context.Context, quietEnd time.Time) []string {
	s.mu.Lock()
	pending := slices.Clone(s.ackedOrder)
	s.lastState = map[string]string{}
	s.mu.Unlock()
	for {
		var still []string
		for _, id := range pending {
			code, b := s.do(ctx, s.pick(), "final get", "get of task "+id, http.MethodGet, "/tasks/"+id+"?historyLength=0", nil)
			var tk wireTask
			if code != http.StatusOK || json.Unmarshal(b, &tk) != nil {
				s.lastState[id] = fmt.Sprintf("unread (HTTP %d)", code)
				still = append(still, id)
				continue
			}
			s.lastState[id] = tk.Status.State
			if !settled(tk.Status.State) {
				still = append(still, id)
			}
		}
		pending = still
		if len(pending) == 0 || time.Now().After(quietEnd) || ctx.Err() != nil {
			return pending
		}
		sleep(ctx, 2*time.Second)
	}
}

// checkAPI checks through the API that acknowledged cancels held and that every followed stream
// matches a full replay of its task's log, which must run 1..last. Tasks in unsettled are left
// out (already reported).
func (s *soak) checkAPI(ctx context.Context, unsettled []string) {
	for _, task := range s.cancels {
		if st := s.lastState[task]; st != "TASK_STATE_CANCELED" {
			s.violation("task %s (messageId %s): its cancel was acknowledged, but it is %s", task, s.midOf(task), st)
		}
	}
	replays := map[string][]int64{}
	for _, rec := range s.streams {
		if slices.Contains(unsettled, rec.task) {
			continue
		}
		ref, ok := replays[rec.task]
		if !ok {
			what := fmt.Sprintf("full replay of task %s (messageId %s)", rec.task, s.midOf(rec.task))
			seg := s.readSSE(ctx, what, http.MethodGet, "/tasks/"+rec.task+":subscribe", nil, 0, 0)
			if seg.code != http.StatusOK || !seg.done {
				s.violation("%s: HTTP %d, settled %v: %s", what, seg.code, seg.done, truncate(seg.body))
				continue
			}
			for i, id := range seg.ids {
				if id != int64(i+1) {
					s.violation("%s: event ids %v, want 1..%d", what, seg.ids, len(seg.ids))
					break
				}
			}
			ref = seg.ids
			replays[rec.task] = ref
		}
		// The first event received is the snapshot, whatever its id; the rest must be exactly
		// the log's events after it, all of them if the stream was followed to the end.
		snapshot, got := rec.ids[0], rec.ids[1:]
		var want []int64
		for _, id := range ref {
			if id > snapshot {
				want = append(want, id)
			}
		}
		if !settled(rec.final) && len(got) <= len(want) {
			want = want[:len(got)]
		}
		if !slices.Equal(got, want) {
			s.violation("%s of task %s (messageId %s): received ids %v after snapshot %d over %d connections, the log has %v",
				rec.kind, rec.task, s.midOf(rec.task), got, snapshot, rec.segments, ref)
			continue
		}
		s.streamsMatched.Add(1)
	}
}

// checkStore reads the store directly: each acknowledged messageId's claim names its task, no
// messageId has a second task, every acknowledged task is out of SUBMITTED and WORKING, and
// its event log is 1..LastSeq without a gap.
func (s *soak) checkStore(ctx context.Context, storeURL string) {
	st, err := store.Open(ctx, storeURL)
	if err != nil {
		s.violation("open the store: %v", err)
		return
	}
	defer st.Close()
	for mid, task := range s.acked {
		c, err := st.GetClaim(ctx, soakPrincipal, "a2a", mid)
		switch {
		case err != nil:
			s.violation("messageId %s (task %s): claim: %v", mid, task, err)
		case c.TaskID != task || c.State != store.ClaimDone:
			s.violation("messageId %s: acknowledged as task %s, the claim is %s for task %q", mid, task, c.State, c.TaskID)
		}
	}
	for _, task := range s.ackedOrder {
		mid := s.midOf(task)
		tk, err := st.GetTask(ctx, soakPrincipal, task)
		if err != nil {
			s.violation("task %s (messageId %s): %v", task, mid, err)
			continue
		}
		if tk.State == string(taskplane.StateSubmitted) || tk.State == string(taskplane.StateWorking) {
			s.violation("task %s (messageId %s) is %s in the store", task, mid, tk.State)
		}
		evs, err := st.TaskEvents(ctx, soakPrincipal, task, 0, int(tk.LastSeq)+10)
		if err != nil {
			s.violation("task %s (messageId %s): events: %v", task, mid, err)
			continue
		}
		seqs := make([]int64, len(evs))
		for i, e := range evs {
			seqs[i] = e.Seq
		}
		for i, seq := range seqs {
			if seq != int64(i+1) || len(seqs) != int(tk.LastSeq) {
				s.violation("task %s (messageId %s): event seqs %v, want 1..%d", task, mid, seqs, tk.LastSeq)
				break
			}
		}
		// A terminal task is final: a turn run again after a stop never finishes it a second time.
		var finishes []string
		for _, e := range evs {
			var u taskplane.StatusUpdate
			if e.Kind == taskplane.EventStatus && json.Unmarshal(e.Payload, &u) == nil && u.Status.State.Terminal() {
				finishes = append(finishes, fmt.Sprintf("%d:%s", e.Seq, u.Status.State))
			}
		}
		if len(finishes) > 1 {
			s.violation("task %s (messageId %s) finished %d times: %v", task, mid, len(finishes), finishes)
		}
	}
	// Every task of the run, acknowledged or not: one per messageId.
	byMid := map[string][]string{}
	f := store.TaskFilter{Source: "a2a", Limit: 500}
	for {
		page, _, err := st.ListTasks(ctx, soakPrincipal, f)
		if err != nil {
			s.violation("list tasks: %v", err)
			break
		}
		for _, tk := range page {
			var body struct {
				Origin struct {
					Identity string `json:"identity"`
				} `json:"origin"`
			}
			if err := json.Unmarshal(tk.Body, &body); err != nil {
				s.violation("task %s: body: %v", tk.ID, err)
				continue
			}
			byMid[body.Origin.Identity] = append(byMid[body.Origin.Identity], tk.ID)
		}
		if len(page) < f.Limit {
			break
		}
		f.CursorTime, f.CursorID = page[len(page)-1].StatusTime, page[len(page)-1].ID
	}
	for mid, tasks := range byMid {
		if len(tasks) > 1 {
			s.violation("messageId %s has %d tasks: %v", mid, len(tasks), tasks)
		}
	}
}

// report logs the run's figures and fails the test with every violation.
func (s *soak) report(took time.Duration) {
	t := s.t
	t.Logf("%s: %d requests (%d transport errors, %d retried sends, %d answered 503), %d new messages, "+
		"%d acknowledgements of %d messageIds (%d never acknowledged), %d cancels held to, %d streams (%d match the replay), "+
		"%d SIGKILL, %d SIGTERM, %d double SIGTERM, %d restarts, %d connection cuts (%d backends)",
		took.Round(time.Second), s.requests.Load(), s.transportErrors.Load(), s.retries.Load(), s.unavailable.Load(),
		s.newSent.Load(), s.ackCount, len(s.acked), s.unacknowledged.Load(), len(s.cancels), len(s.streams),
		s.streamsMatched.Load(), s.kills.Load(), s.terms.Load(), s.doubleTerms.Load(), s.restarts.Load(),
		s.cuts.Load(), s.backendsCut.Load())
	keys := make([]string, 0, len(s.codes))
	for k := range s.codes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var codes []string
	for _, k := range keys {
		codes = append(codes, fmt.Sprintf("%s: %d", k, s.codes[k]))
	}
	t.Logf("responses: %s", strings.Join(codes, ", "))
	if len(s.acked) == 0 {
		t.Error("no message was acknowledged")
	}
	for i, p := range s.problems {
		if i == 100 {
			t.Errorf("… and %d more", len(s.problems)-i)
			break
		}
		t.Error(p)
	}
}
