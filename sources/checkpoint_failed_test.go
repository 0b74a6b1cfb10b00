package sources_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/channels-dev/channels/checkpoint"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// claimRefusingStore is the real store, healthy throughout, except that the next transaction
// that inserts a claim (an acceptance's last write) fails there, once: that acceptance rolls back
// whole while every other Update, the Sink's own checkpoint writes included, goes through.
type claimRefusingStore struct {
	store.Store
	armed   atomic.Bool
	refused atomic.Int32
}

var errClaimRefused = errors.New("claim insert failed")

func (s *claimRefusingStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	return s.Store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return fn(ctx, claimRefusingTx{Tx: tx, s: s})
	})
}

type claimRefusingTx struct {
	store.Tx
	s *claimRefusingStore
}

func (tx claimRefusingTx) InsertClaim(ctx context.Context, c store.Claim) (store.Claim, bool, error) {
	if tx.s.armed.CompareAndSwap(true, false) {
		tx.s.refused.Add(1)
		return store.Claim{}, false, errClaimRefused
	}
	return tx.Tx.InsertClaim(ctx, c)
}

// Invariant 1: a checkpoint advances only with a committed acceptance. An acceptance that fails
// for a reason that is not a conflict (here its transaction, with the store otherwise healthy)
// leaves the event unacknowledged, not settled, and the checkpoint where it was, with no task
// for the event: the source fetches it again. Once it is accepted, the checkpoint moves past it.
func TestAFailedAcceptanceLeavesTheCheckpointBehindTheEvent(t *testing.T) {
	st := &claimRefusingStore{Store: storetest.OpenSQLite(t)}
	sink, err := sources.NewSink(taskplane.New(st), "email")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ev := func(id string, seq int64) sources.Event {
		return sources.Event{Principal: "alice", Identity: "acct:" + id, ConversationKey: "acct:" + id,
			Message:    taskplane.Message{ID: id, Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("hello")}},
			Checkpoint: &checkpoint.Position{Instance: "acct", Bytes: []byte{byte(seq)}, Seq: seq}}
	}
	seq := func() int64 {
		t.Helper()
		c, err := sink.Checkpoint(ctx, "alice", "acct")
		if err != nil {
			t.Fatal(err)
		}
		return c.Position.Seq
	}
	tasks := func() int {
		t.Helper()
		_, n, err := st.ListTasks(ctx, "alice", store.TaskFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	if _, err := sink.Accept(ctx, ev("<a@x>", 1)); err != nil {
		t.Fatal(err)
	}
	if got := seq(); got != 1 {
		t.Fatalf("checkpoint after accepting seq 1 = %d, want 1", got)
	}

	st.armed.Store(true)
	_, err = sink.Accept(ctx, ev("<b@x>", 2))
	if n := st.refused.Load(); n != 1 {
		t.Fatalf("acceptance transactions failed = %d, want 1", n)
	}
	if err == nil || sources.Permanent(err) {
		t.Fatalf("Accept of seq 2 whose transaction failed = %v (Permanent %v), want an error that is not Permanent", err, sources.Permanent(err))
	}
	if got := seq(); got != 1 {
		t.Errorf("checkpoint after the failed acceptance of seq 2 = %d, want 1: the source would never fetch seq 2 again", got)
	}
	if n := tasks(); n != 1 {
		t.Errorf("tasks after the failed acceptance of seq 2 = %d, want 1 (seq 1's)", n)
	}
	if _, err := st.GetClaim(ctx, "alice", "email", "acct:<b@x>"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("claim of seq 2 after its failed acceptance: %v, want ErrNotFound", err)
	}

	acc, err := sink.Accept(ctx, ev("<b@x>", 2))
	if err != nil {
		t.Fatalf("Accept of seq 2 again: %v", err)
	}
	if acc.Outcome != taskplane.Created || acc.Task == nil {
		t.Errorf("seq 2 again: outcome %s, task %v; want a created task", acc.Outcome, acc.Task)
	}
	if got := seq(); got != 2 {
		t.Errorf("checkpoint after accepting seq 2 = %d, want 2", got)
	}
	if n := tasks(); n != 2 {
		t.Errorf("tasks after accepting seq 2 = %d, want 2", n)
	}
}
