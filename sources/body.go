package sources

import (
	"errors"
	"fmt"
	"io"
	"net/http"
)

// DefaultMaxBody is a source's body limit when its max_body option is 0 or unset.
const DefaultMaxBody = 1 << 20 // 1 MiB

// BodyLimit resolves a source's max_body option: 0 (unset) is DefaultMaxBody; a negative value
// is refused rather than read as the default, since it was written on purpose and means nothing.
func BodyLimit(maxBody int64) (int64, error) {
	switch {
	case maxBody < 0:
		return DefaultMaxBody, fmt.Errorf("max_body %d: want a positive number of bytes (0 or unset: %d)", maxBody, DefaultMaxBody)
	case maxBody == 0:
		return DefaultMaxBody, nil
	}
	return maxBody, nil
}

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
