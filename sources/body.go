package sources

import (
	"errors"
	"fmt"
	"io"
	"net/http"
)

// ReadBody reads the body of a request to a source's endpoint, of at most limit bytes, and
// answers the request when it cannot: a larger body is 413 and counted as rejected "oversize"
// (RejectedOversize); one that cannot be read to its end — the sender went away, a broken
// chunked encoding, the server's read timeout — is 400 and counted as "unreadable"
// (RejectedUnreadable), not as oversize, which would send an operator after a limit that was
// never reached. ok is false once an answer was written.
func (s *Sink) ReadBody(w http.ResponseWriter, r *http.Request, principal string, limit int64) (body []byte, ok bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		s.Rejected(r.Context(), principal, RejectedOversize)
		http.Error(w, fmt.Sprintf("body larger than %d bytes", tooLarge.Limit), http.StatusRequestEntityTooLarge)
		return nil, false
	}
	if err != nil {
		s.Rejected(r.Context(), principal, RejectedUnreadable)
		http.Error(w, "body could not be read to its end", http.StatusBadRequest)
		return nil, false
	}
	return body, true
}
