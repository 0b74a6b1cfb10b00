package interop_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// jsChecks are the checks interop/js/client.mjs must report, per binding, all passed.
var jsChecks = []string{"card", "send-blocking", "send-direct-message", "send-return-immediately", "get",
	"list", "stream", "subscribe", "cancel", "not-found", "principals-isolated"}

// TestJSSDKAgainstServe runs interop/js/client.mjs — the @a2a-js/sdk 1.3.0 client — against a
// real "channels serve --executor conformance" over both bindings. It installs the pinned
// package with "npm ci" when interop/js/node_modules is absent. Without node or npm it is skipped,
// except under CI=true, where it fails.
func TestJSSDKAgainstServe(t *testing.T) {
	node, errNode := exec.LookPath("node")
	npm, errNpm := exec.LookPath("npm")
	if errNode != nil || errNpm != nil {
		msg := "node and npm are needed for the @a2a-js/sdk interop test (Debian: apt-get install nodejs npm; scripts/test.sh installs them as root)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir, err := filepath.Abs("js")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@a2a-js", "sdk", "package.json")); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}

	s := startServer(t, sqliteStore(t), credentialsFile(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs", s.URL, tokenAlice, tokenBob)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()

	type result struct {
		Binding string `json:"binding"`
		Check   string `json:"check"`
		OK      bool   `json:"ok"`
		Detail  string `json:"detail"`
		Error   string `json:"error"`
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Check == "" {
			t.Errorf("unexpected output line %q", sc.Text())
			continue
		}
		key := r.Binding + "/" + r.Check
		seen[key] = true
		if !r.OK {
			t.Errorf("%s: %s", key, r.Error)
			continue
		}
		t.Logf("%s: ok %s", key, r.Detail)
	}
	for _, b := range []string{"HTTP+JSON", "JSONRPC"} {
		for _, c := range jsChecks {
			if !seen[b+"/"+c] {
				t.Errorf("%s/%s: not reported", b, c)
			}
		}
	}
	if runErr != nil {
		t.Errorf("node client.mjs: %v\nstderr:\n%s", runErr, strings.TrimSpace(stderr.String()))
	}
}
