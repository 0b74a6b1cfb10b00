package sources_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/channels-dev/channels/checkpoint"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// One principal configures two instances of one pull source: two mailboxes, "work" at UID 100
// and "home" at UID 5. The Host runs both against the one Sink of the source. Each keeps its own
// position through acceptance, non-work, a malformed envelope and a resync, and a restart (a new
// Sink on the same store) resumes each from its own: "home" is not swallowed by "work", nor does
// it resume from "work"'s position and skip its own UIDs 6..100.
func TestTwoInstancesOfOneSourceKeepTheirOwnPositions(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		plane := taskplane.New(open(t))
		sink, err := sources.NewSink(plane, "email")
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		pos := func(instance string, seq int64) *checkpoint.Position {
			return &checkpoint.Position{Instance: instance, Bytes: fmt.Appendf(nil, "%s:uid:%d", instance, seq), Seq: seq}
		}
		accept := func(instance, id string, seq int64) {
			t.Helper()
			_, err := sink.Accept(ctx, sources.Event{Principal: "alice", Identity: instance + ":" + id, ConversationKey: instance + ":" + id,
				Message:    taskplane.Message{ID: instance + id, Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("hi")}},
				Checkpoint: pos(instance, seq)})
			if err != nil {
				t.Fatalf("accept %s UID %d: %v", instance, seq, err)
			}
		}
		want := func(sink *sources.Sink, when string, positions map[string]int64) {
			t.Helper()
			for instance, seq := range positions {
				c, err := sink.Checkpoint(ctx, "alice", instance)
				if err != nil {
					t.Fatal(err)
				}
				if c.Position.Instance != instance || c.Position.Seq != seq || string(c.Position.Bytes) != string(pos(instance, seq).Bytes) {
					t.Errorf("%s: checkpoint of %s = %s %q/%d, want its own at UID %d", when, instance,
						c.Position.Instance, c.Position.Bytes, c.Position.Seq, seq)
				}
			}
		}

		accept("work", "<a@x>", 100)
		accept("home", "<b@y>", 5)
		want(sink, "after accepting work's UID 100 and home's UID 5", map[string]int64{"work": 100, "home": 5})

		if err := sink.NonWork(ctx, "alice", "auto-submitted", pos("home", 6)); err != nil {
			t.Fatal(err)
		}
		if err := sink.Malformed(ctx, "alice", "no-message-id", pos("home", 7), nil); err != nil {
			t.Fatal(err)
		}
		accept("work", "<a@x>", 101) // the same message again, at a later UID: a settled duplicate
		accept("work", "<c@x>", 60)  // behind work's position: work never moves back
		want(sink, "after classifying home's UIDs 6 and 7", map[string]int64{"work": 101, "home": 7})

		restarted, err := sources.NewSink(plane, "email")
		if err != nil {
			t.Fatal(err)
		}
		want(restarted, "after a restart", map[string]int64{"work": 101, "home": 7})

		if _, err := restarted.Resync(ctx, "alice", *pos("home", 1<<32), "uidvalidity changed"); err != nil {
			t.Fatal(err)
		}
		want(restarted, "after home's resync", map[string]int64{"work": 101, "home": 1 << 32})
	})
}

// A position that names no instance could be any instance's: the Sink refuses the event (not
// Permanent, so the source leaves it unacknowledged) and writes nothing, and NonWork and
// Malformed with such a position record nothing either.
func TestAPositionWithoutItsInstanceIsRefused(t *testing.T) {
	s := storetest.OpenSQLite(t)
	sink, err := sources.NewSink(taskplane.New(s), "email")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pos := &checkpoint.Position{Bytes: []byte("uid:9"), Seq: 9}
	_, err = sink.Accept(ctx, sources.Event{Principal: "alice", Identity: "box:<a@x>", ConversationKey: "box:<a@x>",
		Message:    taskplane.Message{ID: "a", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("hi")}},
		Checkpoint: pos})
	if !errors.Is(err, checkpoint.ErrNoInstance) || sources.Permanent(err) {
		t.Errorf("Accept = %v, want ErrNoInstance and not Permanent", err)
	}
	if err := sink.NonWork(ctx, "alice", "auto-submitted", pos); !errors.Is(err, checkpoint.ErrNoInstance) {
		t.Errorf("NonWork = %v, want ErrNoInstance", err)
	}
	if err := sink.Malformed(ctx, "alice", "garbled", pos, nil); !errors.Is(err, checkpoint.ErrNoInstance) {
		t.Errorf("Malformed = %v, want ErrNoInstance", err)
	}
	if cps, err := s.ListCheckpoints(ctx, ""); err != nil || len(cps) != 0 {
		t.Errorf("checkpoints = %+v, %v; want none", cps, err)
	}
	if ev, err := s.ListEvidence(ctx, store.EvidenceFilter{Principal: "alice"}); err != nil || len(ev) != 0 {
		t.Errorf("evidence = %+v, %v; want none", ev, err)
	}
}
