//go:build !linux

package interop_test

import "os/exec"

// dieWithTest does nothing here: only Linux has a parent-death signal.
func dieWithTest(*exec.Cmd) {}
