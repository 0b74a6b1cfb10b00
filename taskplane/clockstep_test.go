package taskplane_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
)

// steppedClock is a clock a test sets, as NTP may step a host's.
type steppedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *steppedClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *steppedClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// A task's status time never goes back, even when the clock does (an NTP step): tasks are listed
// by status time, and a page token is a position in that order, so a task whose new status was
// stamped earlier than its last would be listed again after the page that held it. Both ways a
// status changes are covered: an update, and a continuation of an interrupted task.
func TestAStatusTimeNeverGoesBackWhenTheClockDoes(t *testing.T) {
	c := &steppedClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		var ids []string
		for i := range 4 {
			c.Add(time.Second)
			ids = append(ids, mustAccept(t, p, nativeEvent("alice", fmt.Sprintf("ev-%d", i), fmt.Sprintf("c%d", i), "x")).Task.ID)
		}
		newest := ids[3]
		seen := map[string]bool{}
		q := taskplane.ListQuery{PageSize: 2}
		for pages := 0; ; pages++ {
			page, err := p.ListTasks(ctx, "alice", q)
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range page.Tasks {
				if seen[task.ID] {
					t.Fatalf("task %s listed twice", task.ID)
				}
				seen[task.ID] = true
			}
			if page.NextPageToken == "" || pages > 4 {
				break
			}
			if pages == 0 {
				// The newest task, listed on this first page, changes status after the clock
				// stepped 10 s back.
				c.Add(-10 * time.Second)
				if _, err := p.Apply(ctx, "alice", newest, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateInputRequired}); err != nil {
					t.Fatal(err)
				}
			}
			q.PageToken = page.NextPageToken
		}
		if len(seen) != 4 {
			t.Fatalf("listed %d tasks, want 4", len(seen))
		}
		// The interrupted task is continued after another step back.
		before, err := p.GetTask(ctx, "alice", newest)
		if err != nil {
			t.Fatal(err)
		}
		c.Add(-10 * time.Second)
		ev := nativeEvent("alice", "ev-answer", "c3", "the answer")
		ev.TaskID = newest
		acc := mustAccept(t, p, ev)
		if acc.Outcome != taskplane.Continued || acc.Task.Status.State != taskplane.StateSubmitted {
			t.Fatalf("continuation: %s, %s", acc.Outcome, acc.Task.Status.State)
		}
		if got := acc.Task.Status.Timestamp; got.Before(before.Status.Timestamp) {
			t.Fatalf("the continued task's status time went back from %s to %s", before.Status.Timestamp, got)
		}
	}, taskplane.WithClock(c.Now))
}

// Status times are kept to the microsecond; a statusTimestampAfter bound between two microseconds
// takes no task stamped before it (it starts at the next microsecond), and stays inclusive.
func TestAStatusTimeBoundBetweenMicrosecondsTakesNoEarlierTask(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &steppedClock{now: at}
	eachDriverWith(t, func(t *testing.T, p *taskplane.Plane) {
		mustAccept(t, p, nativeEvent("alice", "ev-1", "c1", "x"))
		for _, b := range []struct {
			after time.Time
			want  int
		}{{at.Add(-time.Nanosecond), 1}, {at, 1}, {at.Add(time.Nanosecond), 0}, {at.Add(500 * time.Nanosecond), 0}, {at.Add(time.Microsecond), 0}} {
			page, err := p.ListTasks(context.Background(), "alice", taskplane.ListQuery{StatusAfter: b.after})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Tasks) != b.want || page.TotalSize != b.want {
				t.Errorf("statusTimestampAfter %s: %d tasks (totalSize %d), want %d", b.after.Format(time.RFC3339Nano), len(page.Tasks), page.TotalSize, b.want)
			}
		}
	}, taskplane.WithClock(c.Now))
}
