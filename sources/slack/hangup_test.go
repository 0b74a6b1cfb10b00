package slack_test

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/channels-dev/channels/sources"
	slacksrc "github.com/channels-dev/channels/sources/slack"
	"github.com/channels-dev/channels/sources/sourcetest"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// Slack hangs up on a request after 3 s and retries it. An acceptance under way when it hangs up
// is not abandoned: with a store slower than Slack's deadline the event still becomes a task, and
// the retry is acknowledged as its duplicate. (Abandoned, every retry would meet the same store,
// and the event would be lost.)
func TestAnAcceptanceOutlivesSlackHangingUp(t *testing.T) {
	w := newWorkspace(t)
	d := newEventsDriver(t, w)
	st := &sourcetest.SlowStore{Store: storetest.OpenSQLite(t)}
	plane := taskplane.New(st)
	sink, err := sources.NewSink(plane, slacksrc.Name)
	if err != nil {
		t.Fatal(err)
	}
	src := d.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sources.Run(ctx, src, sink) }()
	t.Cleanup(func() { cancel(); <-done })
	(&harness{t: t, src: src}).waitHealthy()

	b := body("events", callback("Ev-SLOW", mention("ops", "Ev-SLOW", "deploy")))
	post := func(client *http.Client, retry int) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPost, d.url("events"), bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("X-Slack-Signature", sign(signing, now, b))
		if retry > 0 {
			req.Header.Set("X-Slack-Retry-Num", strconv.Itoa(retry))
			req.Header.Set("X-Slack-Retry-Reason", "http_timeout")
		}
		return client.Do(req)
	}
	// Slack's deadline, scaled down with the store's delay.
	st.Delay.Store(int64(500 * time.Millisecond))
	if resp, err := post(&http.Client{Timeout: 100 * time.Millisecond}, 0); err == nil {
		resp.Body.Close()
		t.Fatalf("Slack was answered %s before the store took the event", resp.Status)
	}
	sourcetest.WaitForTasks(t, plane, principal, 1) // the event Slack hung up on
	st.Delay.Store(0)
	resp, err := post(http.DefaultClient, 1)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	page, err := plane.ListTasks(context.Background(), principal, taskplane.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || len(page.Tasks) != 1 {
		t.Fatalf("the retry: %s, %d tasks; want 200 and the one task", resp.Status, len(page.Tasks))
	}
}
