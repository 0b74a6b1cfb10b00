package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/channels-dev/channels/internal/config"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/executor/echo"
	"github.com/channels-dev/channels/taskplane/store"
)

// a2aLoad is the figures of one load run against one server.
type a2aLoad struct {
	Server     string  `json:"server"` // "channels" or "a2a-go"
	Target     string  `json:"target"`
	ReqPerSec  float64 `json:"req_per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
}

// benchA2AResult is the one JSON line bench a2a prints: the figures of the target, and with
// --peer those of the a2a-go reference and the ratio target/reference of requests per second.
type benchA2AResult struct {
	a2aLoad
	Binding     string   `json:"binding"`
	Mode        string   `json:"mode"`
	Concurrency int      `json:"concurrency"`
	Store       string   `json:"store,omitempty"` // of the in-process Channels server
	Peer        *a2aLoad `json:"peer,omitempty"`
	Ratio       float64  `json:"ratio,omitempty"`
	// Rounds is how many alternating slices the target and the reference were measured in.
	Rounds     int    `json:"rounds,omitempty"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	LoadAvg    string `json:"loadavg,omitempty"` // /proc/loadavg when the run began
}

// a2aBenchOptions are the settings of one bench a2a run.
type a2aBenchOptions struct {
	target, binding, mode, peer, token, cpuProfile string
	duration, warmup                               time.Duration
	concurrency, maxRequests, rounds               int
}

