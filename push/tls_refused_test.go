package push_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/push"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// A webhook whose TLS certificate the sender does not trust never receives a byte of the
// request: the handshake fails before the request is written. That is "certainly not received"
// (Retryable), so when attempts run out the notification is failed, not ambiguous (which asks an
// operator to find out whether it landed).
func TestATLSHandshakeFailureIsCertainlyNotReceived(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	p := taskplane.New(storetest.OpenSQLite(t))
	n := startNotifier(t, p, push.Options{AllowPrivateNetworks: true})
	task := acceptWithPush(t, p, "alice", "m1", taskplane.PushConfig{ID: "h1", URL: srv.URL + "/hook", Token: "tok"})
	n.Registered("alice", task.ID)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rec delivery.Record
	for {
		recs, err := n.Engine().List(ctx, delivery.Filter{Source: taskplane.SourcePush})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 1 && recs[0].State.Settled() {
			rec = recs[0]
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("notification not settled: %+v", recs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if hits.Load() != 0 {
		t.Fatalf("the receiver got %d requests", hits.Load())
	}
	if rec.State != delivery.StateFailed {
		t.Fatalf("a notification no attempt of which reached the receiver is %s (%s), want failed", rec.State, rec.LastError)
	}
}
