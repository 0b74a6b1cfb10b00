package sourcetest

import (
	"errors"
	"io"
)

// CutOffBody is a request body its sender stopped sending partway: the first read returns
// Prefix (the start of a JSON object, say), the next the connection's error.
type CutOffBody struct {
	Prefix string
	n      int
}

func (b *CutOffBody) Read(p []byte) (int, error) {
	if b.n == 0 {
		b.n++
		return copy(p, b.Prefix), nil
	}
	return 0, errors.New("connection reset by peer")
}

func (b *CutOffBody) Close() error { return nil }

// UntouchedBody is a request body that records whether anything read it: an endpoint that must
// refuse a request on its headers alone leaves Touched false.
type UntouchedBody struct{ Touched bool }

func (b *UntouchedBody) Read([]byte) (int, error) { b.Touched = true; return 0, io.ErrUnexpectedEOF }

func (b *UntouchedBody) Close() error { return nil }
