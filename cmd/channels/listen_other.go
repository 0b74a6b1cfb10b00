//go:build !linux

package main

import "syscall"

// setPeerTimeout does nothing where TCP_USER_TIMEOUT is not available: TCP's own retransmission
// limits apply.
func setPeerTimeout(network, address string, c syscall.RawConn) error { return nil }
