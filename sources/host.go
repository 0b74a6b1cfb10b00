package sources

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"

	"github.com/channels-dev/channels/taskplane"
)

// Instance is one configured source instance: the registered source name and its configuration.
type Instance struct {
	Source string
	Config
}

// Host runs configured source instances for a server: it builds each one, mounts the ones that
// are Endpoints on the server's mux, and runs each against a Sink of its own, fixed to its principal.
type Host struct {
	sinks     []*Sink // sinks[i] is instances[i]'s, fixed to its principal
	instances []Source
	configs   []Instance // configs[i] configured instances[i]

	wg      sync.WaitGroup
	mu      sync.Mutex
	errs    []error
	stopped []error // stopped[i]: why instances[i] stopped before its context ended, or nil
}

// NewHost builds every instance (New, with its Validator) and its Sink, and mounts the Endpoints
// on mux. Nothing runs until Start. Any invalid instance fails the whole host, so a server never
// starts with half its sources.
func NewHost(plane *taskplane.Plane, mux *http.ServeMux, instances []Instance, opts ...SinkOption) (*Host, error) {
	h := &Host{}
	seen := map[string]bool{}
	for _, in := range instances {
		key := in.Source + "/" + in.Instance
		if seen[key] {
			return nil, fmt.Errorf("source %s instance %q is configured twice", in.Source, in.Instance)
		}
		seen[key] = true
		src, err := New(in.Source, in.Config)
		if err != nil {
			return nil, err
		}
		if src.Name() != in.Source {
			return nil, fmt.Errorf("source %s instance %q: the source built calls itself %q", in.Source, in.Instance, src.Name())
		}
		sink, err := NewSink(plane, in.Source, append(append([]SinkOption(nil), opts...), ForPrincipal(in.Principal))...)
		if err != nil {
			return nil, err
		}
		h.sinks = append(h.sinks, sink)
		if ep, ok := src.(Endpoint); ok && mux != nil {
			mux.Handle(ep.Pattern(), ep)
		}
		h.instances = append(h.instances, src)
		h.configs = append(h.configs, in)
	}
	names := make([]string, len(h.configs))
	for i, in := range h.configs {
		names[i] = in.Instance
	}
	if err := CheckKeys(names, h.instances); err != nil {
		return nil, err
	}
	return h, nil
}

// Each calls fn for every configured instance and the source built from it, in configuration
// order (the delivery router reaches the instances' Senders through it).
func (h *Host) Each(fn func(in Instance, src Source)) {
	for i, src := range h.instances {
		fn(h.configs[i], src)
	}
}

// Start runs every instance until ctx ends. Wait returns when all have stopped. An instance that
// stops with an error before then (Slack refused its token, say), or panics in Run (logged with its
// stack), is logged at once and reported unhealthy from then on: nothing restarts it, since what
// stopped it needs an operator. The other instances keep running.
func (h *Host) Start(ctx context.Context) {
	h.mu.Lock()
	h.stopped = make([]error, len(h.instances))
	h.mu.Unlock()
	for i, src := range h.instances {
		in := h.configs[i]
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			if err := Run(ctx, src, h.sinks[i]); err != nil {
				if ctx.Err() == nil {
					slog.Error("source stopped", "source", in.Source, "instance", in.Instance, "err", err)
				}
				h.mu.Lock()
				h.errs = append(h.errs, fmt.Errorf("source %s instance %s: %w", in.Source, in.Instance, err))
				h.stopped[i] = fmt.Errorf("stopped: %w", err)
				h.mu.Unlock()
			}
		}()
	}
}

// stoppedErr is why instance i stopped, or nil while it runs (or has not started).
func (h *Host) stoppedErr(i int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i < len(h.stopped) {
		return h.stopped[i]
	}
	return nil
}

// Wait waits for every instance to stop and returns the errors that stopped any of them.
func (h *Host) Wait() error {
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return errors.Join(h.errs...)
}

// Health reports the health of every instance that can tell (HealthChecker), and of every
// instance that stopped with an error, for /readyz.
func (h *Host) Health(ctx context.Context) error {
	var errs []error
	for _, ih := range h.Healths(ctx) {
		if ih.Err != nil {
			errs = append(errs, fmt.Errorf("source %s: %w", ih.Source, ih.Err))
		}
	}
	return errors.Join(errs...)
}

// Configured maps each source name to its instances, for List.
func Configured(instances []Instance) map[string][]string {
	out := map[string][]string{}
	for _, in := range instances {
		out[in.Source] = append(out[in.Source], in.Instance)
	}
	return out
}

// InstanceHealth is the health of one configured instance.
type InstanceHealth struct {
	Source   string
	Instance string
	// Checks is false for a source that cannot tell (no HealthChecker) and is still running; it
	// counts as healthy.
	Checks bool
	// Err is the instance's Health error, or why it stopped (nil when healthy).
	Err error
}

// Healths checks every instance and reports each one, in configuration order (the admin page and
// /readyz track them one by one).
func (h *Host) Healths(ctx context.Context) []InstanceHealth {
	out := make([]InstanceHealth, len(h.instances))
	for i, src := range h.instances {
		out[i] = InstanceHealth{Source: h.configs[i].Source, Instance: h.configs[i].Instance}
		if err := h.stoppedErr(i); err != nil {
			out[i].Checks, out[i].Err = true, err
			continue
		}
		if hc, ok := src.(HealthChecker); ok {
			out[i].Checks = true
			out[i].Err = checkHealth(ctx, hc, h.configs[i])
		}
	}
	return out
}

// checkHealth calls hc.Health, reading a panic in it as unhealthy (logged with its stack) rather
// than letting it take down the server that asked (/readyz, the admin page).
func checkHealth(ctx context.Context, hc HealthChecker, in Instance) (err error) {
	defer func() {
		if p := recover(); p != nil {
			slog.Error("source health check panicked", "source", in.Source, "instance", in.Instance,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("health check panicked: %v", p)
		}
	}()
	return hc.Health(ctx)
}
