// Package boundedwritetest helps tests of answers a client must keep taking.
package boundedwritetest

import (
	"io"
	"net"
	"time"
)

// SmallSendBuffers returns l with each accepted TCP connection given a small send buffer, so an
// answer larger than a few socket buffers cannot be written until the client reads.
func SmallSendBuffers(l net.Listener) net.Listener { return smallSendBuffers{l} }

type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// ReadSlowly reads c until it ends, n bytes at a time with pause after each read, and returns what
// it read and the error that ended it (nil at io.EOF).
func ReadSlowly(c net.Conn, n int, pause time.Duration) ([]byte, error) {
	var got []byte
	buf := make([]byte, n)
	for {
		k, err := c.Read(buf)
		got = append(got, buf[:k]...)
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		time.Sleep(pause)
	}
}
