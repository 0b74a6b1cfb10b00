package sources_test

import (
	"context"
	"testing"

	"github.com/channels-dev/channels/checkpoint"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// A pull source (email: identity = account + Message-ID, checkpoint = UIDVALIDITY/UID)
// settles a message that is a duplicate (the same Message-ID seen again at a later UID) or a
// conflict (same Message-ID, different body). Its checkpoint must move past that UID.
func TestADuplicateOrConflictAtALaterPositionAdvancesTheCheckpoint(t *testing.T) {
	plane := taskplane.New(storetest.OpenSQLite(t))
	sink, err := sources.NewSink(plane, "email")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ev := func(id, text string, seq int64) sources.Event {
		return sources.Event{Principal: "alice", Identity: "acct:" + id, ConversationKey: "acct:" + id,
			Message:    taskplane.Message{ID: id, Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart(text)}},
			Checkpoint: &checkpoint.Position{Instance: "acct", Bytes: []byte{byte(seq)}, Seq: seq}}
	}
	seq := func() int64 {
		c, err := sink.Checkpoint(ctx, "alice", "acct")
		if err != nil {
			t.Fatal(err)
		}
		return c.Position.Seq
	}
	if _, err := sink.Accept(ctx, ev("<a@x>", "hello", 1)); err != nil {
		t.Fatal(err)
	}
	acc, err := sink.Accept(ctx, ev("<a@x>", "hello", 2)) // same Message-ID delivered again at UID 2
	t.Logf("dup at seq 2: outcome=%s err=%v checkpoint=%d", acc.Outcome, err, seq())
	if err == nil && seq() != 2 {
		t.Errorf("a settled duplicate at UID 2 left the checkpoint at %d: the source fetches UID 2 again on every poll", seq())
	}
	_, err = sink.Accept(ctx, ev("<a@x>", "hello, with a list footer", 3)) // same id, different body
	t.Logf("conflict at seq 3: err=%v permanent=%v checkpoint=%d", err, sources.Permanent(err), seq())
	if sources.Permanent(err) && seq() != 3 {
		t.Errorf("a permanent (settled) conflict at UID 3 left the checkpoint at %d", seq())
	}
}
