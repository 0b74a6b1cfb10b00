package a2ahttp_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/internal/boundedwrite/boundedwritetest"
)

// seedLargeTasks sends n completed tasks of about 200 KiB each as alice.
func seedLargeTasks(t *testing.T, e *env, n int) {
	t.Helper()
	for i := range n {
		body := sendBody(t, wireMsg(fmt.Sprintf("large-%d", i), strings.Repeat("x", 200<<10)), nil)
		if st, _, b := e.raw(http.MethodPost, "/message:send", tokenAlice, body, nil); st != http.StatusOK {
			t.Fatalf("send: %d %s", st, b)
		}
	}
}

// A ListTasks page ends early, with a token to go on, once its tasks pass max_page_bytes; the
// pages still list every task once, on both bindings.
func TestAListTasksPageIsBoundedInBytes(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) { c.Limits.MaxPageBytes = 300 << 10 })
	seedLargeTasks(t, e, 3)
	var rest []string
	for token := ""; ; {
		st, _, b := e.raw(http.MethodGet, "/tasks?pageSize=100&pageToken="+token, tokenAlice, nil, nil)
		var page struct {
			Tasks         []struct{ ID string }
			NextPageToken string
			TotalSize     int
		}
		if err := json.Unmarshal(b, &page); st != http.StatusOK || err != nil {
			t.Fatalf("list: %d %v", st, err)
		}
		if len(page.Tasks) != 1 || page.TotalSize != 3 {
			t.Fatalf("a page of %d tasks (totalSize %d), want 1 of 3: two pass 300 KiB", len(page.Tasks), page.TotalSize)
		}
		rest = append(rest, page.Tasks[0].ID)
		if token = page.NextPageToken; token == "" {
			break
		}
		if len(rest) > 3 {
			t.Fatal("pages do not end")
		}
	}
	res := e.rpc(tokenAlice, "ListTasks", map[string]any{"pageSize": 100}, nil)
	var page struct {
		Tasks         []struct{ ID string }
		NextPageToken string
	}
	if err := json.Unmarshal(res.Result, &page); err != nil || len(page.Tasks) != 1 || page.NextPageToken == "" {
		t.Fatalf("JSON-RPC ListTasks: %d tasks, token %q, %v (%+v)", len(page.Tasks), page.NextPageToken, err, res.Error)
	}
	if len(rest) != 3 || rest[0] == rest[1] || rest[1] == rest[2] || rest[0] == rest[2] || page.Tasks[0].ID != rest[0] {
		t.Fatalf("pages listed %v (JSON-RPC's first %s), want the three tasks once each", rest, page.Tasks[0].ID)
	}
}

// A client that sends a request and never reads its answer does not hold the handler, and the
// answer in memory, for as long as it keeps the connection open: the answer's write has a
// deadline (StreamWriteTimeout, and a second per MiB), on both bindings.
func TestAnAnswerNobodyReadsDoesNotHoldTheHandler(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) { c.StreamWriteTimeout = 300 * time.Millisecond })
	seedLargeTasks(t, e, 3) // a ListTasks answer of about 600 KiB
	done := make(chan struct{}, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.srv.ServeHTTP(w, r)
		done <- struct{}{}
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(boundedwritetest.SmallSendBuffers(l)) }()
	t.Cleanup(func() { _ = srv.Close() })

	rpc := `{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pageSize":100}}`
	for name, req := range map[string]string{
		"rest": "GET /tasks?pageSize=100 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tokenAlice + "\r\n\r\n",
		"jsonrpc": "POST /jsonrpc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tokenAlice +
			"\r\nContent-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(rpc)) + "\r\n\r\n" + rpc,
	} {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		// ... and never read.
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the handler still writes the answer 10s after its deadline of 300ms", name)
		}
		_ = c.Close()
	}
}

// A client that reads an answer slowly but steadily gets all of it: the deadline bounds each
// 64 KiB of an answer, not the whole, so only a client that stops reading is cut.
func TestASlowReaderGetsTheWholeAnswer(t *testing.T) {
	e := newEnv(t, func(c *a2aConfig) { c.StreamWriteTimeout = time.Second })
	seedLargeTasks(t, e, 6) // a ListTasks answer of about 1.2 MiB
	srv := &http.Server{Handler: e.srv}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(boundedwritetest.SmallSendBuffers(l)) }()
	t.Cleanup(func() { _ = srv.Close() })
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(16 << 10)
	if _, err := c.Write([]byte("GET /tasks?pageSize=100 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tokenAlice + "\r\nConnection: close\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// About 320 KiB/s: a 64 KiB chunk takes 200 ms of the second it has; the whole answer takes
	// about 4 s, past any deadline of a second and a second per MiB for all of it.
	start := time.Now()
	got, _ := boundedwritetest.ReadSlowly(c, 16<<10, 50*time.Millisecond)
	head, body, ok := strings.Cut(string(got), "\r\n\r\n")
	var page struct{ Tasks []struct{ ID string } }
	if !ok || !strings.HasPrefix(head, "HTTP/1.1 200") || json.Unmarshal([]byte(body), &page) != nil || len(page.Tasks) != 6 {
		t.Fatalf("read %d bytes in %s; the answer was cut (%d tasks decoded)", len(got), time.Since(start).Round(time.Millisecond), len(page.Tasks))
	}
}