func (a *app) benchA2ACmd() *cobra.Command {
	var o a2aBenchOptions
	cmd := &cobra.Command{
		Use:   "a2a",
		Short: "Send unique A2A messages for a fixed time and print req/s, p50 and p99 as one JSON line",
		Long: `Send SendMessage requests, each with a unique messageId, from --concurrency connections for
--duration (after --warmup, not counted; at most --max-requests in all), over one binding, and print
one JSON line: req_per_sec, p50_ms, p99_ms, requests, errors.

--mode blocking waits for each task to finish (the default A2A send); --mode immediate sets
returnImmediately. A blocking reply must be a COMPLETED task, an immediate one a task; anything
else counts as an error.

Without --target the bench starts Channels in this process: a fresh SQLite store (durable, fsync
on commit) in a temporary directory, the echo executor, anonymous loopback access. With --target
it loads that server (a "channels serve"; --token for its credentials).

--peer a2a-go also starts the reference server of a2a-go v2.4.0 (its a2asrv package with the
in-memory task store and an echo agent that answers like Channels' echo: a task, completed with an
agent message repeating the text) on loopback in this process, runs the same load against it, and
reports its figures under "peer" with "ratio" = target req/s / reference req/s. The two are
measured in --rounds alternating slices of --duration/--rounds each (Channels, the reference,
Channels, ...), so that a machine whose speed drifts (a shared VM) slows both alike; each server's
figures are over all of its slices. Before each of the reference's slices the in-process Channels
has no turn left to run (the bench waits), so it takes none of the reference's time. Against a
--target in immediate mode, whose backlog the bench cannot see, and with --cpuprofile, the two
run one after the other (one round).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.binding != "rest" && o.binding != "jsonrpc":
				return usageError{errors.New("--binding must be rest or jsonrpc")}
			case o.mode != "blocking" && o.mode != "immediate":
				return usageError{errors.New("--mode must be blocking or immediate")}
			case o.peer != "" && o.peer != "a2a-go":
				return usageError{errors.New("--peer must be a2a-go")}
			case o.duration <= 0 || o.duration > time.Hour || o.warmup < 0:
				return usageError{errors.New("--duration must be in (0, 1h] and --warmup not negative")}
			case o.concurrency < 1 || o.concurrency > 4096 || o.maxRequests < 1:
				return usageError{errors.New("--concurrency must be in 1..4096 and --max-requests at least 1")}
			case o.rounds < 1 || o.rounds > 100 || o.peer != "" && o.rounds > 1 && o.duration/time.Duration(o.rounds) < 100*time.Millisecond:
				return usageError{errors.New("--rounds must be in 1..100, with slices of --duration/--rounds at least 100ms")}
			}
			r, err := a.benchA2A(cmd.Context(), o)
			if err != nil {
				return err
			}
			return json.NewEncoder(a.stdout).Encode(r)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.target, "target", "", "base URL of the server to load (default: an in-process Channels on a temporary SQLite store)")
	f.StringVar(&o.binding, "binding", "rest", "rest (POST /message:send) or jsonrpc (SendMessage at /jsonrpc)")
	f.StringVar(&o.mode, "mode", "blocking", "blocking or immediate (returnImmediately)")
	f.StringVar(&o.peer, "peer", "", "a2a-go: also load an in-process a2a-go v2.4.0 reference server and print the ratio")
	f.StringVar(&o.token, "token", "", "bearer token for --target")
	f.DurationVar(&o.duration, "duration", 10*time.Second, "how long each server is measured")
	f.DurationVar(&o.warmup, "warmup", time.Second, "load before measuring, not counted")
	f.IntVar(&o.concurrency, "concurrency", 16, "requests in flight at once (one connection each)")
	f.IntVar(&o.maxRequests, "max-requests", 2_000_000, "stop measuring after this many requests even before --duration")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the target's measured run to this file (go tool pprof)")
	f.IntVar(&o.rounds, "rounds", 4, "with --peer: alternating slices the target and the reference are measured in")
	return cmd
}

// benchA2A runs the load against the target (starting an in-process Channels when there is
// none) and, with a peer, against the a2a-go reference, in alternating rounds.
func (a *app) benchA2A(ctx context.Context, o a2aBenchOptions) (benchA2AResult, error) {
	r := benchA2AResult{Binding: o.binding, Mode: o.mode, Concurrency: o.concurrency, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		r.LoadAvg = strings.TrimSpace(string(b))
	}
	target := strings.TrimRight(o.target, "/")
	stopTarget := func() {}
	// idle waits until the in-process Channels has no turn left to run; a --target's backlog
	// cannot be seen (nil).
	var idle func(context.Context) error
	if target == "" {
		srv, err := startBenchChannels(ctx, a.cfg.Config)
		if err != nil {
			return r, err
		}
		var once sync.Once
		stopTarget = func() { once.Do(srv.stop) }
		defer stopTarget()
		target, r.Store, idle = srv.url, redactedStore(srv.storeURL), srv.idle
	}
	tl := newA2ALoader(target, o)
	defer tl.close()
	var pl *a2aLoader
	rounds := 1
	if o.peer == "a2a-go" {
		// One after the other when the target's backlog could run on the reference's time.
		if o.cpuProfile == "" && (idle != nil || o.mode == "blocking") {
			rounds = o.rounds
		}
		r.Rounds = rounds
	}
	tl.warm(ctx, o)
	if err := tl.measure(ctx, o, o.duration/time.Duration(rounds), o.cpuProfile); err != nil {
		return r, err
	}
	if o.peer == "a2a-go" {
		if rounds == 1 {
			// The in-process Channels stops before the reference runs: its executor must not work
			// off a backlog on the reference's time.
			stopTarget()
		}
		peer, err := startBenchA2AGo()
		if err != nil {
			return r, err
		}
		defer peer.stop()
		pl = newA2ALoader(peer.url, o)
		defer pl.close()
		pl.warm(ctx, o)
		for i := range rounds {
			if i > 0 {
				if err := tl.measure(ctx, o, o.duration/time.Duration(rounds), ""); err != nil {
					return r, err
				}
			}
			if idle != nil && rounds > 1 {
				if err := idle(ctx); err != nil {
					return r, err
				}
			}
			if err := pl.measure(ctx, o, o.duration/time.Duration(rounds), ""); err != nil {
				return r, err
			}
		}
	}
	r.a2aLoad = tl.result("channels")
	if pl != nil {
		peerLoad := pl.result("a2a-go")
		r.Peer = &peerLoad
		if peerLoad.ReqPerSec > 0 {
			r.Ratio = round(r.ReqPerSec/peerLoad.ReqPerSec, 3)
		}
	}
	switch {
	case r.Requests == 0:
		// Every request was cut off by the end of the phase: nothing failed, nothing finished.
		return r, fmt.Errorf("bench a2a: no request completed within the duration (%s) against %s", o.duration, target)
	case r.Requests == r.Errors:
		return r, fmt.Errorf("bench a2a: every request to %s failed: %s", target, r.FirstError)
	}
	return r, nil
}

// benchServer is a server the bench started in this process.
type benchServer struct {
	url, storeURL string
	stop          func()
	// idle waits until the server has no turn left to run (the in-process Channels).
	idle func(context.Context) error
}

// startBenchChannels starts Channels as serve wires it — the A2A handler over the task plane and
// a dispatcher running the echo executor — on a fresh SQLite store in a temporary directory and a
// loopback port, with anonymous access. cfg supplies the other settings (limits, concurrency).
func startBenchChannels(ctx context.Context, cfg config.Config) (*benchServer, error) {
	dir, err := os.MkdirTemp("", "channels-bench-a2a-")
	if err != nil {
		return nil, fmt.Errorf("bench a2a: temporary store directory: %w", err)
	}
	cleanup := []func(){func() { os.RemoveAll(dir) }}
	undo := func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}
	storeURL := store.SQLiteURL(filepath.Join(dir, "bench.db"))
	st, err := openStoreURL(ctx, storeURL)
	if err != nil {
		undo()
		return nil, fmt.Errorf("bench a2a: %w", err)
	}
	cleanup = append(cleanup, func() { st.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		undo()
		return nil, fmt.Errorf("bench a2a: listen: %w", err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Listen, cfg.PublicURL, cfg.Store, cfg.Executor = ln.Addr().String(), "", storeURL, "echo"
	cfg.Credentials, cfg.AllowAnonymous = "", false // loopback without credentials: anonymous
	exec := echo.New()
	plane := taskplane.New(st, taskplane.WithLogger(log))
	disp := &taskplane.Dispatcher{Plane: plane, Executor: exec, Concurrency: cfg.Concurrency}
	h, err := a2aHandler(plane, disp, exec, cfg, nil, log)
	if err != nil {
		ln.Close()
		undo()
		return nil, err
	}
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	var workers sync.WaitGroup
	workers.Go(func() { _ = disp.Run(bg) })
	workers.Go(func() { runListener(bg, plane, log) })
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &benchServer{url: "http://" + cfg.Listen, storeURL: storeURL, idle: func(ctx context.Context) error {
		return waitNoWakes(ctx, st)
	}, stop: func() {
		h.CloseStreams()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
		stopBg()
		workers.Wait()
		undo()
	}}, nil
}

// waitNoWakes waits until st has no wake pending or running: no turn left to run. It gives up
// after a minute.
func waitNoWakes(ctx context.Context, st store.Store) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		busy := false
		for _, state := range []store.WakeState{store.WakePending, store.WakeActive} {
			ws, err := st.ListWakes(ctx, state, 1)
			if err != nil {
				return fmt.Errorf("bench a2a: waiting for the turns to finish: %w", err)
			}
			busy = busy || len(ws) > 0
		}
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench a2a: waiting for the turns to finish: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// refEcho is the a2a-go agent of the reference server: like Channels' echo executor, it creates a
// task and completes it with an agent message holding the text parts of the user's message.
type refEcho struct{}

// Execute emits the submitted task, then its COMPLETED status with the echo.
func (refEcho) Execute(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		if ec.StoredTask == nil {
			if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
				return
			}
		}
		var parts []*a2a.Part
		if ec.Message != nil {
			for _, p := range ec.Message.Parts {
				if t := p.Text(); t != "" {
					parts = append(parts, a2a.NewTextPart(t))
				}
			}
		}
		if len(parts) == 0 {
			parts = append(parts, a2a.NewTextPart("(the message had no text to echo)"))
		}
		reply := a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, parts...)
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, reply), nil)
	}
}

// Cancel moves the task to CANCELED.
func (refEcho) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// startBenchA2AGo starts the a2a-go v2.4.0 reference server on a loopback port: its default
// request handler (in-memory task store) with the echo agent, HTTP+JSON at the root and JSON-RPC
// at /jsonrpc, as Channels mounts them.
func startBenchA2AGo() (*benchServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench a2a: listen: %w", err)
	}
	handler := a2asrv.NewHandler(refEcho{}, a2asrv.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	mux := http.NewServeMux()
	mux.Handle("/jsonrpc", a2asrv.NewJSONRPCHandler(handler))
	mux.Handle("/", a2asrv.NewRESTHandler(handler))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &benchServer{url: "http://" + ln.Addr().String(), stop: func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}}, nil
}

// newA2ALoader returns the loader of the server at base, with a connection per request in
// flight; close drops its connections.
func newA2ALoader(base string, o a2aBenchOptions) *a2aLoader {
	tr := &http.Transport{MaxIdleConns: o.concurrency * 2, MaxIdleConnsPerHost: o.concurrency * 2,
		IdleConnTimeout: time.Minute, DisableCompression: true}
	return &a2aLoader{
		client: &http.Client{Transport: tr, Timeout: 2 * time.Minute},
		base:   base, binding: o.binding, immediate: o.mode == "immediate", token: o.token,
		run: uuid.NewString()[:8],
	}
}

func (l *a2aLoader) close() { l.client.Transport.(*http.Transport).CloseIdleConnections() }

// warm runs the warm-up load, not counted.
func (l *a2aLoader) warm(ctx context.Context, o a2aBenchOptions) {
	if o.warmup > 0 {
		l.phase(ctx, o.concurrency, o.warmup, o.maxRequests)
	}
}

// measure runs one measured slice of d and adds its figures to the loader's. A CPU profile, if
// asked for, covers the slice only.
func (l *a2aLoader) measure(ctx context.Context, o a2aBenchOptions, d time.Duration, cpuProfile string) error {
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("bench a2a: cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench a2a: cpu profile: %w", err)
		}
	}
	lat, errs, first, elapsed := l.phase(ctx, o.concurrency, d, o.maxRequests-len(l.lat)-l.errs)
	if cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bench a2a interrupted: %w", err)
	}
	l.lat, l.errs, l.elapsed = append(l.lat, lat...), l.errs+errs, l.elapsed+elapsed
	if l.first == "" {
		l.first = first
	}
	return nil
}

// result is the figures of the loader's measured slices.
func (l *a2aLoader) result(name string) a2aLoad {
	n := len(l.lat) + l.errs
	r := a2aLoad{Server: name, Target: l.base, Requests: n, Errors: l.errs, FirstError: l.first,
		Seconds: round(l.elapsed.Seconds(), 3)}
	if l.elapsed > 0 {
		r.ReqPerSec = round(float64(len(l.lat))/l.elapsed.Seconds(), 1)
	}
	r.P50Ms, r.P99Ms = latencyMs(l.lat)
	return r
}

// a2aLoader sends SendMessage requests with unique messageIds over one binding.
type a2aLoader struct {
	client    *http.Client
	base      string
	binding   string
	immediate bool
	token     string
	run       string
	seq       atomic.Int64

	// the measured slices so far (measure)
	lat     []time.Duration
	errs    int
	first   string
	elapsed time.Duration
}

// phase runs conc workers for d (at most limit requests) and returns the latencies of the
// successful requests, the number of failures, the first failure and the elapsed time.
func (l *a2aLoader) phase(ctx context.Context, conc int, d time.Duration, limit int) ([]time.Duration, int, string, time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu       sync.Mutex
		all      []time.Duration
		errs     int
		first    string
		started  atomic.Int64
		wg       sync.WaitGroup
		deadline = time.Now().Add(d)
	)
	start := time.Now()
	for w := range conc {
		wg.Go(func() {
			var lat []time.Duration
			var nerr int
			var ferr string
			var buf bytes.Buffer
			for time.Now().Before(deadline) && started.Add(1) <= int64(limit) {
				t0 := time.Now()
				err := l.send(ctx, &buf, w)
				if ctx.Err() != nil {
					break // cut off by the end of the phase: neither a result nor a failure
				}
				if err != nil {
					nerr++
					if ferr == "" {
						ferr = err.Error()
					}
					continue
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			errs += nerr
			if first == "" {
				first = ferr
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return all, errs, first, min(time.Since(start), d)
}

// benchText is the user message of every request: the size of a chat message.
const benchText = "Hi @agent, can you look at the failing deploy for service-7? The last three runs of " +
	"the pipeline timed out in the integration stage after the dependency bump; logs are in the thread above."

// send performs one SendMessage and checks its answer: a COMPLETED task (blocking) or a task
// (immediate).
func (l *a2aLoader) send(ctx context.Context, buf *bytes.Buffer, worker int) error {
	n := l.seq.Add(1)
	id := "bench-" + l.run + "-" + strconv.Itoa(worker) + "-" + strconv.FormatInt(n, 10)
	buf.Reset()
	path := "/message:send"
	if l.binding == "jsonrpc" {
		path = "/jsonrpc"
		buf.WriteString(`{"jsonrpc":"2.0","id":` + strconv.FormatInt(n, 10) + `,"method":"SendMessage","params":`)
	}
	buf.WriteString(`{"message":{"messageId":"` + id + `","role":"ROLE_USER","parts":[{"text":"` + benchText + `"}]}`)
	if l.immediate {
		buf.WriteString(`,"configuration":{"returnImmediately":true}`)
	}
	buf.WriteByte('}')
	if l.binding == "jsonrpc" {
		buf.WriteByte('}')
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.base+path, bytes.NewReader(buf.Bytes()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	if l.token != "" {
		req.Header.Set("Authorization", "Bearer "+l.token)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, body)
	}
	var out struct {
		Task *struct {
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		} `json:"task"`
	}
	if l.binding == "jsonrpc" {
		var env struct {
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			return fmt.Errorf("response: %w", err)
		}
		if env.Error != nil {
			return fmt.Errorf("JSON-RPC error: %.200s", env.Error)
		}
		body = env.Result
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return fmt.Errorf("response: %w", err)
	}
	switch {
	case out.Task == nil:
		return fmt.Errorf("the answer is not a task: %.200s", body)
	case !l.immediate && out.Task.Status.State != string(a2a.TaskStateCompleted):
		return fmt.Errorf("blocking send answered in state %s", out.Task.Status.State)
	}
	return nil
}
