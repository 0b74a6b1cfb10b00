package boundedwrite_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/channels-dev/channels/internal/boundedwrite"
	"github.com/channels-dev/channels/internal/boundedwrite/boundedwritetest"
)

// serve answers every request with body through Write (perChunk each), on connections with small
// send buffers, and reports each Write's result on done.
func serve(t *testing.T, body []byte, perChunk time.Duration) (addr string, done <-chan error) {
	t.Helper()
	results := make(chan error, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		results <- boundedwrite.Write(w, body, perChunk)
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(boundedwritetest.SmallSendBuffers(l)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String(), results
}

func request(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.(*net.TCPConn).SetReadBuffer(16 << 10)
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	return c
}

// A client that never reads its answer does not hold the handler: the write is cut once a chunk
// has waited perChunk.
func TestAnAnswerNobodyReadsIsCut(t *testing.T) {
	addr, done := serve(t, bytes.Repeat([]byte("a"), 2<<20), 200*time.Millisecond)
	request(t, addr) // and never read
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the write of 2 MiB nobody read succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still writes 10 s after its deadline of 200 ms")
	}
}

// A client that reads slowly but steadily gets the whole answer, although it takes far longer
// than perChunk: each chunk has its own deadline.
func TestASlowSteadyReaderGetsItAll(t *testing.T) {
	body := bytes.Repeat([]byte("b"), 1<<20)
	addr, done := serve(t, body, time.Second)
	c := request(t, addr)
	start := time.Now()
	got, err := boundedwritetest.ReadSlowly(c, 16<<10, 30*time.Millisecond) // about 530 KiB/s
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || !bytes.HasSuffix(got, body) {
		t.Fatalf("after %s: write error %v, %d bytes read, want the whole answer", time.Since(start).Round(time.Millisecond), err, len(got))
	}
}

// A client that reads, but slower than MinRate, is cut once the answer's time is up, although
// it takes each chunk within perChunk: slow readers cannot hold answers in memory for hours.
func TestAReaderSlowerThanTheFloorIsCut(t *testing.T) {
	defer func(r int) { boundedwrite.MinRate = r }(boundedwrite.MinRate)
	boundedwrite.MinRate = 256 << 10 // the whole 256 KiB must be taken within 2 s + 1 s
	addr, done := serve(t, bytes.Repeat([]byte("c"), 256<<10), 2*time.Second)
	c := request(t, addr)
	start := time.Now()
	_, _ = boundedwritetest.ReadSlowly(c, 16<<10, 250*time.Millisecond) // 64 KiB/s: a chunk a second, the whole in 4 s
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("a reader at a quarter of the floor got the whole answer in %s", time.Since(start).Round(time.Millisecond))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write still runs 10 s after its time was up")
	}
}

// MinRate 0 means no floor, not a division by zero: the answer is written whole.
func TestMinRateZeroIsNotADivisionByZero(t *testing.T) {
	defer func(r int) { boundedwrite.MinRate = r }(boundedwrite.MinRate)
	boundedwrite.MinRate = 0
	body := bytes.Repeat([]byte("d"), 128<<10)
	addr, done := serve(t, body, time.Second)
	c := request(t, addr)
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil || !bytes.HasSuffix(got, body) {
			t.Fatalf("write error %v, %d bytes read, want the whole answer", err, len(got))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not finish (it panicked?)")
	}
}
