package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"sync/atomic"
	"time"

	"github.com/channels-dev/channels/internal/config"
	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2ahttp"
	"github.com/channels-dev/channels/taskplane/a2awire"
	"github.com/channels-dev/channels/taskplane/store"
)

// operatorSurface is what serve adds for operators (docs/operations.md): metrics on the store and the
// executor, the configured sources with their health, and /healthz, /readyz, /metrics and /admin.
type operatorSurface struct {
	cfg     config.Config
	log     *slog.Logger
	metrics *operator.Metrics
	// store is the instrumented store: the task plane and the sources use it.
	store  store.Store
	raw    store.Store
	mux    *http.ServeMux
	host   *sources.Host
	health *operator.Health
}

// sourcesConnectTimeout bounds how long serve waits for its sources to connect before it reports
// ready (a source still connecting then keeps /readyz at 503).
const sourcesConnectTimeout = 5 * time.Second

func newOperatorSurface(cfg config.Config, st store.Store, log *slog.Logger) *operatorSurface {
	m := operator.NewMetrics()
	return &operatorSurface{cfg: cfg, log: log, metrics: m, store: m.Store(st), raw: st, mux: http.NewServeMux()}
}

// executor returns ex timed by the metrics.
func (o *operatorSurface) executor(ex taskplane.Executor) taskplane.Executor {
	return o.metrics.Executor(ex, o.cfg.Executor)
}

// instances converts the configured sources.
func instances(list []config.SourceConfig) []sources.Instance {
	out := make([]sources.Instance, len(list))
	for i, s := range list {
		out[i] = sources.Instance{Source: s.Type,
			Config: sources.Config{Instance: s.Name, Principal: s.Principal, Options: s.Options}}
	}
	return out
}

// configuredSources maps each configured source to its instance names.
func configuredOf(list []config.SourceConfig) map[string][]string {
	return sources.Configured(instances(list))
}

// startSources builds the configured sources over plane and mounts their endpoints; they run in
// run. An invalid source stops serve before it listens.
func (o *operatorSurface) startSources(plane *taskplane.Plane) error {
	host, err := sources.NewHost(plane, o.mux, instances(o.cfg.Sources), sources.WithLogger(o.log))
	if err != nil {
		return err
	}
	o.host = host
	o.health = operator.NewHealth(host.Healths, o.cfg.HealthInterval, o.cfg.SourceFailureWindow)
	o.metrics.WatchStore(o.raw)
	o.metrics.WatchPlane(plane)
	o.metrics.WatchHealth(o.health)
	o.metrics.InitSource(taskplane.SourceA2A)
	names := make([]string, 0, len(o.cfg.Sources))
	for _, s := range o.cfg.Sources {
		o.metrics.InitSource(s.Type)
		names = append(names, s.Label())
	}
	sort.Strings(names)
	if len(names) > 0 {
		o.log.Info("sources configured", "sources", names)
	}
	return nil
}

// run runs the sources and their health checks until ctx ends, then waits for the sources.
func (o *operatorSurface) run(ctx context.Context) {
	o.host.Start(ctx)
	o.health.Run(ctx)
	if err := o.host.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		o.log.Error("sources stopped", "err", err)
	}
}

// waitConnected gives the sources a moment to connect before serve reports ready.
func (o *operatorSurface) waitConnected(ctx context.Context) {
	if len(o.cfg.Sources) == 0 {
		o.health.Check(ctx)
		return
	}
	o.health.WaitConnected(ctx, sourcesConnectTimeout)
	for _, s := range o.health.Sources() {
		if !s.Ready() {
			o.log.Warn("source not connected", "source", s.Source, "instance", s.Instance, "err", s.Error)
		}
	}
}

// handler serves the operator endpoints and the sources' endpoints, and the A2A bindings at "/".
func (o *operatorSurface) handler(a2a *a2ahttp.Server, ready *atomic.Bool) http.Handler {
	configured := configuredOf(o.cfg.Sources)
	configured[taskplane.SourceA2A] = []string{"bindings"}
	srv := &operator.Server{
		Store: o.store, StoreName: o.raw.Capabilities().Name, Metrics: o.metrics, Health: o.health, Ready: ready,
		Token: o.cfg.AdminToken, OpenAdmin: o.cfg.ListensOnLoopback(), Configured: configured,
		Refresh: o.cfg.AdminRefresh, Log: o.log,
	}
	srv.Mount(o.mux)
	o.mux.Handle("/", a2a)
	if !o.cfg.ListensOnLoopback() {
		return o.mux
	}
	// A request the Host guard refuses on the way to the A2A bindings is told so as A2A errors
	// are, which A2A clients can read; the operator's own routes answer as text.
	refuse := func(w http.ResponseWriter, r *http.Request, msg string) bool {
		if _, pattern := o.mux.Handler(r); pattern != "/" {
			return false
		}
		a2a.Refuse(w, r, a2awire.Errorf(a2awire.ErrMisdirected, "%s", msg))
		return true
	}
	return operator.LoopbackHosts(o.mux, publicHost(&o.cfg), refuse)
}

// publicHost is the host name of the effective public URL ("" if it does not parse).
func publicHost(cfg *config.Config) string {
	u, err := url.Parse(cfg.EffectivePublicURL())
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// operatorAccessWarnings are what `config check` says about who reaches the operator pages
// (/admin, /admin/api, /metrics) on a loopback listener without admin_token: they are open to
// loopback Host names alone, so a public URL on another name means a reverse proxy in front,
// which either gets 403 for them or, if it forwards a loopback Host, opens them to everyone it
// serves. Off loopback, checkConfig warns of the missing token already.
func operatorAccessWarnings(cfg *config.Config) []string {
	host := publicHost(cfg)
	if cfg.AdminToken != "" || !cfg.ListensOnLoopback() || host == "" || operator.LoopbackHost(host, "") {
		return nil
	}
	return []string{fmt.Sprintf("public_url host %s is not loopback and admin_token is unset: /admin, /admin/api and /metrics "+
		"are open without a token only under a loopback Host, so through a reverse proxy they are refused (403) — or open to "+
		"everyone the proxy serves if it forwards Host as 127.0.0.1 or localhost; set admin_token_env or admin_token_file", host)}
}
