//go:build unix

package command

import (
	"os/exec"
	"syscall"
)

// ownGroup starts cmd as the leader of a process group of its own, and makes its context's end
// kill the whole group: the children a wrapper script or an agent starts end with it, so none
// keeps working a task that another turn may run again.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

// killGroup kills what is left of cmd's process group once the command has returned: its turn is
// over, and so is anything it left running in the background. (The group's id cannot have been
// reused while a member lives; an empty group's id could be, by a new group leader given the
// freed pid in the instant since the command was reaped, which takes a pid wraparound.)
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // ESRCH: nothing left
	}
}
