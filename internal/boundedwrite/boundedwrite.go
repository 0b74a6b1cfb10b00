// Package boundedwrite writes HTTP answers that a client must keep taking.
//
// net/http gives a response no write deadline unless the server has a WriteTimeout, and one for
// the whole response would cut blocking sends and long-polls that wait before they answer. So a
// client that sends a request and never reads its answer holds the handler, and the answer in
// memory, for as long as it keeps the connection open. Write bounds each part of an answer
// instead, and the whole by a slowest rate: a client that reads gets all of it; one that stops
// reading, or reads slower than MinRate, is cut.
package boundedwrite

import (
	"io"
	"net/http"
	"time"
)

// ChunkSize is how much of an answer one deadline covers.
const ChunkSize = 64 << 10

// DefaultTimeout is the time a client has to take each chunk, where no other is configured.
const DefaultTimeout = 30 * time.Second

// MinRate is the slowest a client may take a whole answer, in bytes a second, after the time of
// one chunk: an 8 MiB answer must be taken within 30 s and 256 s more, so slow readers cannot
// hold many answers in memory for an hour. 0 or less: no floor.
var MinRate = 32 << 10

// Write writes body to w a chunk at a time, each to be taken by the client within perChunk
// (DefaultTimeout when 0), and all of it within perChunk and len(body) ÷ MinRate seconds; it
// returns the first write error. The last chunk's deadline also covers what net/http writes
// after the handler returns; it lifts the deadline before the connection's next request.
func Write(w http.ResponseWriter, body []byte, perChunk time.Duration) error {
	rc := http.NewResponseController(w)
	return Chunks(w, body, perChunk, func(t time.Time) { _ = rc.SetWriteDeadline(t) })
}

// Chunks writes body to w a chunk at a time, calling deadline with the time the client has for
// each chunk before it is written, and once more after the last (for what follows it): perChunk
// (DefaultTimeout when 0) from then, but never later than perChunk and len(body) ÷ MinRate
// seconds after the start. Write sets it as the connection's write deadline; a writer that may
// be cut meanwhile (a stream at shutdown) decides in deadline whether to.
func Chunks(w io.Writer, body []byte, perChunk time.Duration, deadline func(time.Time)) error {
	if perChunk <= 0 {
		perChunk = DefaultTimeout
	}
	var last time.Time // zero: no floor
	if MinRate > 0 {
		last = time.Now().Add(perChunk + time.Duration(len(body))*time.Second/time.Duration(MinRate))
	}
	next := func() {
		d := time.Now().Add(perChunk)
		if !last.IsZero() && d.After(last) {
			d = last
		}
		deadline(d)
	}
	next()
	for len(body) > 0 {
		n := min(len(body), ChunkSize)
		if _, err := w.Write(body[:n]); err != nil {
			return err
		}
		body = body[n:]
		next()
	}
	return nil
}
