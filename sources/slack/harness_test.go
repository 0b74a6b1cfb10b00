package slack_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/sources"
	slacksrc "github.com/channels-dev/channels/sources/slack"
	"github.com/channels-dev/channels/sources/sourcetest"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// harness runs one instance against a real SQLite store, with the workspace and the transport of
// its mode, and records what the sink accepted.
type harness struct {
	t     *testing.T
	w     *workspace
	tr    transport
	plane *taskplane.Plane
	sink  *sources.Sink
	src   sources.Source

	mu       sync.Mutex
	accepted []taskplane.Acceptance
}

// forEachMode runs fn once per intake mode.
func forEachMode(t *testing.T, fn func(t *testing.T, mode string)) {
	for _, mode := range []string{slacksrc.ModeEvents, slacksrc.ModeSocket} {
		t.Run(mode, func(t *testing.T) { fn(t, mode) })
	}
}

func newHarness(t *testing.T, mode string, edit func(opts map[string]any)) *harness {
	h := &harness{t: t, w: newWorkspace(t)}
	if mode == slacksrc.ModeSocket {
		h.tr = newSocketDriver(t, h.w)
	} else {
		h.tr = newEventsDriver(t, h.w)
	}
	if edit != nil {
		edit(h.tr.options())
	}
	h.plane = taskplane.New(storetest.OpenSQLite(t))
	sink, err := sources.NewSink(h.plane, slacksrc.Name, sources.WithObserver(func(_ sources.Event, acc taskplane.Acceptance, err error) {
		if err == nil {
			h.mu.Lock()
			h.accepted = append(h.accepted, acc)
			h.mu.Unlock()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	h.sink = sink
	h.src = h.tr.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sources.Run(ctx, h.src, sink) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return within 10s of its context ending")
		}
	})
	h.waitHealthy()
	return h
}

func (h *harness) waitHealthy() {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := h.src.(sources.HealthChecker).Health(context.Background())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("never healthy: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// deliver sends a payload of kind ("events", "interactive") and checks the answer is want.
func (h *harness) deliver(kind string, payload obj, want sourcetest.Ack, header http.Header) {
	h.t.Helper()
	if got := h.tr.deliver(h.t, kind, payload, header); got != want {
		h.t.Fatalf("deliver %s %v: answered %s, want %s", kind, payload["type"], got, want)
	}
}

// work delivers a payload that must be accepted and returns its acceptance.
func (h *harness) work(kind string, payload obj) taskplane.Acceptance {
	h.t.Helper()
	h.mu.Lock()
	before := len(h.accepted)
	h.mu.Unlock()
	h.deliver(kind, payload, sourcetest.Acked, nil)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.accepted) != before+1 {
		h.t.Fatalf("deliver %s: %d acceptances, want 1", kind, len(h.accepted)-before)
	}
	return h.accepted[len(h.accepted)-1]
}

func (h *harness) acceptances() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.accepted)
}

func (h *harness) tasks() []*taskplane.Task {
	h.t.Helper()
	page, err := h.plane.ListTasks(context.Background(), principal, taskplane.ListQuery{PageSize: 100})
	if err != nil {
		h.t.Fatal(err)
	}
	return page.Tasks
}

func (h *harness) task(id string) *taskplane.Task {
	h.t.Helper()
	t, err := h.plane.GetTask(context.Background(), principal, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return t
}

// counted flushes the sink and sums counted evidence of kind by reason.
func (h *harness) counted(kind string) map[string]int64 {
	h.t.Helper()
	if err := h.sink.Flush(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	c, err := sources.CountByReason(context.Background(), h.plane.Store(),
		store.EvidenceFilter{Principal: principal, Source: slacksrc.Name, Kind: kind})
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (h *harness) evidence(kind string) []store.Evidence {
	h.t.Helper()
	ev, err := h.plane.Store().ListEvidence(context.Background(), store.EvidenceFilter{Principal: principal, Source: slacksrc.Name, Kind: kind})
	if err != nil {
		h.t.Fatal(err)
	}
	return ev
}

// ask moves a task to INPUT_REQUIRED with q, sends q through the source's Sender as a question,
// records its anchor as the delivery engine does, and returns the posted message.
func (h *harness) ask(taskID string, q taskplane.Message) (sources.Receipt, message) {
	h.t.Helper()
	ctx := context.Background()
	task, err := h.plane.Apply(ctx, principal, taskID, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateInputRequired, Message: &q})
	if err != nil {
		h.t.Fatal(err)
	}
	rc, err := h.src.(sources.Sender).Send(ctx, sources.Delivery{ID: "d-" + q.ID, Principal: principal, TaskID: task.ID,
		ContextID: task.ContextID, Operation: slacksrc.OpQuestion, State: task.Status.State, Locator: task.Origin.Locator, Message: q})
	if err != nil {
		h.t.Fatalf("send the question: %v", err)
	}
	if err := h.sink.RecordAnchor(ctx, principal, rc.ProviderID, task.ID); err != nil {
		h.t.Fatal(err)
	}
	var loc slacksrc.Locator
	mustUnmarshal(h.t, task.Origin.Locator, &loc)
	for _, m := range h.w.posted(loc.Channel) {
		if slacksrc.AnchorID(loc.Channel, m.TS) == rc.ProviderID {
			return rc, m
		}
	}
	h.t.Fatalf("the question %s was not posted", rc.ProviderID)
	return rc, message{}
}
