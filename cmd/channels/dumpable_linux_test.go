package main

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTheExecCommandCannotReadChannelsThroughProc: with the exec executor, serve marks itself
// non-dumpable, so the command — same user, untrusted input — cannot read Channels' environment
// (its secrets) or open files through /proc/$PPID. As root the command could anyway
// (CAP_SYS_PTRACE), so there only the flag is checked.
func TestTheExecCommandCannotReadChannelsThroughProc(t *testing.T) {
	script := filepath.Join(t.TempDir(), "agent.sh")
	body := "#!/bin/sh\ncat >/dev/null\nif cat /proc/$PPID/environ >/dev/null 2>&1 || ls /proc/$PPID/fd >/dev/null 2>&1; then r=readable; else r=shielded; fi\n" +
		"echo \"{\\\"result\\\":\\\"complete\\\",\\\"response\\\":\\\"$r\\\"}\"\n"
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t, nil)
	base, _ := startServe(t, c, "--executor", "exec", "--exec-command", script)
	if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || d != 0 {
		t.Fatalf("serve with the exec executor left the process dumpable (%d, %v)", d, err)
	}
	code, resp := post(t, base+"/message:send", "", sendBody("m-proc", "hi"))
	if code != 200 {
		t.Fatalf("send: %d %v", code, resp)
	}
	got := dig(resp, "task", "status", "message", "parts", 0, "text")
	if os.Geteuid() != 0 && got != "shielded" {
		t.Fatalf("the exec command found Channels' /proc entries %v", got)
	}
}
