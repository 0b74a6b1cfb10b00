package delivery_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/internal/logcapture"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// downStore fails every transaction while down is set, counting them.
type downStore struct {
	store.Store
	down  atomic.Bool
	calls atomic.Int64
}

var errRefused = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")

func (d *downStore) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if d.down.Load() {
		d.calls.Add(1)
		return errRefused
	}
	return d.Store.Update(ctx, fn)
}

// While the store is down the engine's claims back off (the poll doubling up to a cap) and the
// log says so once, then once more when the store is back; the engine claims again by itself.
// It claimed every poll (10 ms here, half a second by default) and logged every failure.
func TestAStoreOutageBacksTheClaimsOffAndLogsOnce(t *testing.T) {
	st := &downStore{Store: storetest.OpenSQLite(t)}
	lines := &logcapture.Lines{}
	e := delivery.New(st, delivery.Routes{"slack": {Sender: newProvider(nil), Recovery: delivery.Lookup}},
		delivery.WithLogger(slog.New(lines)), delivery.WithPoll(10*time.Millisecond))
	st.down.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(600 * time.Millisecond)
	st.down.Store(false)
	calls := st.calls.Load()
	// 10, 20, 40, 80, 160, 320 ms: 6 or 7 claims in 600 ms; every poll would be 60.
	if calls < 2 || calls > 12 {
		t.Errorf("%d claims in 600 ms of outage with a 10 ms poll, want a backoff (about 7)", calls)
	}
	if n := lines.Count("ERROR delivery: claim"); n != 1 {
		t.Errorf("%d ERROR lines for the outage, want 1: %q", n, lines.All())
	}
	if n := lines.Count("ERROR delivery: claim sources=[slack]"); n != 1 {
		t.Errorf("the outage line does not name the engine's sources: %q", lines.All())
	}
	deadline := time.Now().Add(5 * time.Second)
	for lines.Count("INFO delivery: claim: store reachable again sources=[slack]") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery line within 5 s of the store coming back: %q", lines.All())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
