// Package drain reads what is left of an HTTP answer whose body is not wanted, so that its
// connection can serve the next request, without letting a slow sender hold the caller.
package drain

import (
	"io"
	"time"
)

// Limits of Discard as the senders use it: a short body arrives with its status line or just
// after; a longer or slower one is not worth the connection.
const (
	MaxBytes = 64 << 10
	MaxWait  = time.Second
)

// Discard reads and drops up to max bytes of body, for at most within, then closes it. A body that
// is longer, or still arriving when within runs out, is closed unread: its connection is not
// reused, and the caller goes on.
func Discard(body io.ReadCloser, max int64, within time.Duration) {
	stop := time.AfterFunc(within, func() { body.Close() }) // unblocks a Read in progress
	_, _ = io.Copy(io.Discard, io.LimitReader(body, max))
	stop.Stop()
	body.Close()
}
