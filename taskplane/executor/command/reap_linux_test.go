//go:build linux

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

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from linux/prctl.h.
const prSetChildSubreaper = 36

// A command's orphaned children are reaped when Channels adopts them (PID 1 in a container
// without an init, or a subreaper, as this test process makes itself): killed with the command's
// group at the end of its turn, none is left a zombie.
func TestOrphansOfACommandAreReapedWhenChannelsAdoptsThem(t *testing.T) {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		t.Skipf("prctl(PR_SET_CHILD_SUBREAPER): %v", errno)
	}
	// The subshell exits at once, so its background sleep is orphaned and adopted by this process.
	pid := runForChild(t, `( sleep 30 </dev/null >/dev/null 2>&1 & echo $! > "$1" ); echo '{"result":"complete","response":"done"}'`,
		5*time.Second, taskplane.StateCompleted)
	stat := "/proc/" + strconv.Itoa(pid) + "/stat"
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(stat)
		if err != nil {
			return // reaped: no such process
		}
		if time.Now().After(deadline) {
			f := strings.Fields(string(b))
			t.Fatalf("the command's orphan (pid %d) is still there after its turn: state %s", pid, f[2])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
