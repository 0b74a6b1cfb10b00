package worker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// blipStore lets `pass` more transactions through once armed, then fails the next one as a
// database connection lost would (store-unavailable), then works again.
type blipStore struct {
	store.Store
	armed atomic.Bool
	pass  atomic.Int64
}

func (b *blipStore) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	if b.armed.Load() {
		if b.pass.Add(-1) < 0 {
			b.armed.Store(false)
			return fmt.Errorf("connection lost: %w", io.ErrUnexpectedEOF)
		}
	}
	return b.Store.Update(ctx, fn)
}

// A require-input answered 503 store-unavailable ("nothing changed, and the same call with the
// same lease may be made again") and retried as documented asks its question once, whichever of
// the call's transactions the store failed: the question and the turn's end commit together (a
// question committed before a failed turn end was asked again on the retry).
func TestRetriedRequireInputAfterA503AsksOnce(t *testing.T) {
	for pass := range 3 { // transactions that go through before the one that fails
		t.Run(fmt.Sprintf("the store fails transaction %d", pass+1), func(t *testing.T) {
			st := &blipStore{Store: storetest.OpenSQLite(t)}
			e := newEnv(t, st)
			e.accept(t, "bob", taskplane.SourceA2A, "m-1")
			id, lease := e.claim(t, tokenAll)

			questions := requireInputRetried(t, e, st, pass, id, lease)
			evs, err := e.plane.Events(context.Background(), "bob", id, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			interrupted := 0
			for _, ev := range evs {
				if ev.Status != nil && ev.Status.Status.State == taskplane.StateInputRequired {
					interrupted++
				}
			}
			if questions != 1 || interrupted != 1 {
				t.Fatalf("the task holds %d questions and %d INPUT_REQUIRED events, want 1 and 1", questions, interrupted)
			}
		})
	}
}

// requireInputRetried asks bob's task id a question with lease while st fails the transaction
// after pass more, retries it once if it was answered 503 (as documented), and returns how many
// agent messages (questions) the task then holds.
func requireInputRetried(t *testing.T, e *env, st *blipStore, pass int, id, lease string) int {
	t.Helper()
	st.pass.Store(int64(pass))
	st.armed.Store(true)
	code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/require-input", tokenAll, lease,
		map[string]any{"question": "which branch?"})
	if code == http.StatusServiceUnavailable {
		code, body = e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/require-input", tokenAll, lease,
			map[string]any{"question": "which branch?"})
	}
	st.armed.Store(false)
	if code != http.StatusOK {
		t.Fatalf("require-input (retried after a 503): %d %v", code, body)
	}
	task, err := e.plane.GetTask(context.Background(), "bob", id)
	if err != nil {
		t.Fatal(err)
	}
	questions := 0
	for _, m := range task.History {
		if m.Role == taskplane.RoleAgent {
			questions++
		}
	}
	return questions
}

// settledHome records the results a plane hands home (a taskplane.Results), by status message id.
type settledHome struct {
	mu  sync.Mutex
	ids map[string]taskplane.State
}

func (h *settledHome) Settled(_ context.Context, t *taskplane.Task) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ids == nil {
		h.ids = map[string]taskplane.State{}
	}
	if t.Status.Message != nil {
		h.ids[t.Status.Message.ID] = t.Status.State
	}
	return nil
}

func (h *settledHome) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ids)
}

// The same for a task of a provider source whose answers go home through a delivery (a Results
// hook, as `channels serve` wires it): there the question commits before the turn's end, which
// hands it home first, so a 503 for a failed end used to have the retry ask a second question,
// and the person was sent both.
func TestRetriedRequireInputOfANativeTaskAfterA503AsksOnce(t *testing.T) {
	for pass := range 3 { // transactions that go through before the one that fails
		t.Run(fmt.Sprintf("the store fails transaction %d", pass+1), func(t *testing.T) {
			st := &blipStore{Store: storetest.OpenSQLite(t)}
			home := &settledHome{}
			e := newEnv(t, st, taskplane.WithResults(home))
			e.accept(t, "bob", "webhook", "m-1")
			id, lease := e.claim(t, tokenAll)

			questions := requireInputRetried(t, e, st, pass, id, lease)
			if questions != 1 || home.count() != 1 {
				t.Fatalf("the task holds %d questions and %d were handed home, want 1 and 1", questions, home.count())
			}
			ws, err := st.ListTaskWakes(context.Background(), "bob", id)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range ws {
				if w.State == store.WakeActive {
					t.Fatalf("the turn was not ended: wake %s is %s", w.ID, w.State)
				}
			}
		})
	}
}

// failingHome fails its first hand-off, as a process that died before it would leave it undone.
type failingHome struct {
	settledHome
	failed atomic.Bool
}

func (h *failingHome) Settled(ctx context.Context, t *taskplane.Task) error {
	if h.failed.CompareAndSwap(false, true) {
		return fmt.Errorf("delivery store away: %w", io.ErrUnexpectedEOF)
	}
	return h.settledHome.Settled(ctx, t)
}

// A native task's question whose hand-off after the require-input failed is handed off again by
// the wake held for it, which grants no turn: the task stays waiting for its answer.
func TestANativeQuestionWhoseHandOffFailedIsHandedOffAgainWithoutATurn(t *testing.T) {
	home := &failingHome{}
	e := newEnv(t, storetest.OpenSQLite(t), taskplane.WithResults(home))
	e.accept(t, "bob", "webhook", "m-1")
	id, lease := e.claim(t, tokenAll)
	if code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/require-input", tokenAll, lease,
		map[string]any{"question": "which branch?"}); code != http.StatusOK {
		t.Fatalf("require-input: %d %v", code, body)
	}
	if home.count() != 0 {
		t.Fatalf("%d results handed home, want none yet (the first hand-off fails)", home.count())
	}
	e.clock.Advance(2 * time.Minute)
	g, err := e.plane.ClaimTurn(context.Background(), taskplane.ClaimRequest{Owner: "next", Lease: time.Minute})
	if err != nil || g != nil {
		t.Fatalf("claim after the failed hand-off: grant %v, err %v; want no turn", g, err)
	}
	task, err := e.plane.GetTask(context.Background(), "bob", id)
	if err != nil {
		t.Fatal(err)
	}
	if home.count() != 1 || task.Status.State != taskplane.StateInputRequired {
		t.Fatalf("%d results handed home, task %s; want 1, INPUT_REQUIRED", home.count(), task.Status.State)
	}
}
