package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/internal/config"
)

// TestStaticBuild builds the binary with CGO_ENABLED=0, as deploy/Containerfile does, and checks
// it is static: no program interpreter, no shared libraries, so it runs on a scratch image.
func TestStaticBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if runtime.GOOS != "linux" {
		t.Skip("checks an ELF binary")
	}
	bin := filepath.Join(t.TempDir(), "channels")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -X main.version=v0.0.0-static", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the binary names a program interpreter: it is dynamically linked")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Fatalf("the binary needs shared libraries %v (%v)", libs, err)
	}
	// The Containerfile's -X main.version sets the version the binary prints.
	if out, err := exec.Command(bin, "version").Output(); err != nil || !strings.Contains(string(out), "v0.0.0-static") {
		t.Fatalf("channels version: %v\n%s", err, out)
	}
}

// TestDeployFilesMatchTheDaemon: the systemd unit signals the daemon alone (KillMode=mixed: the
// exec executor's commands are Channels' to stop, and their turns go back to the queue) and
// gives it longer than the default shutdown_timeout; the container image stamps the version
// into the variable "channels version" prints and makes its state directory nonroot's.
func TestDeployFilesMatchTheDaemon(t *testing.T) {
	unit, err := os.ReadFile("../../deploy/channels.service")
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, line := range strings.Split(string(unit), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			settings[k] = v
		}
	}
	if settings["KillMode"] != "mixed" {
		t.Errorf("KillMode=%q, want mixed", settings["KillMode"])
	}
	stop, err := strconv.Atoi(settings["TimeoutStopSec"])
	if err != nil || time.Duration(stop)*time.Second <= config.Default().ShutdownTimeout+5*time.Second {
		t.Errorf("TimeoutStopSec=%q: want some seconds over the default shutdown_timeout %s", settings["TimeoutStopSec"], config.Default().ShutdownTimeout)
	}
	image, err := os.ReadFile("../../deploy/Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-X main.version=${VERSION}", "--chown=nonroot:nonroot /out/state /var/lib/channels"} {
		if !strings.Contains(string(image), want) {
			t.Errorf("the Containerfile lacks %q", want)
		}
	}
}
