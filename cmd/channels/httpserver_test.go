package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The serve's read timeout cuts off a request body that stalls, but not a response that outlasts
// it — a stream after a body, or on a request without one.
func TestReadTimeoutBoundsTheBodyNotTheResponse(t *testing.T) {
	const d = 200 * time.Millisecond
	defer func(old time.Duration) { bodyReadTimeout = old }(bodyReadTimeout)
	bodyReadTimeout = d
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		// A stream that lasts three timeouts, one line per timeout.
		rc := http.NewResponseController(w)
		for i := range 3 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(d):
			}
			fmt.Fprintf(w, "tick %d\n", i)
			_ = rc.Flush()
		}
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	t.Run("stalled body", func(t *testing.T) {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly part of it")
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("stalled body answered %s, want 400 or a closed connection", resp.Status)
			}
		}
		if waited := time.Since(start); waited > 5*time.Second {
			t.Fatalf("the stalled body held the request for %s", waited)
		}
	})

	for _, tc := range []struct{ name, method, body string }{
		{"stream after a body", http.MethodPost, "hello"},
		{"stream without a body", http.MethodGet, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, base, strings.NewReader(tc.body))
			if tc.body == "" {
				req.Body = http.NoBody
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || strings.Count(string(b), "tick") != 3 {
				t.Fatalf("stream: %q, %v; want three ticks over three timeouts", b, err)
			}
		})
	}
}
