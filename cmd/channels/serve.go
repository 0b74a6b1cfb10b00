package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/internal/config"
	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2ahttp"
	"github.com/channels-dev/channels/taskplane/executor/a2aagent"
	"github.com/channels-dev/channels/taskplane/executor/command"
	"github.com/channels-dev/channels/taskplane/executor/conformance"
	"github.com/channels-dev/channels/taskplane/executor/echo"
	"github.com/channels-dev/channels/taskplane/executor/worker"
	"github.com/channels-dev/channels/taskplane/results"
	"github.com/channels-dev/channels/taskplane/store"
)

// storeOpenTimeout bounds opening the store (a Postgres that does not answer) at start-up.
const storeOpenTimeout = 30 * time.Second

// openStoreURL opens the store at rawURL (applying its migrations), giving up after
// storeOpenTimeout. An empty rawURL is the default store without a place (config.ErrNoStore).
func openStoreURL(ctx context.Context, rawURL string) (store.Store, error) {
	if rawURL == "" {
		return nil, config.ErrNoStore
	}
	openCtx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	defer cancel()
	st, err := store.Open(openCtx, rawURL)
	switch {
	case err == nil:
		return st, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w: %w", errStoppedOpening, err)
	case errors.Is(openCtx.Err(), context.DeadlineExceeded):
		return nil, fmt.Errorf("the store did not open within %s: %w", storeOpenTimeout, err)
	}
	return nil, err
}

// errStoppedOpening is openStoreURL's error when its context ended (a stop signal) before the
// store opened.
var errStoppedOpening = errors.New("stopped while opening the store")

func (a *app) serveCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the A2A task plane: HTTP bindings, executor, retention",
		Long: `Run Channels: the A2A bindings over HTTP, the executor that works tasks, and retention.

With no configuration at all it listens on 127.0.0.1:8788, keeps its state in SQLite under
$XDG_DATA_HOME/channels/, and answers with the built-in echo agent.

/healthz answers while the process runs; /readyz answers 200 only while the store answers and
takes writes, every configured source is connected and not failing for longer than
source_failure_window, and the server is neither starting (serve waits up to 5s for its sources
to connect) nor shutting down. /metrics serves Prometheus metrics; /admin is the operator
dashboard (admin_token).

SIGTERM or SIGINT: /readyz turns 503, the executor claims no new turn (its running turns are
interrupted at once, or may finish within turn_drain_timeout), the listener closes, open
streams, blocking sends and worker claims end, in-flight requests drain (up to
shutdown_timeout), then the delivery engine and the sources stop and the store closes. A second
signal ends the process at once.`,
		Args:        cobra.NoArgs,
		Annotations: map[string]string{runsSources: "its sources read their secrets"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.serve(cmd.Context())
		},
	}
	config.AddFlags(cmd.Flags(), serveFlagKeys()...)
	return cmd
}

// serveFlagKeys are the settings serve takes as its own flags: every key but store, a persistent
// flag of the root command. config check takes them too, to check serve's command line.
func serveFlagKeys() []string {
	var keys []string
	for _, k := range config.Keys() {
		if k != "store" {
			keys = append(keys, k)
		}
	}
	return keys
}

// serveParts are what serve builds from the configuration alone, before it opens the store and
// listens: the executor, the workflow manifest, the worker API's tokens and the A2A credentials.
// Their constructors refuse what serve cannot run with, and config check builds them too
// (buildServeParts), so that it passes only a configuration serve starts with.
type serveParts struct {
	exec         taskplane.Executor   // nil for the worker executor
	manifest     *taskplane.Manifest  // nil without workflow_manifest
	workerTokens []worker.Token       // the worker executor's
	credentials  []a2ahttp.Credential // nil without credentials
}

