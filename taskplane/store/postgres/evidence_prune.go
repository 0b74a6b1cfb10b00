package postgres

import (
	"context"
	"fmt"
	"time"
)

func (t *tx) PruneEvidence(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	var lim *int // NULL: no limit
	if limit > 0 {
		lim = &limit
	}
	tag, err := t.q.Exec(ctx, `DELETE FROM evidence WHERE id IN (
		SELECT id FROM evidence WHERE created_at < $1 ORDER BY id LIMIT $2)`, cutoff, lim)
	if err != nil {
		return 0, fmt.Errorf("prune evidence: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
