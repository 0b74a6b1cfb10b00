package drain_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/internal/drain"
)

// A short refusal's body is read, so the next request reuses the connection; a body that trickles
// is given up on after the wait instead of holding the caller.
func TestDiscardReusesShortBodiesAndGivesUpOnSlowOnes(t *testing.T) {
	var conns atomic.Int32
	slow := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, strings.Repeat("no ", 100))
		if r.URL.Path == "/slow" {
			w.(http.Flusher).Flush()
			select {
			case <-slow:
			case <-r.Context().Done():
			}
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	defer close(slow)
	for range 3 {
		resp, err := http.Get(srv.URL + "/short")
		if err != nil {
			t.Fatal(err)
		}
		drain.Discard(resp.Body, drain.MaxBytes, drain.MaxWait)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("three short refusals opened %d connections; want 1", n)
	}
	resp, err := http.Get(srv.URL + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	drain.Discard(resp.Body, drain.MaxBytes, 200*time.Millisecond)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a body that trickles held the caller %s", d)
	}
}
