// Package boundedwrite writes HTTP answers that a client must keep taking.
//
// net/http gives a response no write deadline unless the server has a WriteTimeout, and one for
// the whole response would cut blocking sends and long-polls that wait before they answer. So a
// client that sends a request and never reads its answer holds the handler, and the answer in
// memory, for as long as it keeps the connection open. Write bounds each part of an answer
// instead: a client that reads, however slowly, gets all of it; one that stops reading is cut.
package boundedwrite

import (
	"net/http"
	"time"
)

// ChunkSize is how much of an answer one deadline covers.
const ChunkSize = 64 << 10

// DefaultTimeout is the time a client has to take each chunk, where no other is configured.
const DefaultTimeout = 30 * time.Second

// Write writes body to w a chunk at a time, each to be taken by the client within perChunk
// (DefaultTimeout when 0), and returns the first write error. The last chunk's deadline also
// covers what net/http writes after the handler returns; it lifts the deadline before the
// connection's next request.
func Write(w http.ResponseWriter, body []byte, perChunk time.Duration) error {
	if perChunk <= 0 {
		perChunk = DefaultTimeout
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(perChunk))
	for len(body) > 0 {
		n := min(len(body), ChunkSize)
		if _, err := w.Write(body[:n]); err != nil {
			return err
		}
		body = body[n:]
		_ = rc.SetWriteDeadline(time.Now().Add(perChunk))
	}
	return nil
}
