package taskplane_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/channels-dev/channels/taskplane"
)

// A ListTasks page is bounded by the stored size of its tasks as well as by its page size: a
// caller cannot have a hundred of the largest tasks encoded into one answer. A page that would
// pass MaxBytes ends early with a token that continues after it, and walking the pages still
// lists every task once; a task larger than the bound is a page of its own.
func TestAListPageIsBoundedByTheSizeOfItsTasks(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		const n = 10
		for i := range n {
			mustAccept(t, p, nativeEvent("alice", fmt.Sprintf("ev-%d", i), "c1", strings.Repeat("x", 10_000)))
		}
		walk := func(maxBytes, pageSize int) (pages []int) {
			t.Helper()
			seen := map[string]bool{}
			q := taskplane.ListQuery{PageSize: pageSize, MaxBytes: maxBytes}
			for {
				page, err := p.ListTasks(ctx, "alice", q)
				if err != nil {
					t.Fatal(err)
				}
				if page.TotalSize != n {
					t.Fatalf("totalSize %d, want %d", page.TotalSize, n)
				}
				for _, task := range page.Tasks {
					if seen[task.ID] {
						t.Fatalf("task %s listed twice", task.ID)
					}
					seen[task.ID] = true
				}
				pages = append(pages, len(page.Tasks))
				if page.NextPageToken == "" {
					break
				}
				if len(pages) > n {
					t.Fatalf("pages do not end: %v", pages)
				}
				q.PageToken = page.NextPageToken
			}
			if len(seen) != n {
				t.Fatalf("listed %d tasks, want %d (pages %v)", len(seen), n, pages)
			}
			return pages
		}
		// Each task is stored in a little over 10,000 bytes: three fit in 35,000, four do not.
		if got := walk(35_000, 100); fmt.Sprint(got) != "[3 3 3 1]" {
			t.Fatalf("pages of at most 35,000 bytes: %v, want [3 3 3 1]", got)
		}
		if got := walk(1, 100); fmt.Sprint(got) != "[1 1 1 1 1 1 1 1 1 1]" {
			t.Fatalf("pages of at most 1 byte: %v, want one task each", got)
		}
		if got := walk(1<<20, 4); fmt.Sprint(got) != "[4 4 2]" {
			t.Fatalf("pages of 4 tasks under a byte bound they do not reach: %v, want [4 4 2]", got)
		}
		if got := walk(0, 100); fmt.Sprint(got) != "[10]" {
			t.Fatalf("pages without a byte bound: %v, want [10]", got)
		}
	})
}
