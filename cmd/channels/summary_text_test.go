package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// tableCell returns the cell of column col in the row of a table printed by tabwriter whose first
// cell is first: the header line naming col is the last one before that row that does.
func tableCell(t *testing.T, out, first, col string) string {
	t.Helper()
	header := ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "SOURCE ") {
			header = line
			continue
		}
		if f := strings.Fields(line); len(f) > 0 && f[0] == first && strings.Contains(header, "  "+col+"  ") {
			i := strings.Index(header, "  "+col+"  ") + 2
			if i >= len(line) {
				return ""
			}
			if f := strings.Fields(line[i:]); len(f) > 0 {
				return f[0]
			}
			return ""
		}
	}
	t.Fatalf("no %s row under a header with %s in:\n%s", first, col, out)
	return ""
}

// The text summary shows every figure the summary's counts carry — rejected, settled, and the
// deliveries delivered, failed and ambiguous within the window — and labels the deliveries by
// state as what they are: every delivery by its current state, whatever its age.
func TestTheTextSummaryShowsTheWindowedDeliveryAndRejectedCounts(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "d.db")
	ambiguousDelivery(t, url) // one delivery of email, ambiguous, with its evidence
	ctx := context.Background()
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	err = st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for _, e := range []struct {
			kind   string
			detail string
			at     time.Time
		}{
			{delivery.EvidenceDelivered, "", now},
			{delivery.EvidenceDelivered, "", now},
			{delivery.EvidenceDelivered, "", now.Add(-3 * time.Hour)}, // before the window
			{delivery.EvidenceFailed, "", now},
			{sources.EvidenceRejected, `{"count":3,"reason":"signature"}`, now},
			{taskplane.EvidenceSettled, "", now},
		} {
			if err := tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "email", Kind: e.kind,
				Detail: []byte(e.detail), CreatedAt: e.at}); err != nil {
				return err
			}
		}
		return nil
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}

	c := newCLI(t, nil)
	if code := c.run(ctx, "evidence", "--summary", "--since", "1h", "--store", url); code != 0 {
		t.Fatalf("exit %d: %s", code, c.stderr.String())
	}
	out := c.stdout.String()
	for col, want := range map[string]string{
		"REJECTED": "3", "SETTLED": "1", "DELIVERED": "2", "DELIVERY FAILED": "1", "AMBIGUOUS": "1",
		"DELIVERIES NOW": "ambiguous=1",
	} {
		if got := tableCell(t, out, "email", col); got != want {
			t.Errorf("column %s of email = %q, want %q in:\n%s", col, got, want, out)
		}
	}
	if !strings.Contains(out, "DELIVERIES NOW counts every delivery by its current state, whatever its age") {
		t.Errorf("the deliveries by state are not said to be all time:\n%s", out)
	}
}
