package main

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// chromium finds the Debian chromium binary. Without it the test is skipped, except under
// CI=true, where scripts/test.sh installs it and its absence is a failure.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (scripts/test.sh installs the Debian chromium package)")
	}
	t.Skip("chromium is not installed; scripts/test.sh installs it")
	return ""
}

// runChromium runs headless Chromium with args after the common flags and returns its stdout.
func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	common := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,1600"}
	cmd := exec.CommandContext(ctx, bin, append(common, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.Bytes()
}

// TestDashboardRendersInChromium serves a dashboard with two configured webhook instances and
// the evidence of a scripted run, and loads /admin in headless Chromium: the page must list the
// configured sources, draw their charts and the recent evidence, and a screenshot is kept in the
// test's artifact directory (go test -artifacts -outputdir DIR keeps it).
func TestDashboardRendersInChromium(t *testing.T) {
	bin := chromium(t)
	// The admin page is open without a token on loopback: a browser cannot send a bearer token
	// from the command line. (Token checks are in TestOperatorSurfaceAfterAScriptedRun.)
	yaml := strings.Replace(operatorYAML, "admin_token_env: TEST_ADMIN_TOKEN\n", "admin_refresh: 0s\n", 1)
	c, cfgPath := operatorCLI(t, yaml)
	base, _ := startServe(t, c, "--config", cfgPath)
	scriptedRun(t, base)
	waitFor(t, "tasks to be worked", func() bool {
		_, m := getText(t, base+"/metrics", "")
		return metricValue(m, `channels_evidence_records_total{kind="woken",source="webhook"}`) >= 3
	})

	dom := string(runChromium(t, bin, "--dump-dom", base+"/admin"))
	for _, want := range []string{
		`data-source="webhook"`, `data-source="a2a"`, // one card per source
		"ci, deploys",               // the configured instances
		"<svg",                      // server-drawn charts
		`id="evidence"`, "accepted", // recent evidence
		"malformed-envelope",      // what went wrong is visible
		"Nothing needs attention", // no stuck or ambiguous deliveries
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("dashboard DOM lacks %q", want)
		}
	}
	if strings.Contains(dom, plantedBody) || strings.Contains(dom, plantedWebhookSecret) {
		t.Error("dashboard shows a message body or a secret")
	}

	shot := filepath.Join(t.ArtifactDir(), "admin-dashboard.png")
	runChromium(t, bin, "--screenshot="+shot, "--hide-scrollbars", base+"/admin")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 1600 {
		t.Fatalf("screenshot is %v, want 1280×1600", b)
	}
	t.Logf("screenshot: %s", shot)
}
