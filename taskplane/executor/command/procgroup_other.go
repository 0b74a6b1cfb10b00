//go:build !unix

package command

import "os/exec"

// ownGroup: without process groups only the command itself is killed when its context ends.
func ownGroup(*exec.Cmd) {}

func killGroup(*exec.Cmd) {}
