package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/channels-dev/channels/internal/config"
	"github.com/channels-dev/channels/internal/fsyncprobe"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

func (a *app) benchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure Channels on this machine",
	}
	cmd.AddCommand(a.benchAcceptCmd(), a.benchDeliveriesCmd(), a.benchA2ACmd())
	return cmd
}

// acceptResult is the one JSON line bench accept prints.
type acceptResult struct {
	AcceptsPerSec   float64 `json:"accepts_per_sec"`
	P50Ms           float64 `json:"p50_ms"`
	P99Ms           float64 `json:"p99_ms"`
	Events          int     `json:"events"`
	Concurrency     int     `json:"concurrency"`
	Store           string  `json:"store"`
	FsyncsPerSec    float64 `json:"fsyncs_per_sec"`
	AcceptsPerFsync float64 `json:"accepts_per_fsync"`
	Conversations   int     `json:"conversations"`
	Seconds         float64 `json:"seconds"`
	ProbeDir        string  `json:"probe_dir"`
	// Overflowed counts acceptances whose wake found the admission bound full (their task failed
	// with reason overflow). The drainer keeps the queue short, so this should be 0.
	Overflowed int `json:"overflowed"`
}

func (a *app) benchAcceptCmd() *cobra.Command {
	var (
		events, conc, convs int
		probe               time.Duration
		cpuProfile          string
	)
	cmd := &cobra.Command{
		Use:   "accept",
		Short: "Accept N unique events with C goroutines and print one JSON line of figures",
		Long: `Accept --events unique events (spread over --conversations conversation keys, each with a
realistic message payload) through the task plane's durable Accept, from --concurrency goroutines,
and print one JSON line: accepts_per_sec, p50_ms, p99_ms, events, concurrency, store (password
redacted), and fsyncs_per_sec from a probe that writes and fsyncs a small file for --probe in the
store's directory (SQLite) or the current directory (Postgres), in the same run.

Without --store the bench runs on a fresh SQLite database in a temporary directory that is
removed afterwards. Given --store, it writes real tasks (source "bench", principal "bench",
left SUBMITTED with pending wakes) into that store: point it at a throwaway store, never at one
a running "channels serve" uses.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if events < 1 || conc < 1 || convs < 1 {
				return usageError{errors.New("--events, --concurrency and --conversations must be at least 1")}
			}
			rawURL, cleanup, err := a.benchStore()
			if err != nil {
				return err
			}
			defer cleanup()
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("bench: cpu profile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("bench: cpu profile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			r, err := benchAccept(cmd.Context(), rawURL, events, conc, convs, probe, func(done int) {
				a.progressf("\raccepted %d/%d", done, events)
			})
			a.progressf("\n")
			if err != nil {
				return err
			}
			return json.NewEncoder(a.stdout).Encode(r)
		},
	}
	cmd.Flags().IntVar(&events, "events", 10000, "events to accept")
	cmd.Flags().IntVar(&conc, "concurrency", 64, "goroutines calling Accept")
	cmd.Flags().IntVar(&convs, "conversations", 16, "distinct conversation keys the events spread over")
	cmd.Flags().DurationVar(&probe, "probe", time.Second, "how long the fsync probe runs")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	return cmd
}

// benchAccept runs the fsync probe, then the acceptance load, on the store at rawURL; progress, if
// not nil, is called with the number of events taken so far about twice a second.
func benchAccept(ctx context.Context, rawURL string, events, conc, convs int, probe time.Duration, progress func(done int)) (acceptResult, error) {
	dir, err := probeDir(rawURL)
	if err != nil {
		return acceptResult{}, err
	}
	st, err := openStoreURL(ctx, rawURL)
	if err != nil {
		return acceptResult{}, fmt.Errorf("bench: %w", err)
	}
	defer st.Close()

	fsyncs, err := fsyncprobe.Run(dir, probe)
	if err != nil {
		return acceptResult{}, err
	}

	plane := taskplane.New(st, taskplane.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	run := uuid.NewString()[:8]
	evs := make([]taskplane.Event, events)
	for i := range evs {
		evs[i] = benchEvent(run, i, convs)
	}
	lat := make([]time.Duration, events)
	var (
		next     atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	// A consumer drains the wake queue as an executor would, so every acceptance takes the normal
	// path instead of the admission bound's overflow path. It settles wakes in batches (one Update
	// per batch), which shares the writer with the load but costs little per event.
	drainCtx, stopDrain := context.WithCancel(ctx)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		drainWakes(drainCtx, st)
	}()
	var overflowed atomic.Int64
	if progress != nil {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		go func() {
			for {
				select {
				case <-drainCtx.Done():
					return
				case <-tick.C:
					progress(min(int(next.Load()), events))
				}
			}
		}()
	}
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= events || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				acc, err := plane.Accept(ctx, evs[i])
				lat[i] = time.Since(t0)
				if err == nil && acc.Task != nil && acc.Task.Status.State == taskplane.StateFailed {
					overflowed.Add(1)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					next.Store(int64(events)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopDrain()
	<-drained
	if firstErr != nil {
		return acceptResult{}, fmt.Errorf("bench: %w", firstErr)
	}
	if err := ctx.Err(); err != nil {
		return acceptResult{}, fmt.Errorf("bench interrupted: %w", err)
	}
	r := acceptResult{
		AcceptsPerSec: round(float64(events)/elapsed.Seconds(), 1),
		Events:        events,
		Concurrency:   conc,
		Store:         redactedStore(rawURL),
		FsyncsPerSec:  round(fsyncs, 1),
		Conversations: convs,
		Seconds:       round(elapsed.Seconds(), 3),
		ProbeDir:      dir,
		Overflowed:    int(overflowed.Load()),
	}
	r.P50Ms, r.P99Ms = latencyMs(lat)
	if fsyncs > 0 {
		r.AcceptsPerFsync = round(float64(events)/elapsed.Seconds()/fsyncs, 2)
	}
	return r, nil
}

// drainWakes marks pending wakes done until ctx ends, a batch per transaction.
func drainWakes(ctx context.Context, st store.Store) {
	for ctx.Err() == nil {
		ws, err := st.ListWakes(ctx, store.WakePending, 512)
		if err != nil || len(ws) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Millisecond):
			}
			continue
		}
		_ = st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			for _, w := range ws {
				w.State, w.UpdatedAt = store.WakeDone, time.Now().UTC().Truncate(time.Microsecond)
				if err := tx.UpdateWake(ctx, w); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// benchEvent is event i of a run: a unique identity, one of convs conversations, and a message
// of the size and shape a chat provider delivers.
func benchEvent(run string, i, convs int) taskplane.Event {
	conv := i % convs
	text := fmt.Sprintf("Hi @agent, can you look at the failing deploy for service-%d? The last three "+
		"runs of the pipeline timed out in the integration stage after the dependency bump; logs are "+
		"in the thread above. Event %d of bench run %s.", conv, i, run)
	return taskplane.Event{
		Principal:       "bench",
		Source:          "bench",
		Identity:        fmt.Sprintf("%s-Ev%08d", run, i),
		ConversationKey: fmt.Sprintf("T0BENCH/C%04d/1700000000.%06d", conv, conv),
		Message: taskplane.Message{
			ID:    fmt.Sprintf("%s-m%08d", run, i),
			Role:  taskplane.RoleUser,
			Parts: []taskplane.Part{taskplane.TextPart(text)},
			Metadata: map[string]any{
				"user": fmt.Sprintf("U%07d", i%97), "channel": fmt.Sprintf("C%04d", conv),
			},
		},
		Locator: json.RawMessage(fmt.Sprintf(`{"team":"T0BENCH","channel":"C%04d","ts":"1700000001.%06d"}`, conv, i)),
	}
}

// probeDir is where the fsync probe runs: the SQLite database's directory, else the current
// directory.
func probeDir(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("bench: invalid store URL")
	}
	if u.Scheme != "sqlite" {
		return os.Getwd()
	}
	p := u.Opaque
	if p == "" {
		p = u.Host + u.Path
	}
	abs, err := filepath.Abs(filepath.Dir(p))
	if err != nil {
		return "", fmt.Errorf("bench: store directory: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("bench: store directory: %w", err)
	}
	return abs, nil
}

// benchStore returns the store a bench writes to: --store (or --store-file) if given, else a fresh
// SQLite database in a temporary directory that cleanup removes.
func (a *app) benchStore() (rawURL string, cleanup func(), err error) {
	if a.cfg.Origin["store"] == config.FromFlag {
		return a.cfg.Store, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "channels-bench-")
	if err != nil {
		return "", nil, fmt.Errorf("bench: temporary store directory: %w", err)
	}
	return store.SQLiteURL(filepath.Join(dir, "bench.db")), func() { os.RemoveAll(dir) }, nil
}

// latencyMs sorts lat and returns its 50th and 99th percentiles in milliseconds.
func latencyMs(lat []time.Duration) (p50, p99 float64) {
	slices.Sort(lat)
	return round(ms(percentile(lat, 0.50)), 3), round(ms(percentile(lat, 0.99)), 3)
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(math.Ceil(q*float64(len(sorted))))-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round(x float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(x*p) / p
}
