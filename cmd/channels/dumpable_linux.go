package main

import "golang.org/x/sys/unix"

// shieldFromChildren marks the process non-dumpable (prctl PR_SET_DUMPABLE 0), as ssh-agent
// does: a process of the same user — the exec executor's command among them — can then no longer
// read its environment, memory or open files through /proc (/proc/PID/environ, /proc/PID/fd),
// nor attach to it, and it writes no core dump. Only root can still look inside it.
func shieldFromChildren() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
