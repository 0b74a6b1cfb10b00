//go:build unix

package command_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
)

// gone reports, within a couple of seconds, whether process pid has ended (or is a zombie
// waiting to be reaped).
func gone(pid int) bool {
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return true
		}
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
			if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// The children a command starts end with its turn: a timed-out wrapper script's background job
// does not keep working the task, nor does one a command that exited left behind.
func TestACommandsChildrenEndWithItsTurn(t *testing.T) {
	for name, c := range map[string]struct {
		script string
		want   taskplane.State
	}{
		"timed out": {`sleep 30 & echo $! > "$1"; wait`, taskplane.StateFailed},
		"exited": {`sleep 30 </dev/null >/dev/null 2>&1 & echo $! > "$1"; echo '{"result":"complete","response":"done"}'`,
			taskplane.StateCompleted},
		// A plain "job &" keeps the command's stdout open after it exited 0: its result stands
		// (it waited WaitDelay for the output to close), and the job ends with it.
		"exited, its job holding the output": {`sleep 30 & echo $! > "$1"; echo '{"result":"complete","response":"done"}'`,
			taskplane.StateCompleted},
	} {
		t.Run(name, func(t *testing.T) {
			pid := runForChild(t, c.script, 500*time.Millisecond, c.want)
			if !gone(pid) {
				t.Errorf("the command's child (pid %d) still runs after its turn ended", pid)
			}
		})
	}
}

// runForChild runs script (given a scratch file as $1, where it writes a child's pid) as a turn
// that must end in want, and returns the pid, killed when the test ends.
func runForChild(t *testing.T, script string, timeout time.Duration, want taskplane.State) int {
	t.Helper()
	e, scratch := shell(t, script, timeout)
	task := run(t, e)
	if task.Status.State != want {
		t.Fatalf("task %s (%q), want %s", task.Status.State, statusText(task), want)
	}
	b, err := os.ReadFile(scratch)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}
