package push_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/push"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// A notification whose POST is in flight when the notifier stops (channels serve's shutdown
// cancels its context) runs to its outcome, as the delivery engine's own calls do ("cutting one
// short would turn a known outcome into an unknown one"): the receiver took it, so it is
// delivered, and the next process does not POST the same id again.
func TestAStopMidSendDoesNotMakeTheNextProcessSendTheIDAgain(t *testing.T) {
	var (
		mu   sync.Mutex
		ids  []string
		once sync.Once
	)
	entered := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ids = append(ids, r.Header.Get(push.HeaderID))
		mu.Unlock()
		once.Do(func() { close(entered) })
		time.Sleep(300 * time.Millisecond) // a receiver that takes a moment to answer
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	p := taskplane.New(storetest.OpenSQLite(t))
	task := acceptWithPush(t, p, "alice", "m1", taskplane.PushConfig{ID: "h1", URL: srv.URL + "/hook", Token: "tok"})

	// The first process: one pass of its notifier, stopped while the snapshot's POST is in flight.
	first := push.New(p, fastOptions(push.Options{AllowPrivateNetworks: true}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = first.RunOnce(ctx)
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver got nothing")
	}
	cancel() // shutdown begins
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the pass did not return")
	}
	recs, err := first.Engine().List(context.Background(), delivery.Filter{Source: taskplane.SourcePush})
	if err != nil || len(recs) != 1 {
		t.Fatalf("deliveries %v, %v", recs, err)
	}
	atts, _ := first.Engine().Attempts(context.Background(), recs[0].Principal, recs[0].ID)
	for _, a := range atts {
		t.Logf("after the stop: attempt %d %s %s %s", a.Attempt, a.Kind, a.Outcome, a.Error)
	}
	t.Logf("after the stop the notification is %s", recs[0].State)

	// The next process.
	n := startNotifier(t, p, push.Options{AllowPrivateNetworks: true})
	n.Registered("alice", task.ID)
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	rec, err := n.Engine().Wait(wctx, recs[0].Principal, recs[0].ID)
	if err != nil {
		t.Fatalf("wait: %v (%s)", err, rec.State)
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 1 {
		t.Fatalf("the receiver got the notification %d times (%v); the stop cut a call the receiver had taken", len(ids), ids)
	}
}
