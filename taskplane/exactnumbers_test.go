package taskplane_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/channels-dev/channels/taskplane"
)

// exactMeta holds numbers a float64 cannot carry: an integer past 2^53 and a decimal written with
// a trailing zero. A replay or a read must give them back as they were written.
func exactMeta() map[string]any {
	return map[string]any{"big": json.Number("9007199254740993"), "price": json.Number("1.10"),
		"nested": map[string]any{"id": json.Number("123456789012345678901234567890")}}
}

const exactMetaJSON = `{"big":9007199254740993,"nested":{"id":123456789012345678901234567890},"price":1.10}`

func metaJSON(t *testing.T, m map[string]any) string {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReplaysAndReadsKeepMetadataNumbersExact(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()

		// A direct Message replayed from its claim.
		ev := taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "msg-1", Message: textMsg("msg-1", "hi")}
		ev.Reply = &taskplane.Message{ID: "reply-1", Role: taskplane.RoleAgent,
			Parts: []taskplane.Part{taskplane.TextPart("direct")}, Metadata: exactMeta()}
		mustAccept(t, p, ev)
		dup := mustAccept(t, p, ev)
		if dup.Outcome != taskplane.Duplicate || dup.Message == nil {
			t.Fatalf("duplicate: %+v", dup)
		}
		if got := metaJSON(t, dup.Message.Metadata); got != exactMetaJSON {
			t.Errorf("replayed direct Message metadata = %s, want %s", got, exactMetaJSON)
		}

		// A Task's message, read back, replayed, and followed through its event log.
		tev := nativeEvent("alice", "ev-1", "c1", "hello")
		tev.Message.Metadata = exactMeta()
		first := mustAccept(t, p, tev)
		got, err := p.GetTask(ctx, "alice", first.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if m := metaJSON(t, got.History[0].Metadata); m != exactMetaJSON {
			t.Errorf("read task's message metadata = %s, want %s", m, exactMetaJSON)
		}
		if dup := mustAccept(t, p, tev); metaJSON(t, dup.Task.History[0].Metadata) != exactMetaJSON {
			t.Errorf("replayed task's message metadata = %s, want %s", metaJSON(t, dup.Task.History[0].Metadata), exactMetaJSON)
		}
		seen := 0
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		_ = p.Follow(fctx, "alice", first.Task.ID, 0, func(e taskplane.TaskEvent) error {
			if e.Task != nil {
				seen++
				if m := metaJSON(t, e.Task.History[0].Metadata); m != exactMetaJSON {
					t.Errorf("followed task's message metadata = %s, want %s", m, exactMetaJSON)
				}
			}
			cancel()
			return nil
		})
		if seen == 0 {
			t.Error("Follow gave no task snapshot")
		}
	})
}
