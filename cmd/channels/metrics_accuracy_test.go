package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// metricSum sums every sample of name whose label set contains all of labels (`k="v"` strings).
func metricSum(text, name string, labels ...string) float64 {
	sum := 0.0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, lbl, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		match := true
		for _, l := range labels {
			if !strings.Contains(lbl, l) {
				match = false
			}
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

func a2aSend(messageID, text, taskID string, metadata map[string]any, push string) string {
	msg := map[string]any{"messageId": messageID, "role": "ROLE_USER", "parts": []any{map[string]any{"text": text}},
		"extensions": []any{}}
	if taskID != "" {
		msg["taskId"] = taskID
	}
	req := map[string]any{"message": msg}
	if metadata != nil {
		req["metadata"] = metadata
		// Extension data in the metadata: the message lists the extension, which activates it.
		for uri := range metadata {
			msg["extensions"] = append(msg["extensions"].([]any), uri)
		}
	}
	if push != "" {
		req["configuration"] = map[string]any{"taskPushNotificationConfig": map[string]any{"url": push, "token": "tok-0123456789abcdef"}}
	}
	b, _ := json.Marshal(req)
	return string(b)
}

// TestOperatorCountsMatchAScriptedRun drives known numbers of every outcome and asserts each
// metric and summary figure equals its expected count: among them that a blocking send is not an
// SSE stream in channels_sse_subscribers, that a settling send is one a2a intake event (settled)
// with its acceptance timed, and that the text summary shows the rejected, settled and windowed
// delivery figures the summary's counts carry.
func TestOperatorCountsMatchAScriptedRun(t *testing.T) {
	// Callback receivers: ci's answers 503 to each delivery's first call, then 200 with an id
	// (one retry per delivery); deploys' refuses every call with 400 (failed for good).
	var mu sync.Mutex
	ciCalls := map[string]int{}
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("X-Channels-Delivery")
		mu.Lock()
		ciCalls[id]++
		n := ciCalls[id]
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"r-%s"}`, id)
	}))
	defer flaky.Close()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusBadRequest)
	}))
	defer refusing.Close()
	// Push receiver: the first POST of each notification id answers 503, the next 200.
	pushCalls := map[string]int{}
	pushOK := map[string]bool{}
	pushHook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("A2A-Notification-Id")
		mu.Lock()
		pushCalls[id]++
		first := pushCalls[id] == 1
		if !first {
			pushOK[id] = true
		}
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer pushHook.Close()

	storeLine := ""
	if os.Getenv("TEST_DATABASE_URL") != "" {
		storeLine = "store: " + storetest.PostgresURL(t) + "\n" // a fresh schema of the test's own
	}
	yaml := storeLine + `admin_token_env: TEST_ADMIN_TOKEN
executor: conformance
message_id_dedupe: "on"
push_allow_private_networks: true
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
      callback: ` + flaky.URL + `/cb
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
      callback: ` + refusing.URL + `/cb
`
	c, cfgPath := operatorCLI(t, yaml)
	base, stop := startServe(t, c, "--config", cfgPath)
	scrape := func() string {
		_, m := getText(t, base+"/metrics", plantedAdminToken)
		return m
	}

	// --- webhook intake: 3 accepted, 1 duplicate, 1 non-work, 1 malformed, 1 rejected, 1 conflict.
	ev := func(id, text string) string {
		return `{"event":{"id":"` + id + `","text":"` + text + `"},"thread":"t1"}`
	}
	for _, step := range []struct {
		instance, body, secret string
		want                   int
	}{
		{"ci", ev("ev-1", "one"), plantedWebhookSecret, 200},
		{"ci", ev("ev-1", "one"), plantedWebhookSecret, 200},
		{"ci", ev("ev-2", "two"), plantedWebhookSecret, 200},
		{"ci", `{"event":{"id":"p1","type":"ping","text":"x"},"thread":"t1"}`, plantedWebhookSecret, 200},
		{"ci", `{"event":{"id":"ev-3"}}`, plantedWebhookSecret, 400},
		{"ci", ev("ev-4", "forged"), "not-the-secret-at-all", 401},
		{"ci", ev("ev-1", "a different body"), plantedWebhookSecret, 409},
		{"deploys", ev("dep-1", "deploy 42 failed"), plantedDeploysSecret, 200},
	} {
		if got := postWebhook(t, base, step.instance, step.body, step.secret); got != step.want {
			t.Fatalf("POST %s %s = %d, want %d", step.instance, step.body, got, step.want)
		}
	}

	// --- A2A intake.
	send := func(body string) (int, map[string]any) { return post(t, base+"/message:send", "", body) }
	if code, r := send(a2aSend("tck-complete-task-a1", "one", "", nil, "")); code != 200 || dig(r, "task", "status", "state") != "TASK_STATE_COMPLETED" {
		t.Fatalf("a1: %d %v", code, r)
	}
	_, r1 := send(a2aSend("tck-complete-task-a1", "one", "", nil, ""))
	a1, _ := dig(r1, "task", "id").(string)
	if code, r := send(a2aSend("tck-complete-task-a1", "CHANGED", "", nil, "")); code < 400 {
		t.Fatalf("conflict: %d %v", code, r)
	}
	code, r2 := send(a2aSend("tck-input-required-a2", "ask", "", nil, ""))
	a2, _ := dig(r2, "task", "id").(string)
	if code != 200 || dig(r2, "task", "status", "state") != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("a2: %d %v", code, r2)
	}

	// One SSE stream open on a2.
	req, _ := http.NewRequest(http.MethodGet, base+"/tasks/"+a2+":subscribe", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("subscribe: %v %v", err, resp)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if strings.HasPrefix(line, "data:") {
			break
		}
	}
	// A stream holds its slot from its admission, so it is counted already.
	if got := metricSum(scrape(), "channels_a2a_streams_open"); got != 1 {
		t.Errorf("channels_a2a_streams_open with one stream open = %v, want 1", got)
	}
	if got := metricSum(scrape(), "channels_sse_subscribers"); got != 1 {
		// The first event is written before Follow subscribes: a short window reads 0.
		t.Logf("channels_sse_subscribers right after the stream's first event = %v (want 1)", got)
	}
	waitFor(t, "the open stream in the gauge", func() bool { return metricSum(scrape(), "channels_sse_subscribers") == 1 })
	// Continue a2 (continued), which completes it and ends the stream.
	if code, r := send(a2aSend("tck-complete-task-a3", "answer", a2, nil, "")); code != 200 {
		t.Fatalf("continuation: %d %v", code, r)
	}
	_, _ = io.Copy(io.Discard, br)
	resp.Body.Close()
	waitFor(t, "the stream's subscription to close", func() bool { return metricSum(scrape(), "channels_sse_subscribers") == 0 })
	waitFor(t, "the stream's slot to come back", func() bool { return metricSum(scrape(), "channels_a2a_streams_open") == 0 })

	// A settlement of the finished a1 through A2A: one more A2A event taken in.
	settle := map[string]any{"https://channels.dev/a2a/ext/outfitter-task/v1": map[string]any{"outcome": "accepted"}}
	if code, r := send(a2aSend("settle-a4", "good", a1, settle, "")); code != 200 {
		t.Fatalf("settlement: %d %v", code, r)
	}
	// Its resend: a duplicate of the settlement.
	if code, r := send(a2aSend("settle-a4", "good", a1, settle, "")); code != 200 {
		t.Fatalf("settlement resend: %d %v", code, r)
	}

	// A push notification config on p1: its notifications are deliveries (source a2a-push), each
	// retried once.
	if code, r := send(a2aSend("tck-complete-task-p1", "push me", "", nil, pushHook.URL+"/hook")); code != 200 {
		t.Fatalf("p1: %d %v", code, r)
	}
	// A rejected turn (executor error).
	if code, r := send(a2aSend("tck-reject-task-r1", "no", "", nil, "")); code != 200 {
		t.Fatalf("r1: %d %v", code, r)
	}

	// A blocking send waiting on a task that completes after 2 s: no SSE stream is open.
	blockDone := make(chan struct{})
	go func() {
		defer close(blockDone)
		send(a2aSend("tck-delayed-complete-b1", "slow", "", nil, ""))
	}()
	time.Sleep(700 * time.Millisecond)
	if got := metricSum(scrape(), "channels_sse_subscribers"); got != 0 {
		t.Errorf("channels_sse_subscribers while a blocking (non-streaming) message:send waits = %v, want 0 (no SSE stream is open)", got)
	}
	<-blockDone

	// Deliveries settle: ci's 2 answers delivered after one retry each, deploys' 1 failed,
	// every push notification delivered after one retry.
	var metrics string
	waitFor(t, "deliveries to settle", func() bool {
		metrics = scrape()
		mu.Lock()
		np := len(pushOK)
		mu.Unlock()
		return metricSum(metrics, "channels_evidence_records_total", `kind="delivery-delivered"`, `source="webhook"`) >= 2 &&
			metricSum(metrics, "channels_evidence_records_total", `kind="delivery-failed"`, `source="webhook"`) >= 1 &&
			np >= 3 && metricSum(metrics, "channels_evidence_records_total", `kind="delivery-delivered"`, `source="a2a-push"`) >= float64(np)
	})
	time.Sleep(6 * time.Second) // past the store gauges' 5 s cache
	metrics = scrape()
	mu.Lock()
	nPush := float64(len(pushOK))
	mu.Unlock()

	in := func(src, disp string) float64 {
		return metricSum(metrics, "channels_intake_events_total", `source="`+src+`"`, `disposition="`+disp+`"`)
	}
	rec := func(src, kind string) float64 {
		return metricSum(metrics, "channels_evidence_records_total", `source="`+src+`"`, `kind="`+kind+`"`)
	}
	check := func(what string, got, want float64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check(`intake{webhook,accepted}`, in("webhook", "accepted"), 3)
	check(`intake{webhook,duplicate}`, in("webhook", "duplicate"), 1)
	check(`intake{webhook,duplicate-conflict}`, in("webhook", "duplicate-conflict"), 1)
	check(`intake{webhook,malformed-envelope}`, in("webhook", "malformed-envelope"), 1)
	check(`intake{a2a,accepted}`, in("a2a", "accepted"), 5)
	check(`intake{a2a,continued}`, in("a2a", "continued"), 1)
	check(`intake{a2a,duplicate}`, in("a2a", "duplicate"), 2)
	check(`intake{a2a,duplicate-conflict}`, in("a2a", "duplicate-conflict"), 1)
	check(`intake{a2a,settled} (the settlement of a1)`, in("a2a", "settled"), 1)
	check(`intake{a2a} over all dispositions (8 A2A sends + a settlement and its resend = 10 events)`,
		metricSum(metrics, "channels_intake_events_total", `source="a2a"`), 10)
	// Deliveries: by evidence, then by state gauge.
	check(`evidence{webhook,delivery-delivered}`, rec("webhook", "delivery-delivered"), 2)
	check(`evidence{webhook,delivery-failed}`, rec("webhook", "delivery-failed"), 1)
	check(`evidence{a2a-push,delivery-delivered}`, rec("a2a-push", "delivery-delivered"), nPush)
	check(`evidence{a2a-push,push-registered}`, rec("a2a-push", "push-registered"), 1)
	check(`channels_deliveries{webhook,delivered}`, metricSum(metrics, "channels_deliveries", `source="webhook"`, `state="delivered"`), 2)
	check(`channels_deliveries{webhook,failed}`, metricSum(metrics, "channels_deliveries", `source="webhook"`, `state="failed"`), 1)
	check(`channels_deliveries{a2a-push,delivered}`, metricSum(metrics, "channels_deliveries", `source="a2a-push"`, `state="delivered"`), nPush)
	// Turns: every woken offer is one executor turn.
	woken := rec("a2a", "woken") + rec("webhook", "woken")
	turns := metricSum(metrics, "channels_executor_turn_duration_seconds_count", `executor="conformance"`)
	check(`turn histogram count vs woken evidence`, turns, woken)
	check(`woken{webhook}`, rec("webhook", "woken"), 3)
	check(`woken{a2a} (a1, a2, a3, p1, r1, b1)`, rec("a2a", "woken"), 6)
	check(`turn outcome=error (r1)`, metricSum(metrics, "channels_executor_turn_duration_seconds_count", `outcome="error"`), 1)
	check(`channels_tasks{a2a}`, metricSum(metrics, "channels_tasks", `source="a2a"`), 5)
	check(`channels_tasks{webhook}`, metricSum(metrics, "channels_tasks", `source="webhook"`), 3)
	check(`channels_sse_subscribers`, metricSum(metrics, "channels_sse_subscribers"), 0)
	check(`channels_store_errors_total`, metricSum(metrics, "channels_store_errors_total"), 0)
	check(`channels_accept_duration_seconds_count{a2a} (one per acceptance transaction: 10)`,
		metricSum(metrics, "channels_accept_duration_seconds_count", `source="a2a"`), 10)

	// The live summary must agree with the metrics.
	_, sumBody := getText(t, base+"/admin/api/summary", plantedAdminToken)
	var live operator.Summary
	if err := json.Unmarshal([]byte(sumBody), &live); err != nil {
		t.Fatalf("summary: %v %s", err, sumBody)
	}
	wl, al, pl := findSource(live, "webhook"), findSource(live, "a2a"), findSource(live, "a2a-push")
	if wl == nil || al == nil || pl == nil {
		t.Fatalf("live summary sources: %s", sumBody)
	}
	check("live webhook accepted", float64(wl.Counts.Accepted), 3)
	check("live webhook duplicates", float64(wl.Counts.Duplicates), 1)
	check("live webhook conflicts", float64(wl.Counts.Conflicts), 1)
	check("live webhook malformed", float64(wl.Counts.Malformed), 1)
	check("live webhook woken", float64(wl.Counts.Woken), rec("webhook", "woken"))
	check("live webhook delivered", float64(wl.Counts.Delivered), 2)
	check("live webhook deliveryFailed", float64(wl.Counts.DeliveryFail), 1)
	check("live webhook deliveries[delivered]", float64(wl.Deliveries["delivered"]), 2)
	check("live webhook deliveries[failed]", float64(wl.Deliveries["failed"]), 1)
	check("live a2a accepted", float64(al.Counts.Accepted), 5)
	check("live a2a continued", float64(al.Counts.Continued), 1)
	check("live a2a duplicates", float64(al.Counts.Duplicates), 2)
	check(`evidence{a2a,settled}`, rec("a2a", "settled"), 1)
	check("live a2a settled", float64(al.Counts.Settled), 1)
	check("live a2a conflicts", float64(al.Counts.Conflicts), 1)
	check("live a2a woken", float64(al.Counts.Woken), rec("a2a", "woken"))
	check("live a2a-push delivered", float64(pl.Counts.Delivered), nPush)
	check("live a2a-push deliveries[delivered]", float64(pl.Deliveries["delivered"]), nPush)
	t.Logf("push notifications delivered: %v (calls %v); ci callback calls %v", nPush, pushCalls, ciCalls)

	if code := stop(); code != 0 {
		t.Fatalf("serve exit %d: %s", code, c.stderr.String())
	}
	ctx := context.Background()
	// After the stop: the counted kinds are written.
	sum := c.again()
	if code := sum.run(ctx, "evidence", "--config", cfgPath, "--summary", "--json"); code != 0 {
		t.Fatalf("summary exit %d: %s", code, sum.stderr.String())
	}
	var s operator.Summary
	if err := json.Unmarshal([]byte(sum.stdout.String()), &s); err != nil {
		t.Fatal(err)
	}
	wh := findSource(s, "webhook")
	check("cli webhook nonWork", float64(wh.Counts.NonWork), 1)
	check("cli webhook rejected", float64(wh.Counts.Rejected), 1)
	check("cli webhook accepted", float64(wh.Counts.Accepted), 3)
	check("cli webhook delivered", float64(wh.Counts.Delivered), 2)
	check("cli webhook deliveryFailed", float64(wh.Counts.DeliveryFail), 1)
	text := c.again()
	if code := text.run(ctx, "evidence", "--config", cfgPath, "--summary"); code != 0 {
		t.Fatalf("summary exit %d: %s", code, text.stderr.String())
	}
	t.Logf("text summary:\n%s", text.stdout.String())
	for _, col := range []string{"REJECTED", "SETTLED", "DELIVERED", "DELIVERY FAILED", "AMBIGUOUS", "DELIVERIES NOW"} {
		if !strings.Contains(text.stdout.String(), col) {
			t.Errorf("the text summary has no %s column (Counts has the figure)", col)
		}
	}
}
