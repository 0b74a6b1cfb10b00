package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/internal/safebuf"
	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/sources/webhook"
	"github.com/channels-dev/channels/taskplane/store"
)

// Planted values: none of them may appear in a log line, an evidence record, a page or a --json
// output (the message body may appear only where a task's history is asked for: tasks get).
const (
	plantedWebhookSecret = "whsec-PLANTED-3f9a1c77e0b24d5a"
	plantedDeploysSecret = "whsec-PLANTED-deploys-5b6c7d8e" // each webhook instance has its own
	plantedAdminToken    = "admintok-PLANTED-8c1d2e3f4a5b6c7d"
	plantedBody          = "BODY-PLANTED-do-not-log-7781"
)

// operatorYAML configures two webhook instances, an operator token and quick health checks.
const operatorYAML = `admin_token_env: TEST_ADMIN_TOKEN
health_interval: 100ms
source_failure_window: 1s
sources:
  - type: webhook
    name: ci
    principal: ci-team
    options:
      secret_env: TEST_WEBHOOK_SECRET
      identity: event.id
      conversation: [thread]
      text: event.text
      non_work:
        event.type: [ping]
  - type: webhook
    name: deploys
    principal: ops
    options:
      secret_env: TEST_DEPLOYS_SECRET
      identity: event.id
      conversation: [thread]
      text: event.text
`

