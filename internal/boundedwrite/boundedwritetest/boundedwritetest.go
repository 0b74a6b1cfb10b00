// Package boundedwritetest helps tests of answers a client must keep taking.
package boundedwritetest

import "net"

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