// buildServeParts builds the parts of cfg, reporting every problem at once. getenv reads the
// variable agent_token_env names.
func buildServeParts(cfg config.Config, getenv func(string) string, log *slog.Logger) (serveParts, error) {
	var p serveParts
	var errs []error
	var err error
	if p.exec, err = newExecutor(cfg, getenv, log); err != nil {
		errs = append(errs, err)
	}
	if cfg.WorkflowManifest != "" {
		if p.manifest, err = taskplane.LoadManifest(cfg.WorkflowManifest); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.Executor == "worker" {
		if p.workerTokens, err = worker.LoadTokens(cfg.WorkerTokens); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.Credentials != "" {
		if p.credentials, err = a2ahttp.LoadCredentials(cfg.Credentials); err != nil {
			errs = append(errs, fmt.Errorf("credentials: %w", err))
		}
	}
	return p, errors.Join(errs...)
}

// checkListen refuses a listener off loopback that would take anonymous callers by accident.
func checkListen(cfg config.Config) error {
	if cfg.Credentials == "" && !cfg.AllowAnonymous && !cfg.ListensOnLoopback() {
		return fmt.Errorf("listen %s is not loopback and no credentials are configured: set credentials (a token file) or allow_anonymous: true", cfg.Listen)
	}
	return nil
}

// newExecutor returns the executor named in the configuration (docs/executors.md). The worker
// executor has none: resident agents claim wakes through the worker API, so it returns nil.
func newExecutor(cfg config.Config, getenv func(string) string, log *slog.Logger) (taskplane.Executor, error) {
	switch cfg.Executor {
	case "echo":
		return echo.New(), nil
	case "conformance":
		return conformance.New(), nil
	case "a2a":
		token := ""
		if cfg.AgentTokenEnv != "" {
			if token = getenv(cfg.AgentTokenEnv); token == "" {
				return nil, fmt.Errorf("agent_token_env names %s, which is empty or unset", cfg.AgentTokenEnv)
			}
		}
		return a2aagent.New(a2aagent.Config{AgentURL: cfg.AgentURL, Token: token, AllowPrivate: cfg.AgentAllowPrivate,
			Logger: log})
	case "exec":
		return command.New(command.Config{Command: strings.Fields(cfg.ExecCommand), Timeout: cfg.ExecTimeout,
			Env: strings.FieldsFunc(cfg.ExecEnv, func(r rune) bool { return r == ',' || r == ' ' }), Logger: log})
	case "worker":
		return nil, nil
	}
	return nil, fmt.Errorf("unknown executor %q (want one of %v)", cfg.Executor, config.Executors)
}

// planeOptions are the task plane's settings from the configuration: the workflow manifest and
// where native tasks' results go.
func planeOptions(cfg config.Config, parts serveParts, log *slog.Logger, home *results.Home) []taskplane.Option {
	opts := []taskplane.Option{taskplane.WithLogger(log), taskplane.WithRetention(cfg.Retention), taskplane.WithResults(home)}
	if parts.manifest != nil {
		opts = append(opts, taskplane.WithManifest(parts.manifest))
	}
	return opts
}

// newWorkerAPI returns the worker API of the worker executor (nil for the others). Its turns, which
// no wrapped executor times, are timed from claim to end in channels_executor_turn_duration_seconds.
func newWorkerAPI(cfg config.Config, parts serveParts, plane *taskplane.Plane, metrics *operator.Metrics, log *slog.Logger) (*worker.API, error) {
	if cfg.Executor != "worker" {
		return nil, nil
	}
	return worker.New(plane, worker.Config{Tokens: parts.workerTokens, Lease: cfg.WorkerLease, Logger: log,
		TurnEnded: func(elapsed time.Duration) { metrics.ObserveTurn(cfg.Executor, nil, elapsed) }})
}

// serve runs until ctx ends (a signal), then shuts down gracefully. The "channels serving" log
// line carries the bound address (tests listen on port 0).
func (a *app) serve(ctx context.Context) error {
	cfg := a.cfg.Config
	log := a.log
	if err := checkListen(cfg); err != nil {
		return err
	}
	parts, err := buildServeParts(cfg, a.getenv, log)
	if err != nil {
		return err
	}
	exec := parts.exec
	if cfg.Executor == "exec" {
		// The command works untrusted text as this process's user: it must not read this
		// process's secrets (its environment, its store) through /proc.
		if err := shieldFromChildren(); err != nil {
			log.Warn("cannot keep the exec command out of this process's /proc entries", "err", err)
		}
	}

	st, err := openStoreURL(ctx, cfg.Store)
	if errors.Is(err, errStoppedOpening) {
		// Asked to stop before serving (a SIGTERM while a Postgres is slow to answer): a clean
		// stop, not a failure.
		log.Info("stopped before serving", "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Error("close store", "err", err)
		}
	}()

	ln, err := listenTCP(ctx, cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	defer ln.Close() // no-op once the server owns it
	// The bound address, so a default public URL names the real port when listening on port 0.
	cfg.Listen = ln.Addr().String()

	// The operator surface instruments the store and the executor, and runs the sources.
	ops := newOperatorSurface(cfg, st, log)
	if exec != nil {
		exec = ops.executor(exec)
	}
	// Native tasks' questions and outcomes go home through the delivery engine, to the configured
	// instances that can send; the engine is set once the sources exist, before anything runs.
	home := &results.Home{Logger: log}
	plane := taskplane.New(ops.store, planeOptions(cfg, parts, log, home)...)
	if err := ops.startSources(plane); err != nil {
		return err
	}
	home.Engine = delivery.New(ops.store, results.FromHost(ops.host), delivery.WithLogger(log),
		delivery.WithAnchorRecorder(sources.RecordAnchorTx))
	var disp *taskplane.Dispatcher
	if exec != nil {
		disp = &taskplane.Dispatcher{Plane: plane, Executor: exec, Concurrency: cfg.Concurrency, Lease: cfg.TurnLease,
			Drain: cfg.TurnDrain}
	}
	workerAPI, err := newWorkerAPI(cfg, parts, plane, ops.metrics, log)
	if err != nil {
		return err
	}
	if workerAPI != nil {
		ops.mux.Handle(workerAPI.Pattern(), workerAPI)
	}
	notifier := newPushNotifier(plane, cfg, log)
	a2a, err := a2aHandler(plane, disp, exec, cfg, parts.credentials, log, withPush(notifier))
	if err != nil {
		return err
	}
	ops.metrics.WatchStreams(a2a.Service().OpenStreams)
	ops.metrics.WatchBlockingSends(a2a.Service().BlockingSends, a2a.Service().BlockingSendsUnwaited)

	// Background workers run on their own context, stopped in order after HTTP has drained.
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBg()
	var workers sync.WaitGroup
	// The dispatcher stops claiming as soon as the shutdown begins, so that the turns it is
	// running drain (turn_drain_timeout) beside the HTTP requests, within shutdown_timeout.
	dispCtx, stopDispatcher := context.WithCancel(bg)
	defer stopDispatcher()
	if disp != nil {
		workers.Go(func() {
			if err := disp.Run(dispCtx); err != nil {
				log.Error("dispatcher stopped", "err", err)
			}
		})
	}
	workers.Go(func() { plane.RunTimeouts(bg, cfg.TaskTimeout, 0) }) // swept every quarter of it, at most a minute
	workers.Go(func() {
		if err := home.Engine.Run(bg); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, delivery.ErrClosed) {
			log.Error("delivery engine stopped", "err", err)
		}
	})
	workers.Go(func() { plane.RunRetention(bg, cfg.RetentionEvery) })
	workers.Go(func() { runListener(bg, plane, log) })
	workers.Go(func() { ops.run(bg) })
	if notifier != nil {
		workers.Go(func() { _ = notifier.Run(bg) })
	}
	stopWorkers := func() {
		stopBg()
		workers.Wait()
	}

	var ready atomic.Bool
	// Requests run on reqCtx; cancelling it ends streams that did not close when asked.
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := newHTTPServer(ops.handler(a2a, &ready))
	srv.BaseContext = func(net.Listener) context.Context { return reqCtx }
	srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	ops.waitConnected(ctx)
	ready.Store(true)
	log.Info("channels serving", "listen", ln.Addr().String(), "public_url", cfg.EffectivePublicURL(),
		"store", redactedStore(cfg.Store), "executor", cfg.Executor, "config_file", a.cfg.Path, "config", &a.cfg.Config)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	case err := <-serveErr:
		runErr = fmt.Errorf("http server: %w", err)
		log.Error("http server stopped", "err", err)
	}
	ready.Store(false)
	deadline := time.Now().Add(cfg.ShutdownTimeout)
	stopDispatcher()
	closers := []http.Handler{a2a}
	if workerAPI != nil {
		closers = append(closers, workerAPI)
	}
	shutdownHTTP(srv, cfg.ShutdownTimeout, cancelRequests, log, closers...)
	// The background workers get what is left of the shutdown timeout, and at least a second:
	// past it the process exits anyway (every state they hold is durable, and taken up again).
	stopped := make(chan struct{})
	go func() { stopWorkers(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(max(time.Until(deadline), time.Second)):
		log.Warn("background workers still running at the shutdown deadline; exiting without them")
	}
	log.Info("stopped")
	return runErr
}

// streamCloser is implemented by an A2A handler that can end its open streams on request.
type streamCloser interface{ CloseStreams() }

// shutdownHTTP stops accepting connections and drains in-flight requests. The streams and
// long waits of the handlers that can end them (streamCloser: A2A streams and blocking sends,
// worker claims) are asked to close at once; requests still running after half the timeout have
// their context cancelled (which ends any stream), and whatever remains at the deadline is closed.
func shutdownHTTP(srv *http.Server, timeout time.Duration, cancelRequests context.CancelFunc, log *slog.Logger, handlers ...http.Handler) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	for _, h := range handlers {
		if sc, ok := h.(streamCloser); ok {
			sc.CloseStreams()
		}
	}
	grace := time.NewTimer(timeout / 2)
	defer grace.Stop()
	select {
	case err := <-done:
		if err != nil {
			log.Warn("http shutdown", "err", err)
		}
		return
	case <-grace.C:
		log.Warn("requests still running after half the shutdown timeout: cancelling them")
		cancelRequests()
	}
	if err := <-done; err != nil {
		log.Warn("http shutdown deadline passed: closing remaining connections", "err", err)
		_ = srv.Close()
	}
}

// runListener relays other processes' task events until ctx ends (the plane restarts its
// listener after a failure).
func runListener(ctx context.Context, p *taskplane.Plane, log *slog.Logger) {
	if err := p.RunListener(ctx); err != nil && ctx.Err() == nil {
		log.Error("task event listener stopped", "err", err)
	}
}

// bodyReadTimeout bounds how long a request's headers and body may take to arrive, so a slow
// sender cannot hold a handler. It does not bound the response: net/http lifts the connection's
// read deadline once the handler has read the body, so SSE streams, blocking sends and
// long-polls last as long as they need.
var bodyReadTimeout = time.Minute

// newHTTPServer returns the server of "channels serve" for h, with its timeouts.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       bodyReadTimeout,
		IdleTimeout:       2 * time.Minute,
	}
}
