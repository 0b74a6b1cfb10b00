package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// setPeerTimeout sets TCP_USER_TIMEOUT (see peerTimeout) on a listening socket; the connections
// it accepts inherit it.
func setPeerTimeout(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(peerTimeout.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return serr
}
