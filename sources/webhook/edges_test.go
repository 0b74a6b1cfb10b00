package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/sources/sourcetest"
	"github.com/channels-dev/channels/sources/webhook"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// edgeEndpoint runs the "ci" webhook of alice on SQLite and returns its URL and plane.
func edgeEndpoint(t *testing.T, opts map[string]any) (string, *taskplane.Plane) {
	t.Helper()
	plane := taskplane.New(storetest.OpenSQLite(t))
	sink, err := sources.NewSink(plane, webhook.Name, sources.ForPrincipal("alice"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	ep := src.(sources.Endpoint)
	mux := http.NewServeMux()
	mux.Handle(ep.Pattern(), ep)
	srv := httptest.NewServer(mux)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sources.Run(ctx, src, sink) }()
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	deadline := time.Now().Add(5 * time.Second)
	for src.(sources.HealthChecker).Health(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("source did not start")
		}
		time.Sleep(time.Millisecond)
	}
	return srv.URL + "/sources/webhook/ci", plane
}

// Invariant 4: "An anchor that fails any condition makes a new Task, never a rejection." A
// reply_to that no anchor can match (it holds a NUL) must not cost the event its work.
func TestUnmatchableReplyToMakesANewTask(t *testing.T) {
	url, plane := edgeEndpoint(t, options(""))
	body := []byte(`{"event": {"id": "e1", "text": "here is my answer"}, "repo": "r", "thread": "t", "in_reply_to": "q\u00001"}`)
	resp, err := post(url, body, time.Now(), secret)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("answer %d %s, want 200 and a new task", resp.StatusCode, b)
	}
	page, err := plane.ListTasks(context.Background(), "alice", taskplane.ListQuery{})
	if err != nil || page.TotalSize != 1 {
		t.Fatalf("tasks = %d, %v; want 1", page.TotalSize, err)
	}
}

// A callback receiver's id is stored as a reply anchor key. An id no store can hold (a NUL;
// Postgres refuses it with SQLSTATE 22021) must be refused as ErrInvalid on every driver, as the
// task plane refuses every other unstorable key (storableKey), so that the delivery engine records
// delivery-anchor-refused evidence instead of failing the transaction that marks the question
// delivered.
func TestUnstorableReceiptIDIsRefusedAsInvalid(t *testing.T) {
	url, plane := edgeEndpoint(t, options(""))
	resp, err := post(url, []byte(`{"event": {"id": "e1", "text": "hi"}, "repo": "r", "thread": "t"}`), time.Now(), secret)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("intake: %v %v", resp.Status, err)
	}
	page, err := plane.ListTasks(context.Background(), "alice", taskplane.ListQuery{})
	if err != nil || len(page.Tasks) != 1 {
		t.Fatalf("tasks: %v %v", page.TotalSize, err)
	}
	taskID := page.Tasks[0].ID
	err = plane.Store().Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return sources.RecordAnchorTx(ctx, tx, "alice", webhook.Name, "ci:a\x00b", taskID, 0, time.Now())
	})
	if !errors.Is(err, taskplane.ErrInvalid) {
		t.Fatalf("RecordAnchorTx with a NUL provider id = %v, want ErrInvalid", err)
	}
}

// Two different event ids must never be taken for one event. encoding/json decodes bytes that are
// not UTF-8 (a Latin-1 sender's "caf\xe9" and "caf\xe8") and lone surrogate escapes ("\ud800",
// "\udbff", which a JavaScript sender writes for a string cut inside a surrogate pair) all as
// U+FFFD: the second event, a different one, is answered "duplicate" with the first event's task
// and makes no task of its own.
func TestIdsThatAreNotUTF8DoNotCollide(t *testing.T) {
	for name, ids := range map[string][2]string{
		"bytes that are not UTF-8": {"caf\xe9", "caf\xe8"},
		"lone surrogate escapes":   {`build-\ud800`, `build-\udbff`},
	} {
		t.Run(name, func(t *testing.T) {
			url, plane := edgeEndpoint(t, options(""))
			var outcomes []string
			for _, id := range ids {
				body := []byte(`{"event": {"id": "` + id + `", "text": "deploy failed"}, "repo": "r", "thread": "t"}`)
				resp, err := post(url, body, time.Now(), secret)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				outcomes = append(outcomes, fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(b)))
			}
			page, err := plane.ListTasks(context.Background(), "alice", taskplane.ListQuery{})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(outcomes[1], `"outcome":"duplicate"`) || (page.TotalSize == 1 && strings.HasPrefix(outcomes[1], "200")) {
				t.Fatalf("two different event ids: answers %q, %d task(s); the second event was taken for the first", outcomes, page.TotalSize)
			}
		})
	}
}

// A sender that gives up waiting does not abandon the acceptance under way: with a store slower
// than the sender's deadline, the event still becomes a task, and the sender's retry is answered
// as a duplicate of it. (Abandoned, every retry would meet the same store and the event would be
// lost.)
func TestASenderThatHangsUpDoesNotAbandonTheAcceptance(t *testing.T) {
	st := &sourcetest.SlowStore{Store: storetest.OpenSQLite(t)}
	src, plane, _ := runningWebhookOn(t, st)
	srv := httptest.NewServer(src)
	defer srv.Close()

	st.Delay.Store(int64(500 * time.Millisecond))
	body := []byte(`{"event":{"id":"e-slow","text":"hello"},"repo":"r","thread":"1"}`)
	req, err := signed(srv.URL, body, time.Now(), secret)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := (&http.Client{Timeout: 100 * time.Millisecond}).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the sender was answered %s before the store took the event", resp.Status)
	}
	sourcetest.WaitForTasks(t, plane, "alice", 1) // the event the sender gave up on
	st.Delay.Store(0)
	resp, err := post(srv.URL, body, time.Now(), secret)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"outcome":"duplicate"`) {
		t.Fatalf("the retry: %s %s, want 200 duplicate", resp.Status, b)
	}
}
