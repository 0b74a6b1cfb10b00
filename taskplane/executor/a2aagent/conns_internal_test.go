package a2aagent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// TestCardReadsAfterTransientFailuresReuseConnections: each card read makes a client of its own,
// but their connections are one transport's: after transient failures (each dropping the client)
// the agent sees its connection reused, not a new one per failure left idle in a transport no
// client uses.
func TestCardReadsAfterTransientFailuresReuseConnections(t *testing.T) {
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	opened := 0
	rpc := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)        // a transient answer: the executor resets
		w.Write([]byte(strings.Repeat("overloaded ", 100))) // read, or the connection cannot be reused
	}))
	rpc.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			open[c] = true
			opened++
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
		}
	}
	rpc.Start()
	t.Cleanup(rpc.Close)
	host, _ := url.Parse(rpc.URL)
	agent, _ := movingCard(t, host)
	e, err := New(Config{AgentURL: agent, Token: "tok", AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const failures = 10
	for range failures {
		client, _, err := e.connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = client.GetTask(ctx, &a2a.GetTaskRequest{ID: "downstream"})
		if !transient(err) {
			t.Fatalf("GetTask: %v, want a transient failure", err)
		}
		e.classify(err) // a transient failure: the client is dropped, the card read again next time
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	n, opened := len(open), opened
	mu.Unlock()
	if opened != 1 {
		t.Fatalf("%d transient failures opened %d connections to the agent; want one, reused", failures, opened)
	}
	if n > 1 {
		t.Fatalf("after %d transient failures %d connections to the agent are still open (idle in transports no client uses); want the one reused", failures, n)
	}
}

// An answer of exactly MaxAnswerBytes is whole; one byte more fails with ErrAnswerTooLarge.
func TestAnAnswerAtTheBoundIsWholeAndOnePastIsRefused(t *testing.T) {
	for _, tc := range []struct {
		size int
		want error
	}{{MaxAnswerBytes, nil}, {MaxAnswerBytes + 1, ErrAnswerTooLarge}} {
		b := &limitedBody{ReadCloser: io.NopCloser(strings.NewReader(strings.Repeat("x", tc.size))), left: MaxAnswerBytes}
		got, err := io.ReadAll(b)
		if !errors.Is(err, tc.want) || (tc.want == nil && len(got) != tc.size) {
			t.Errorf("a %d-byte answer: %d bytes, %v; want %v", tc.size, len(got), err, tc.want)
		}
	}
}

// A stream is not bounded as an answer is: one asked for with Accept: text/event-stream, as the
// A2A client asks, is read whole over its life even when the agent does not label it (Go's server
// sniffs text/plain); an unlabelled answer to a request that did not ask for a stream is bounded.
func TestAStreamIsNotBoundedAsAnAnswer(t *testing.T) {
	ev := "data: " + `{"jsonrpc":"2.0","id":1,"result":{"pad":"` + strings.Repeat("x", 4000) + `"}}` + "\n\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 5000 { // about 20 MiB over the task's life
			io.WriteString(w, ev)
		}
	}))
	defer srv.Close()
	rt := &roundTripper{next: http.DefaultTransport, auth: &bearer{}}
	for _, accept := range []string{"text/event-stream", "application/json"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		req.Header.Set("Accept", accept)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if stream := accept == "text/event-stream"; stream && err != nil {
			t.Errorf("a stream was cut after %d bytes: %v", n, err)
		} else if !stream && !errors.Is(err, ErrAnswerTooLarge) {
			t.Errorf("an answer of %d bytes was read whole (%v)", n, err)
		}
	}
}

// An answer to a request for a stream that is not a 200 is an error answer, not a stream: the A2A
// client's REST binding decodes it whole (rest.FromRESTError), so it is bounded like any answer.
func TestAnErrorAnswerToAStreamRequestIsBounded(t *testing.T) {
	for _, status := range []int{http.StatusBadRequest, http.StatusCreated, http.StatusAccepted, http.StatusPartialContent} {
		t.Run(http.StatusText(status), func(t *testing.T) { errorAnswerIsBounded(t, status) })
	}
}

func errorAnswerIsBounded(t *testing.T, status int) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, `{"error":{"message":"`)
		chunk := strings.Repeat("x", 1<<20)
		for range 20 { // 20 MiB
			io.WriteString(w, chunk)
		}
		io.WriteString(w, `"}}`)
	}))
	defer srv.Close()
	rt := &roundTripper{next: http.DefaultTransport, auth: &bearer{}}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/message:stream", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if !errors.Is(err, ErrAnswerTooLarge) {
		t.Fatalf("a %d-byte JSON error answer (status %d) to a stream request was read whole (err %v); want ErrAnswerTooLarge at %d",
			n, resp.StatusCode, err, MaxAnswerBytes)
	}
}
