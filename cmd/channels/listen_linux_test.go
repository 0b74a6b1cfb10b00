package main

import (
	"context"
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A connection serve accepts gives up on a peer that stops acknowledging after peerTimeout
// (TCP_USER_TIMEOUT, inherited from the listener), not after TCP's 15 minutes of retransmissions.
func TestAcceptedConnectionsGiveUpOnAVanishedPeer(t *testing.T) {
	ln, err := listenTCP(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if want := int(peerTimeout.Milliseconds()); got != want {
		t.Fatalf("TCP_USER_TIMEOUT of an accepted connection: %d ms, want %d", got, want)
	}
}
