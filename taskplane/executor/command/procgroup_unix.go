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
//
// It then reaps, in the background, the members of the group that are children of this process:
// none usually (an orphan is adopted by init), but all of them when Channels is init itself (PID 1
// in a container without an init) or a subreaper, where each would otherwise stay a zombie for
// the life of the process. The command itself was reaped by its Wait, so nothing waits twice.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // ESRCH: nothing left
	go func() {
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(-pgid, &ws, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				return // ECHILD: no child of ours left in the group
			}
		}
	}()
}
