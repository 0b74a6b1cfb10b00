package sources_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// flakyStore is the real store whose Update fails while down is set.
type flakyStore struct {
	store.Store
	mu   sync.Mutex
	down bool
}

func (f *flakyStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		return errors.New("store down")
	}
	return f.Store.Update(ctx, fn)
}

func (f *flakyStore) set(down bool) { f.mu.Lock(); f.down = down; f.mu.Unlock() }

func newSink(t *testing.T, opts ...sources.SinkOption) (*sources.Sink, *flakyStore) {
	t.Helper()
	st := &flakyStore{Store: storetest.OpenSQLite(t)}
	sink, err := sources.NewSink(taskplane.New(st), "webhook", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return sink, st
}

func counts(t *testing.T, st store.Store, kind string) (map[string]int64, int) {
	t.Helper()
	rows, err := st.ListEvidence(context.Background(), store.EvidenceFilter{Kind: kind})
	if err != nil {
		t.Fatal(err)
	}
	c, err := sources.CountByReason(context.Background(), st, store.EvidenceFilter{Kind: kind})
	if err != nil {
		t.Fatal(err)
	}
	return c, len(rows)
}

func TestNonWorkIsABoundedCounter(t *testing.T) {
	ctx := context.Background()
	sink, st := newSink(t, sources.WithCountWindow(time.Hour))
	for i := 0; i < 1000; i++ {
		if err := sink.NonWork(ctx, "alice", "own-bot", nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 300; i++ {
		sink.Rejected(ctx, "alice", fmt.Sprint("reason-", i))
	}
	if err := sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c, rows := counts(t, st, sources.EvidenceNonWork)
	if rows != 1 || c["own-bot"] != 1000 {
		t.Fatalf("non-work: %d rows, counts %v; want one row counting 1000", rows, c)
	}
	c, rows = counts(t, st, sources.EvidenceRejected)
	var total int64
	for _, n := range c {
		total += n
	}
	if total != 300 || rows > 256 || c["other"] == 0 {
		t.Fatalf("rejected: %d rows, total %d, other %d; want at most 256 rows, 300 counted, the excess as other", rows, total, c["other"])
	}
}

func TestCountsAreWrittenWhenTheWindowEnds(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	sink, st := newSink(t, sources.WithClock(clock), sources.WithCountWindow(time.Minute))
	_ = sink.NonWork(ctx, "alice", "ping", nil)
	if _, rows := counts(t, st, sources.EvidenceNonWork); rows != 0 {
		t.Fatalf("rows before the window ended = %d", rows)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	_ = sink.NonWork(ctx, "alice", "ping", nil)
	if c, rows := counts(t, st, sources.EvidenceNonWork); rows != 1 || c["ping"] != 2 {
		t.Fatalf("after the window: %d rows %v, want one row counting 2", rows, c)
	}
}

func TestFlushKeepsCountsWhileTheStoreIsDown(t *testing.T) {
	ctx := context.Background()
	sink, st := newSink(t)
	sink.Rejected(ctx, "alice", "bad-signature")
	st.set(true)
	if err := sink.Flush(ctx); err == nil {
		t.Fatal("Flush with the store down succeeded")
	}
	sink.Rejected(ctx, "alice", "bad-signature")
	st.set(false)
	if err := sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if c, _ := counts(t, st, sources.EvidenceRejected); c["bad-signature"] != 2 {
		t.Fatalf("counts = %v, want 2 bad-signature", c)
	}
}

func TestMalformedFailsWhenItCannotBeRecorded(t *testing.T) {
	ctx := context.Background()
	sink, st := newSink(t)
	st.set(true)
	if err := sink.Malformed(ctx, "alice", "invalid JSON", nil, nil); err == nil {
		t.Fatal("Malformed reported success with the store down: the source would settle an unrecorded envelope")
	}
	st.set(false)
	if err := sink.Malformed(ctx, "alice", "invalid JSON", nil, map[string]any{"bytes": 12}); err != nil {
		t.Fatal(err)
	}
	if _, rows := counts(t, st, sources.EvidenceMalformed); rows != 1 {
		t.Fatalf("malformed rows = %d, want 1", rows)
	}
}

// An invalid event is settled (acknowledged) only once its malformed evidence is written: with
// the store down, its error is not Permanent, so the source leaves it for a redelivery.
func TestInvalidEventIsNotSettledUntilRecorded(t *testing.T) {
	ctx := context.Background()
	sink, st := newSink(t)
	ev := sources.Event{Principal: "alice", Identity: strings.Repeat("x", taskplane.MaxIdentityLen+1), ConversationKey: "c",
		Message: taskplane.Message{ID: "m", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("x")}}}
	st.set(true)
	_, err := sink.Accept(ctx, ev)
	if err == nil || sources.Permanent(err) {
		t.Fatalf("invalid event with the store down: %v (Permanent %v), want an error that is not Permanent", err, sources.Permanent(err))
	}
	st.set(false)
	_, err = sink.Accept(ctx, ev)
	if !sources.Permanent(err) {
		t.Fatalf("invalid event with the store up: %v, want a Permanent error", err)
	}
	if _, rows := counts(t, st, sources.EvidenceMalformed); rows != 1 {
		t.Fatalf("malformed evidence rows = %d, want 1", rows)
	}
}

func TestSinkClearsIDsTheMessageCarries(t *testing.T) {
	ctx := context.Background()
	sink, _ := newSink(t)
	msg := func(id string) taskplane.Message {
		return taskplane.Message{ID: id, Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("x")}}
	}
	first, err := sink.Accept(ctx, sources.Event{Principal: "alice", Identity: "e1", ConversationKey: "c", Message: msg("e1")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Plane().Apply(ctx, "alice", first.Task.ID, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateInputRequired}); err != nil {
		t.Fatal(err)
	}
	m := msg("e2")
	m.TaskID, m.ContextID, m.ReferenceTaskIDs = first.Task.ID, first.ContextID, []string{first.Task.ID}
	second, err := sink.Accept(ctx, sources.Event{Principal: "alice", Identity: "e2", ConversationKey: "other", Message: m})
	if err != nil {
		t.Fatal(err)
	}
	if second.Outcome != taskplane.Created || second.Task.ID == first.Task.ID || second.ContextID == first.ContextID {
		t.Fatalf("a message carrying another task's ids: %+v", second)
	}
	if h := second.Task.History[0]; h.TaskID != second.Task.ID || len(h.ReferenceTaskIDs) != 0 {
		t.Fatalf("history keeps the body's ids: %+v", h)
	}
}

func TestPermanentTellsSettledErrorsFromRetries(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&taskplane.ConflictError{Source: "webhook", Identity: "e"}, true},
		{fmt.Errorf("accept: %w", taskplane.ErrInvalid), true},
		{taskplane.ErrClaimPending, false},
		{errors.New("store down"), false},
	} {
		if got := sources.Permanent(tc.err); got != tc.want {
			t.Errorf("Permanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// registryRuns makes TestRegistry's names unique per run: the registry is global, and the test
// may run more than once in one process (-count).
var registryRuns atomic.Int32

func TestRegistry(t *testing.T) {
	f := func(sources.Config) (sources.Source, error) { return nil, errors.New("unused") }
	prefix := fmt.Sprintf("zz-%d-test-", registryRuns.Add(1))
	a, b := prefix+"a", prefix+"b"
	sources.Register(b, f)
	sources.Register(a, f)
	names := sources.Names()
	if i, j := indexOf(names, a), indexOf(names, b); i < 0 || j != i+1 {
		t.Fatalf("Names() = %v, want sorted", names)
	}
	mustPanic(t, "duplicate", func() { sources.Register(a, f) })
	mustPanic(t, "nil factory", func() { sources.Register(prefix+"c", nil) })
	if _, err := sources.New(a, sources.Config{}); err == nil {
		t.Fatal("New of a source without a matrix row succeeded")
	}
	if _, err := sources.New("not-registered", sources.Config{}); err == nil {
		t.Fatal("New of an unregistered source succeeded")
	}
	if _, err := sources.NewSink(taskplane.New(storetest.OpenSQLite(t)), a); err == nil {
		t.Fatal("NewSink of a source without a matrix row succeeded")
	}
}

func TestConfigDecodeRefusesUnknownOptions(t *testing.T) {
	var v struct {
		Path   string `json:"path"`
		Secret string `json:"secret"`
	}
	if err := (sources.Config{Options: map[string]any{"path": "a.b"}}).Decode(&v); err != nil || v.Path != "a.b" {
		t.Fatalf("Decode = %v, %+v", err, v)
	}
	if err := (sources.Config{Options: map[string]any{"pth": "a.b"}}).Decode(&v); err == nil {
		t.Fatal("an unknown option was accepted")
	}
	// Option names are case-sensitive: "Path" is not "path" (encoding/json alone would take it,
	// and of "path" and "PATH" together keep one).
	for _, opts := range []map[string]any{{"Path": "a.b"}, {"path": "a", "PATH": "b"}, {"\u017fecret": "hunter2"}} {
		if err := (sources.Config{Options: opts}).Decode(&v); err == nil || !strings.Contains(err.Error(), "case-sensitive") {
			t.Errorf("options %v: Decode = %v, want a refusal", opts, err)
		}
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func mustPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	fn()
}

// countingSource counts one non-work event, then waits for the end.
type countingSource struct{ started chan struct{} }

func (c countingSource) Name() string { return "webhook" }

func (c countingSource) Run(ctx context.Context, sink *sources.Sink) error {
	_ = sink.NonWork(ctx, "alice", "ping", nil)
	close(c.started)
	<-ctx.Done()
	return ctx.Err()
}

func TestRunWritesTheLastCountsWhenTheSourceStops(t *testing.T) {
	sink, st := newSink(t, sources.WithCountWindow(time.Hour))
	src := countingSource{started: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sources.Run(ctx, src, sink) }()
	<-src.started
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil after its context ended", err)
	}
	if c, _ := counts(t, st, sources.EvidenceNonWork); c["ping"] != 1 {
		t.Fatalf("counts after Run stopped = %v, want ping 1", c)
	}
}

// countingStore counts Update calls.
type countingStore struct {
	flakyStore
	updates atomic.Int64
}

func (c *countingStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	c.updates.Add(1)
	return c.flakyStore.Update(ctx, fn)
}

// While the store is down, counted evidence (rejected requests, which anyone can send) tries one
// write per window, not one per request; the counts are kept and written once it is back.
func TestCountedEvidenceTriesTheStoreOncePerWindowWhileItIsDown(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := &countingStore{flakyStore: flakyStore{Store: storetest.OpenSQLite(t)}}
	sink, err := sources.NewSink(taskplane.New(st), "webhook", sources.WithClock(func() time.Time { return now }), sources.WithCountWindow(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sink.Rejected(ctx, "alice", "bad-signature")
	now = now.Add(time.Minute)
	st.set(true)
	before := st.updates.Load()
	for range 1000 {
		sink.Rejected(ctx, "alice", "bad-signature")
	}
	if n := st.updates.Load() - before; n != 1 {
		t.Errorf("1000 rejected requests with the store down tried %d writes, want 1", n)
	}
	st.set(false)
	now = now.Add(time.Minute)
	sink.Rejected(ctx, "alice", "bad-signature")
	got, err := sources.CountByReason(ctx, st, store.EvidenceFilter{Principal: "alice", Kind: sources.EvidenceRejected})
	if err != nil {
		t.Fatal(err)
	}
	if got["bad-signature"] != 1002 {
		t.Errorf("rejected bad-signature = %d once the store was back, want 1002", got["bad-signature"])
	}
}

// An anchor the delivery engine asks to record for a source without a matrix row is refused as
// not allowed, for good (the engine then marks the question delivered with anchor-refused
// evidence), not with an error it would retry forever.
func TestAnAnchorOfAnUnknownSourceIsRefusedForGood(t *testing.T) {
	plane := taskplane.New(storetest.OpenSQLite(t))
	err := plane.Store().Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return sources.RecordAnchorTx(ctx, tx, "alice", "no-such-source", "C1:1.2", "task-1", 1, time.Now())
	})
	if !errors.Is(err, taskplane.ErrContinuationNotAllowed) {
		t.Fatalf("anchor of an unknown source: %v, want ErrContinuationNotAllowed", err)
	}
}
