package sqlite

import (
	"context"
	"fmt"
	"time"
)

func (t *txn) PruneEvidence(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return do(ctx, t, func(ctx context.Context, q querier) (int, error) {
		res, err := q.ExecContext(ctx, `DELETE FROM evidence WHERE id IN (
			SELECT id FROM evidence WHERE created_at < ? ORDER BY id LIMIT ?)`, micros(cutoff), limitArg(limit))
		if err != nil {
			return 0, fmt.Errorf("prune evidence: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("prune evidence: %w", err)
		}
		return int(n), nil
	})
}
