package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
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

// AcceptTimeout bounds what an HTTP intake does for a request once it has read and verified its
// body: recording it, accepting its event.
const AcceptTimeout = 30 * time.Second

// AcceptContext is the context an HTTP intake records and accepts a request's event under: r's
// values without its cancellation, bounded by AcceptTimeout. A sender that gives up waiting (Slack
// after 3 s) cancels r's context; an acceptance under way on it would be abandoned, and a store
// that is slower than the sender's deadline every time would lose the event across all its
// retries. Under AcceptContext the acceptance completes, and the sender's next retry is answered
// as a duplicate.
func AcceptContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), AcceptTimeout)
}
