// Command retain runs one retention pass (taskplane.Plane.Prune, 30-day window unless RETENTION
// says otherwise) over a store while an acceptance is made every 50 ms, and prints each retention
// transaction's duration and the acceptances' latencies meanwhile.
//
//	go run ./scripts/largestore/retain sqlite:///tmp/big.db 300s
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	_ "github.com/channels-dev/channels/taskplane/store/postgres"
	_ "github.com/channels-dev/channels/taskplane/store/sqlite"
)

type retentionKey struct{}

// timed prints the duration of each Update made on a retention pass's context.
type timed struct {
	store.Store
	mu sync.Mutex
	n  int
}

func (t *timed) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	start := time.Now()
	err := t.Store.Update(ctx, fn)
	if ctx.Value(retentionKey{}) != nil {
		t.mu.Lock()
		t.n++
		fmt.Printf("retention txn %d: %v err=%v\n", t.n, time.Since(start).Round(time.Millisecond), err)
		t.mu.Unlock()
	}
	return err
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: retain STORE_URL MAX_DURATION")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "retain:", err)
		os.Exit(1)
	}
}

func run(url, maxDur string) error {
	limit, err := time.ParseDuration(maxDur)
	if err != nil {
		return err
	}
	opts := []taskplane.Option{taskplane.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	if r := os.Getenv("RETENTION"); r != "" {
		d, err := time.ParseDuration(r)
		if err != nil {
			return fmt.Errorf("RETENTION: %w", err)
		}
		opts = append(opts, taskplane.WithRetention(d))
	}
	ctx := context.Background()
	t0 := time.Now()
	st, err := store.Open(ctx, url)
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Printf("open (migrations applied): %v\n", time.Since(t0).Round(time.Millisecond))
	plane := taskplane.New(&timed{Store: st}, opts...)

	stop := make(chan struct{})
	var lat []time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			id := fmt.Sprintf("retain-%d-%d", t0.UnixNano(), i)
			start := time.Now()
			if _, err := plane.Accept(ctx, taskplane.Event{Principal: "p0", Source: "webhook", Identity: id,
				ConversationKey: fmt.Sprintf("retain-conv-%d", i%10),
				Message: taskplane.Message{ID: id, Role: taskplane.RoleUser,
					Parts: []taskplane.Part{taskplane.TextPart("hello")}}}); err != nil {
				fmt.Println("accept error:", err)
			}
			lat = append(lat, time.Since(start))
		}
	})
	time.Sleep(time.Second) // acceptances before the pass, for a baseline
	pctx, cancel := context.WithTimeout(context.WithValue(ctx, retentionKey{}, true), limit)
	start := time.Now()
	res, err := plane.Prune(pctx)
	cancel()
	fmt.Printf("prune pass: %v err=%v result=%+v\n", time.Since(start).Round(time.Millisecond), err, res)
	close(stop)
	wg.Wait()
	if len(lat) > 0 {
		slices.Sort(lat)
		fmt.Printf("acceptances: n=%d p50=%v p99=%v max=%v\n", len(lat), lat[len(lat)/2].Round(time.Millisecond),
			lat[len(lat)*99/100].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	}
	return nil
}
