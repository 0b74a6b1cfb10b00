package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// deliveriesResult is the one JSON line bench deliveries prints.
type deliveriesResult struct {
	Mode             string  `json:"mode"` // "lanes-off" or "lanes"
	Deliveries       int     `json:"deliveries"`
	Concurrency      int     `json:"concurrency,omitempty"`
	Lanes            int     `json:"lanes,omitempty"`
	LaneIntervalMs   float64 `json:"lane_interval_ms,omitempty"`
	DeliveriesPerSec float64 `json:"deliveries_per_sec"`
	// SteadyPerSec is the send rate between the first and the last provider call (lanes): after
	// the first slot of each lane, what the lanes allow.
	SteadyPerSec float64 `json:"steady_per_sec,omitempty"`
	// ExpectedPerSec is lanes ÷ lane interval.
	ExpectedPerSec float64 `json:"expected_per_sec,omitempty"`
	// MinGapMs is the smallest gap between two calls of one lane (lanes): never below the interval.
	MinGapMs      float64 `json:"min_lane_gap_ms,omitempty"`
	P50Ms         float64 `json:"p50_ms,omitempty"`
	P99Ms         float64 `json:"p99_ms,omitempty"`
	ProviderCalls int64   `json:"provider_calls"`
	Store         string  `json:"store"`
	Seconds       float64 `json:"seconds"`
}