// operatorCLI returns a cli whose config file is yaml, with the planted secrets in its
// environment (and the process's: the webhook source reads its secret from the process).
func operatorCLI(t *testing.T, yaml string) (*cli, string) {
	t.Helper()
	t.Setenv("TEST_WEBHOOK_SECRET", plantedWebhookSecret)
	t.Setenv("TEST_DEPLOYS_SECRET", plantedDeploysSecret)
	t.Setenv("TEST_ADMIN_TOKEN", plantedAdminToken)
	c := newCLI(t, map[string]string{"TEST_WEBHOOK_SECRET": plantedWebhookSecret, "TEST_DEPLOYS_SECRET": plantedDeploysSecret,
		"TEST_ADMIN_TOKEN": plantedAdminToken})
	path := filepath.Join(t.TempDir(), "channels.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return c, path
}

// again returns a fresh cli over the same environment (and XDG home) as c.
func (c *cli) again() *cli {
	return &cli{env: c.env, stdout: &safebuf.Buffer{}, stderr: &safebuf.Buffer{}}
}

// postWebhook sends body to a webhook instance, signed with secret (unsigned when secret is "").
func postWebhook(t *testing.T, base, instance, body, secret string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/sources/webhook/"+instance, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	now := time.Now()
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	if secret != "" {
		req.Header.Set(webhook.HeaderSignature, webhook.Sign([]byte(secret), now, []byte(body)))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST webhook %s: %v", instance, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// scriptedRun drives intake through every path an operator counts: A2A, accepted, duplicate,
// non-work, malformed, rejected, conflict, on two instances. It returns what a reader of
// --json output must find.
func scriptedRun(t *testing.T, base string) {
	t.Helper()
	if code, body := post(t, base+"/message:send", "", sendBody("op-a2a-1", "hello from a2a")); code != 200 {
		t.Fatalf("a2a send = %d %v", code, body)
	}
	ev := func(id, text string) string {
		return `{"event":{"id":"` + id + `","text":"` + text + `"},"thread":"t1"}`
	}
	for _, step := range []struct {
		instance, body, secret string
		want                   int
	}{
		{"ci", ev("ev-1", plantedBody), plantedWebhookSecret, 200},                                        // accepted
		{"ci", ev("ev-1", plantedBody), plantedWebhookSecret, 200},                                        // duplicate
		{"ci", ev("ev-2", "second in the thread"), plantedWebhookSecret, 200},                             // accepted, same context
		{"ci", `{"event":{"id":"p1","type":"ping","text":"x"},"thread":"t1"}`, plantedWebhookSecret, 200}, // non-work
		{"ci", `{"event":{"id":"ev-3"}}`, plantedWebhookSecret, 400},                                      // malformed: no text
		{"ci", ev("ev-4", "forged"), "not-the-secret-at-all", 401},                                        // rejected
		{"ci", ev("ev-1", "a different body"), plantedWebhookSecret, 409},                                 // duplicate-conflict
		{"deploys", ev("dep-1", "deploy 42 failed"), plantedDeploysSecret, 200},                           // accepted
	} {
		if got := postWebhook(t, base, step.instance, step.body, step.secret); got != step.want {
			t.Fatalf("POST %s %s = %d, want %d", step.instance, step.body, got, step.want)
		}
	}
}

// getText GETs url with an optional bearer token.
func getText(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metricValue returns the value of the sample line that starts with series, or -1.
func metricValue(text, series string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// ndjson parses JSON lines into T.
func ndjson[T any](t *testing.T, out string) []T {
	t.Helper()
	var rows []T
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		rows = append(rows, v)
	}
	return rows
}

// TestOperatorSurfaceAfterAScriptedRun runs a server with two webhook instances, drives every
// intake path, and checks what an operator sees: /metrics, /readyz, the admin API and its token,
// then (server stopped) the CLI's evidence, summary and tasks output parsed as JSON — and that no
// planted secret, nor the message body, leaks into logs, evidence, pages or JSON output.
func TestOperatorSurfaceAfterAScriptedRun(t *testing.T) {
	c, cfgPath := operatorCLI(t, operatorYAML)
	base, stop := startServe(t, c, "--config", cfgPath)
	scriptedRun(t, base)

	// Readiness reflects the sources, for the operator; anyone else gets the status alone.
	code, raw := getText(t, base+"/readyz", plantedAdminToken)
	var body map[string]any
	if err := json.Unmarshal([]byte(raw), &body); err != nil || code != 200 || body["store"] != "sqlite" || len(body["sources"].([]any)) != 2 {
		t.Fatalf("readyz = %d %s", code, raw)
	}
	if code, raw := getText(t, base+"/readyz", ""); code != 200 || strings.TrimSpace(raw) != `{"status":"ready"}` {
		t.Fatalf("readyz without the token = %d %s, want the status alone", code, raw)
	}
	// The metrics count every principal's work: the operator's too.
	if code, _ := getText(t, base+"/metrics", ""); code != http.StatusUnauthorized {
		t.Fatalf("metrics without the token: %d, want 401", code)
	}

	// Metrics appear after intake, per source and disposition.
	var metrics string
	waitFor(t, "woken tasks in metrics", func() bool {
		_, metrics = getText(t, base+"/metrics", plantedAdminToken)
		return metricValue(metrics, `channels_evidence_records_total{kind="woken",source="webhook"}`) >= 3
	})
	for series, want := range map[string]float64{
		`channels_intake_events_total{disposition="accepted",source="webhook"}`:           3,
		`channels_intake_events_total{disposition="duplicate",source="webhook"}`:          1,
		`channels_intake_events_total{disposition="malformed-envelope",source="webhook"}`: 1,
		`channels_intake_events_total{disposition="duplicate-conflict",source="webhook"}`: 1,
		`channels_intake_events_total{disposition="accepted",source="a2a"}`:               1,
		`channels_accept_duration_seconds_count{source="webhook"}`:                        5,
		`channels_source_up{instance="ci",source="webhook"}`:                              1,
		`channels_sse_subscribers`:                                      0,
		`channels_a2a_streams_open`:                                     0,
		`channels_a2a_blocking_sends_waiting`:                           0,
		`channels_a2a_blocking_sends_unwaited_total{bound="principal"}`: 0,
		`channels_a2a_blocking_sends_unwaited_total{bound="server"}`:    0,
		`channels_store_errors_total{operation="update"}`:               0,
	} {
		if got := metricValue(metrics, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	for _, series := range []string{`channels_wake_queue_depth{state="pending"}`, `channels_executor_turn_duration_seconds_count{executor="echo",outcome="ok"}`,
		`channels_tasks{source="webhook",state=`} {
		if !strings.Contains(metrics, "\n"+series) {
			t.Errorf("no %s in /metrics", series)
		}
	}

	// The admin surface needs the token: Bearer, or Basic for browsers.
	if code, _ := getText(t, base+"/admin", ""); code != http.StatusUnauthorized {
		t.Fatalf("/admin without a token = %d, want 401", code)
	}
	if code, _ := getText(t, base+"/admin/api/evidence", "wrong-token"); code != http.StatusUnauthorized {
		t.Fatalf("/admin/api/evidence with a wrong token = %d, want 401", code)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/admin", nil)
	req.SetBasicAuth("ops", plantedAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), `data-source="webhook"`) || !strings.Contains(string(page), "<svg") {
		t.Fatalf("/admin with Basic auth = %d:\n%.2000s", resp.StatusCode, page)
	}
	code, apiBody := getText(t, base+"/admin/api/evidence?source=webhook&kind=accepted", plantedAdminToken)
	var apiPage operator.EvidencePage
	if code != 200 || json.Unmarshal([]byte(apiBody), &apiPage) != nil || len(apiPage.Evidence) != 3 || apiPage.LastID == 0 {
		t.Fatalf("/admin/api/evidence = %d %s", code, apiBody)
	}
	code, sumBody := getText(t, base+"/admin/api/summary", plantedAdminToken)
	var liveSum operator.Summary
	if code != 200 || json.Unmarshal([]byte(sumBody), &liveSum) != nil {
		t.Fatalf("/admin/api/summary = %d %s", code, sumBody)
	}
	if s := findSource(liveSum, "webhook"); s == nil || s.Health != operator.StatusOK || s.Counts.Accepted != 3 || s.Counts.Malformed != 1 {
		t.Fatalf("live summary of webhook = %+v", s)
	}
	outputs := []string{metrics, string(page), apiBody, sumBody}

	// evidence --follow through the server sees a record committed after it started.
	follower := c.again()
	fctx, cancelFollow := context.WithCancel(context.Background())
	followDone := make(chan int, 1)
	go func() {
		followDone <- follower.run(fctx, "evidence", "--config", cfgPath, "--server", base, "--follow", "--json",
			"--source", "webhook", "--kind", "accepted", "--interval", "100ms", "--limit", "1")
	}()
	waitFor(t, "the follower's first record", func() bool { return strings.Count(follower.stdout.String(), "\n") >= 1 })
	if got := postWebhook(t, base, "deploys", `{"event":{"id":"dep-2","text":"late"},"thread":"t9"}`, plantedDeploysSecret); got != 200 {
		t.Fatalf("late POST = %d", got)
	}
	waitFor(t, "the followed record", func() bool { return strings.Contains(follower.stdout.String(), `:dep-2"`) })
	time.Sleep(300 * time.Millisecond) // more follow reads over the same records
	cancelFollow()
	if code := <-followDone; code != 0 {
		t.Fatalf("evidence --follow exit %d: %s", code, follower.stderr.String())
	}
	// The page (the newest one, --limit 1) and the new record, each once: not the older records
	// the limit left out, and not the page again.
	if followed := ndjson[operator.EvidenceView](t, follower.stdout.String()); len(followed) != 2 {
		t.Fatalf("evidence --follow printed %d records, want the page's one and the new one:\n%s", len(followed), follower.stdout.String())
	}
	outputs = append(outputs, follower.stdout.String())

	if code := stop(); code != 0 {
		t.Fatalf("serve exit %d: %s", code, c.stderr.String())
	}

	// The CLI reads the same store once the server is gone.
	ctx := context.Background()
	ev := c.again()
	if code := ev.run(ctx, "evidence", "--config", cfgPath, "--source", "webhook", "--json", "--limit", "0"); code != 0 {
		t.Fatalf("evidence --json exit %d: %s", code, ev.stderr.String())
	}
	rows := ndjson[operator.EvidenceView](t, ev.stdout.String())
	kinds := map[string]int{}
	for i, r := range rows {
		kinds[r.Kind]++
		if i > 0 && r.ID <= rows[i-1].ID {
			t.Fatalf("evidence not oldest first: %d after %d", r.ID, rows[i-1].ID)
		}
		if r.Source != "webhook" {
			t.Fatalf("--source webhook printed %+v", r)
		}
	}
	// Non-work and rejected are counted in memory and written when the sources stop.
	for kind, want := range map[string]int{"accepted": 4, "duplicate": 1, "non-work": 1, "rejected": 1, "malformed-envelope": 1, "duplicate-conflict": 1} {
		if kinds[kind] != want {
			t.Errorf("evidence kind %s: %d records, want %d (all: %v)", kind, kinds[kind], want, kinds)
		}
	}

	sum := c.again()
	if code := sum.run(ctx, "evidence", "--config", cfgPath, "--summary", "--json"); code != 0 {
		t.Fatalf("evidence --summary exit %d: %s", code, sum.stderr.String())
	}
	var s operator.Summary
	if err := json.Unmarshal([]byte(sum.stdout.String()), &s); err != nil {
		t.Fatalf("summary JSON: %v\n%s", err, sum.stdout.String())
	}
	wh := findSource(s, "webhook")
	if wh == nil || wh.Counts.Accepted != 4 || wh.Counts.Duplicates != 1 || wh.Counts.NonWork != 1 || wh.Counts.Malformed != 1 ||
		wh.Counts.Conflicts != 1 || wh.Counts.Rejected != 1 || wh.Counts.Woken < 4 || wh.LastEvent.IsZero() ||
		strings.Join(wh.Instances, ",") != "ci,deploys" {
		t.Fatalf("summary of webhook = %+v", wh)
	}
	if a2a := findSource(s, "a2a"); a2a == nil || a2a.Counts.Accepted != 1 {
		t.Fatalf("summary of a2a = %+v", a2a)
	}

	list := c.again()
	if code := list.run(ctx, "tasks", "list", "--config", cfgPath, "--source", "webhook", "--json"); code != 0 {
		t.Fatalf("tasks list exit %d: %s", code, list.stderr.String())
	}
	tasks := ndjson[taskRow](t, list.stdout.String())
	principals := map[string]int{}
	for _, r := range tasks {
		principals[r.Principal]++
		if r.Source != "webhook" || r.State != "completed" {
			t.Fatalf("task %+v", r)
		}
	}
	if len(tasks) != 4 || principals["ci-team"] != 2 || principals["ops"] != 2 {
		t.Fatalf("tasks list = %+v", tasks)
	}
	if strings.Contains(list.stdout.String(), plantedBody) {
		t.Fatal("tasks list printed a message body")
	}

	got := c.again()
	if code := got.run(ctx, "tasks", "get", tasks[len(tasks)-1].ID, "--config", cfgPath, "--json"); code != 0 {
		t.Fatalf("tasks get exit %d: %s", code, got.stderr.String())
	}
	var detail struct {
		Principal string `json:"principal"`
		Task      struct {
			ID     string `json:"id"`
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		} `json:"task"`
		Events   []taskEventRow          `json:"events"`
		Evidence []operator.EvidenceView `json:"evidence"`
	}
	if err := json.Unmarshal([]byte(got.stdout.String()), &detail); err != nil || detail.Task.ID != tasks[len(tasks)-1].ID ||
		detail.Task.Status.State != "TASK_STATE_COMPLETED" && detail.Task.Status.State != "completed" || len(detail.Events) < 2 || len(detail.Evidence) < 2 {
		t.Fatalf("tasks get --json = %v\n%s", err, got.stdout.String())
	}
	missing := c.again()
	if code := missing.run(ctx, "tasks", "get", "no-such-task", "--config", cfgPath); code != 3 {
		t.Fatalf("tasks get of a missing task: exit %d, want 3", code)
	}
	bad := c.again()
	if code := bad.run(ctx, "evidence", "--config", cfgPath, "--since", "yesterday"); code != 2 {
		t.Fatalf("evidence --since yesterday: exit %d, want 2", code)
	}

	// The planted secrets appear nowhere; the body not in logs or evidence.
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(os.Getenv("XDG_DATA_HOME"), "channels", "channels.db"))
	if err != nil {
		t.Fatal(err)
	}
	all, err := st.ListEvidence(ctx, store.EvidenceFilter{})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	var evidenceText strings.Builder
	for _, e := range all {
		evidenceText.WriteString(e.Source + " " + e.Kind + " " + e.TaskID + " " + string(e.Detail) + "\n")
	}
	logs := c.stderr.String() + follower.stderr.String()
	outputs = append(outputs, ev.stdout.String(), sum.stdout.String(), list.stdout.String(), got.stdout.String())
	for name, text := range map[string]string{"logs": logs, "evidence": evidenceText.String(), "outputs": strings.Join(outputs, "\n")} {
		for _, secret := range []string{plantedWebhookSecret, plantedAdminToken} {
			if strings.Contains(text, secret) {
				t.Errorf("%s contain the planted secret %q", name, secret)
			}
		}
	}
	for name, text := range map[string]string{"logs": logs, "evidence": evidenceText.String()} {
		if strings.Contains(text, plantedBody) {
			t.Errorf("%s contain the planted message body", name)
		}
	}
}

func findSource(s operator.Summary, name string) *operator.SourceSummary {
	for i := range s.Sources {
		if s.Sources[i].Source == name {
			return &s.Sources[i]
		}
	}
	return nil
}
