package main

import (
	"context"
	"net"
	"time"
)

// peerTimeout is how long a connection may hold data its peer has not acknowledged (or a zero
// window its peer does not open) before the kernel drops it, where the platform allows (Linux:
// TCP_USER_TIMEOUT, inherited by every accepted connection). Without it a client that vanished
// without a FIN or a reset (a laptop closed, a network gone) holds its stream, and its slot in
// the stream quota, for the 15 minutes TCP retransmits for; the keep-alive comments never fail
// because the kernel's send buffer takes them. The same bound as an SSE write's (30 s).
const peerTimeout = 30 * time.Second

// listenTCP listens on addr with peerTimeout set on the listener.
func listenTCP(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: setPeerTimeout}
	return lc.Listen(ctx, "tcp", addr)
}