func (a *app) benchDeliveriesCmd() *cobra.Command {
	var (
		n, conc, lanes int
		interval       time.Duration
		latency        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "deliveries",
		Short: "Deliver N messages to an in-process fake provider and print one JSON line of figures",
		Long: `Deliver --deliveries distinct messages through the delivery engine to an in-process fake
provider (every call succeeds after --send-latency), and print one JSON line.

With --lanes 0 (lanes off) --concurrency goroutines call Deliver, each a full durable delivery
(prepare, claim and mark sending, provider call, mark delivered): deliveries_per_sec, p50_ms and
p99_ms measure the engine and the store. With --lanes L the messages are spread over L lanes of
one call per --lane-interval, prepared, and sent by the engine's Run loop: deliveries_per_sec
approaches lanes ÷ interval (expected_per_sec), steady_per_sec is the rate between the first and
last call, and min_lane_gap_ms shows no lane ever went faster than its interval.

Without --store the bench uses a fresh SQLite database in a temporary directory. Given --store,
it writes deliveries (principal and source "bench") into that store: use a throwaway store.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 1 || conc < 1 || lanes < 0 || (lanes > 0 && interval <= 0) {
				return usageError{errors.New("--deliveries and --concurrency must be at least 1, --lanes at least 0, --lane-interval positive")}
			}
			rawURL, cleanup, err := a.benchStore()
			if err != nil {
				return err
			}
			defer cleanup()
			r, err := benchDeliveries(cmd.Context(), rawURL, n, conc, lanes, interval, latency)
			if err != nil {
				return err
			}
			return json.NewEncoder(a.stdout).Encode(r)
		},
	}
	cmd.Flags().IntVar(&n, "deliveries", 2000, "deliveries to make")
	cmd.Flags().IntVar(&conc, "concurrency", 64, "goroutines calling Deliver (lanes off)")
	cmd.Flags().IntVar(&lanes, "lanes", 0, "rate lanes the deliveries spread over (0 = lanes off)")
	cmd.Flags().DurationVar(&interval, "lane-interval", time.Second, "least time between two calls of one lane")
	cmd.Flags().DurationVar(&latency, "send-latency", 0, "how long the fake provider takes per call")
	return cmd
}

// benchProvider is the in-process fake provider: it records when each lane was called.
type benchProvider struct {
	latency time.Duration
	calls   atomic.Int64

	mu    sync.Mutex
	times map[string][]time.Time
}

func (p *benchProvider) Send(ctx context.Context, d delivery.Delivery) (delivery.Receipt, error) {
	if p.latency > 0 {
		time.Sleep(p.latency)
	}
	n := p.calls.Add(1)
	lane := benchLane(d)
	p.mu.Lock()
	p.times[lane] = append(p.times[lane], time.Now())
	p.mu.Unlock()
	return delivery.Receipt{ProviderID: fmt.Sprintf("bench-%d", n)}, nil
}

// Lookup: the bench never crashes, so nothing is ever looked up; the fake still answers.
func (p *benchProvider) Lookup(ctx context.Context, d delivery.Delivery) (delivery.Receipt, bool, error) {
	return delivery.Receipt{}, false, nil
}

func benchLane(d delivery.Delivery) string {
	var loc struct {
		Lane string `json:"lane"`
	}
	_ = json.Unmarshal(d.Locator, &loc)
	return loc.Lane
}

func benchDeliveries(ctx context.Context, rawURL string, n, conc, lanes int, interval, latency time.Duration) (deliveriesResult, error) {
	st, err := openStoreURL(ctx, rawURL)
	if err != nil {
		return deliveriesResult{}, fmt.Errorf("bench: %w", err)
	}
	defer st.Close()

	p := &benchProvider{latency: latency, times: map[string][]time.Time{}}
	route := delivery.Route{Sender: p, Recovery: delivery.Lookup}
	if lanes > 0 {
		route.Lane, route.LaneInterval = benchLane, interval
	}
	eng := delivery.New(st, delivery.Routes{"bench": route},
		delivery.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		delivery.WithWorkers(max(delivery.DefaultWorkers, lanes)))
	defer eng.Close()

	run := uuid.NewString()[:8]
	reqs := make([]delivery.Request, n)
	for i := range reqs {
		lane := "off"
		if lanes > 0 {
			lane = fmt.Sprintf("C%04d", i%lanes)
		}
		reqs[i] = delivery.Request{
			Principal: "bench", TaskID: fmt.Sprintf("%s-task-%08d", run, i), ContextID: run, Source: "bench",
			Operation: delivery.OpReply, State: taskplane.StateCompleted,
			Locator: json.RawMessage(fmt.Sprintf(`{"lane":%q,"ts":"1700000001.%06d"}`, lane, i)),
			Message: taskplane.Message{ID: fmt.Sprintf("%s-m%08d", run, i), Role: taskplane.RoleAgent,
				Parts: []taskplane.Part{taskplane.TextPart("The deploy is fixed: the integration stage timed out on a " +
					"dependency bump; pinned it and re-ran the pipeline, which passed.")}},
		}
	}
	r := deliveriesResult{Deliveries: n, Store: redactedStore(rawURL)}
	if lanes == 0 {
		r.Mode, r.Concurrency = "lanes-off", conc
		elapsed, lat, err := benchDeliverConcurrently(ctx, eng, reqs, conc)
		if err != nil {
			return deliveriesResult{}, err
		}
		r.DeliveriesPerSec = round(float64(n)/elapsed.Seconds(), 1)
		r.P50Ms, r.P99Ms = latencyMs(lat)
		r.Seconds = round(elapsed.Seconds(), 3)
	} else {
		r.Mode, r.Lanes, r.LaneIntervalMs = "lanes", lanes, ms(interval)
		r.ExpectedPerSec = round(float64(lanes)/interval.Seconds(), 2)
		for _, req := range reqs {
			if _, err := eng.Prepare(ctx, req); err != nil {
				return deliveriesResult{}, fmt.Errorf("bench: %w", err)
			}
		}
		start := time.Now()
		runCtx, stop := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- eng.Run(runCtx) }()
		for p.calls.Load() < int64(n) && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		elapsed := time.Since(start)
		stop()
		if err := <-ran; err != nil {
			return deliveriesResult{}, fmt.Errorf("bench: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return deliveriesResult{}, fmt.Errorf("bench interrupted: %w", err)
		}
		r.DeliveriesPerSec = round(float64(n)/elapsed.Seconds(), 2)
		r.Seconds = round(elapsed.Seconds(), 3)
		var first, last time.Time
		minGap := time.Duration(-1)
		p.mu.Lock()
		for _, ts := range p.times {
			for i, t := range ts {
				if first.IsZero() || t.Before(first) {
					first = t
				}
				if t.After(last) {
					last = t
				}
				if i > 0 && (minGap < 0 || t.Sub(ts[i-1]) < minGap) {
					minGap = t.Sub(ts[i-1])
				}
			}
		}
		p.mu.Unlock()
		if span := last.Sub(first); span > 0 {
			r.SteadyPerSec = round(float64(n-lanes)/span.Seconds(), 2)
		}
		if minGap >= 0 {
			r.MinGapMs = round(ms(minGap), 1)
		}
	}
	r.ProviderCalls = p.calls.Load()
	delivered, err := st.ListDeliveries(ctx, store.DeliveryFilter{Principal: "bench", State: store.DeliveryDelivered})
	if err != nil {
		return deliveriesResult{}, fmt.Errorf("bench: %w", err)
	}
	if len(delivered) < n || r.ProviderCalls != int64(n) {
		return deliveriesResult{}, fmt.Errorf("bench: %d delivered and %d provider calls for %d deliveries", len(delivered), r.ProviderCalls, n)
	}
	return r, nil
}

// benchDeliverConcurrently calls Deliver for every request from conc goroutines and returns the
// wall time and each call's latency.
func benchDeliverConcurrently(ctx context.Context, eng *delivery.Engine, reqs []delivery.Request, conc int) (time.Duration, []time.Duration, error) {
	lat := make([]time.Duration, len(reqs))
	var (
		next     atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(reqs) || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				rec, err := eng.Deliver(ctx, reqs[i])
				lat[i] = time.Since(t0)
				if err == nil && rec.State != delivery.StateDelivered {
					err = fmt.Errorf("delivery %s is %s: %s", rec.ID, rec.State, rec.LastError)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					next.Store(int64(len(reqs)))
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, nil, fmt.Errorf("bench: %w", firstErr)
	}
	if err := ctx.Err(); err != nil {
		return 0, nil, fmt.Errorf("bench interrupted: %w", err)
	}
	return elapsed, lat, nil
}
