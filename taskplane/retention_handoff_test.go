package taskplane_test

import (
	"context"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// Invariant 9: a finished native task whose result is still to be handed to delivery (its wake
// pending: every hand-off has failed for a month) is not pruned with that wake, which would lose
// its notice without a trace.
func TestRetentionKeepsAFinishedTaskWhoseResultIsStillToBeHandedOff(t *testing.T) {
	c := newFakeClock()
	res := &flakyResults{fail: map[taskplane.State]int{}}
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		res.calls = nil
		res.fail[taskplane.StateCanceled] = 1 << 30 // the source's route is gone: every hand-off fails
		ctx := context.Background()
		turn := waitingNativeTask(t, p)
		if _, _, err := p.Cancel(ctx, "alice", turn.Task.ID, nil); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 31; i++ { // retried every day for 31 days, failing each time
			c.Advance(24 * time.Hour)
			_ = claimAs(t, p, "later")
		}
		before, _ := p.Store().ListWakes(ctx, store.WakePending, 0)
		if len(before) == 0 {
			t.Fatalf("precondition: no pending wake for the unhanded notice")
		}
		r, err := p.Prune(ctx)
		if err != nil {
			t.Fatal(err)
		}
		after, _ := p.Store().ListWakes(ctx, store.WakePending, 0)
		if len(after) < len(before) {
			t.Fatalf("retention deleted %d pending wake(s) (result %+v): the notice of task %s is never handed off; wake-failed evidence: %d",
				len(before)-len(after), r.PruneResult, turn.Task.ID, countEvidence(t, p, "alice", taskplane.EvidenceWakeFailed))
		}
	}, taskplane.WithClock(c.Now), taskplane.WithResults(res))
}
