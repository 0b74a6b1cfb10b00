package worker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

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
			p := e.plane
			e.accept(t, "bob", taskplane.SourceA2A, "m-1")
			id, lease := e.claim(t, tokenAll)

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
			task, err := p.GetTask(context.Background(), "bob", id)
			if err != nil {
				t.Fatal(err)
			}
			questions := 0
			for _, m := range task.History {
				if m.Role == taskplane.RoleAgent {
					questions++
				}
			}
			evs, err := p.Events(context.Background(), "bob", id, 0, 100)
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
