package sources

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/channels-dev/channels/checkpoint"
	matrix "github.com/channels-dev/channels/conformance-matrix"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// Evidence kinds written at intake. The task plane writes accepted, continued, duplicate,
// duplicate-conflict and anchor-miss inside Accept; the Sink writes the rest.
const (
	EvidenceAccepted          = taskplane.EvidenceAccepted
	EvidenceContinued         = taskplane.EvidenceContinued
	EvidenceDuplicate         = taskplane.EvidenceDuplicate
	EvidenceDuplicateConflict = taskplane.EvidenceDuplicateConflict
	EvidenceAnchorMiss        = taskplane.EvidenceAnchorMiss
	EvidenceResync            = checkpoint.EvidenceResync
	// EvidenceNonWork counts events that carry no work, per source and reason. Rows carry
	// {"reason", "count"}; CountByReason sums them.
	EvidenceNonWork = "non-work"
	// EvidenceMalformed records a trusted envelope that could not be read as an event; the source
	// settles it after the row is written.
	EvidenceMalformed = "malformed-envelope"
	// EvidenceRejected counts requests refused before they could be trusted (bad signature,
	// stale timestamp, oversize or unreadable body), per source and reason, like non-work.
	EvidenceRejected = "rejected"
)

// Reasons of rejected requests that ReadBody counts; a source names its own for the rest
// (bad-signature, stale-timestamp, …).
const (
	// RejectedOversize: the body was larger than the source's limit (answered 413).
	RejectedOversize = "oversize"
	// RejectedUnreadable: the body could not be read to its end (answered 400).
	RejectedUnreadable = "unreadable"
)

// Counted evidence limits.
const (
	// DefaultCountWindow is how long counts are summed before a row per reason is written.
	DefaultCountWindow = time.Minute
	// maxCountKeys bounds the distinct (principal, kind, reason) counters held between flushes;
	// past it, new reasons count as "other".
	maxCountKeys = 256
	// maxReasonLen bounds a reason; a longer one is cut.
	maxReasonLen = 64
)

type countKey struct{ principal, kind, reason string }

// counter sums counted evidence in memory between flushes. A crash loses at most one window of
// counts of events that were not work; nothing that became a Task depends on it.
type counter struct {
	window time.Duration

	mu      sync.Mutex
	start   time.Time
	pending map[countKey]int64
	// retryAt is when a count may flush inline again after a failed flush: one try per window,
	// so requests (unauthenticated ones too) do not each try a write while the store is down.
	retryAt time.Time
}

func newCounter() *counter {
	return &counter{window: DefaultCountWindow, pending: map[countKey]int64{}}
}

func (s *Sink) count(ctx context.Context, principal, kind, reason string) {
	if len(reason) > maxReasonLen {
		reason = reason[:maxReasonLen]
	}
	c := s.counts
	now := s.clock()
	c.mu.Lock()
	if c.start.IsZero() {
		c.start = now
	}
	k := countKey{principal, kind, reason}
	if _, ok := c.pending[k]; !ok && len(c.pending) >= maxCountKeys {
		k.reason = "other"
	}
	c.pending[k]++
	due := now.Sub(c.start) >= c.window && !now.Before(c.retryAt)
	c.mu.Unlock()
	if due {
		if err := c.flush(ctx, s); err != nil {
			s.log.Warn("write counted evidence", "source", s.row.Source, "err", err)
		}
	}
}

// flush writes one row per pending key in one transaction; on failure the counts are kept for the
// next flush.
func (c *counter) flush(ctx context.Context, s *Sink) error {
	c.mu.Lock()
	pending, from := c.pending, c.start
	c.pending, c.start = map[countKey]int64{}, time.Time{}
	c.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	now := s.clock()
	err := s.plane.Store().Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for k, n := range pending {
			if err := insertEvidence(ctx, tx, k.principal, s.row.Source, k.kind, "",
				map[string]any{"reason": k.reason, "count": n, "from": from, "to": now}, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		c.mu.Lock()
		for k, n := range pending {
			c.pending[k] += n
		}
		if c.start.IsZero() || from.Before(c.start) {
			c.start = from
		}
		c.retryAt = now.Add(c.window)
		c.mu.Unlock()
		return fmt.Errorf("flush %s counted evidence: %w", s.row.Source, err)
	}
	return nil
}

func insertEvidence(ctx context.Context, tx store.Tx, principal, source, kind, taskID string, detail map[string]any, now time.Time) error {
	b, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("encode %s evidence: %w", kind, err)
	}
	if err := tx.InsertEvidence(ctx, store.Evidence{Principal: principal, Source: source, Kind: kind,
		TaskID: taskID, Detail: b, CreatedAt: now}); err != nil {
		return fmt.Errorf("write %s evidence: %w", kind, err)
	}
	return nil
}

// CountByReason sums counted evidence (non-work, rejected, or any kind whose rows carry
// {"reason", "count"}) matching f, by reason. A row without a count counts once.
func CountByReason(ctx context.Context, r store.Reader, f store.EvidenceFilter) (map[string]int64, error) {
	rows, err := r.ListEvidence(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("count %s evidence: %w", f.Kind, err)
	}
	out := map[string]int64{}
	for _, e := range rows {
		var d struct {
			Reason string `json:"reason"`
			Count  *int64 `json:"count"`
		}
		_ = json.Unmarshal(e.Detail, &d) // a row without detail still counts once
		n := int64(1)
		if d.Count != nil {
			n = *d.Count
		}
		out[d.Reason] += n
	}
	return out, nil
}

// AllowsAnchors returns nil if the row's continuation method is reply-anchor, and an error
// wrapping taskplane.ErrContinuationNotAllowed otherwise.
func AllowsAnchors(row matrix.Row) error {
	if row.Continuation.Method != matrix.ReplyAnchor {
		return fmt.Errorf("record anchor for source %s (continuation %q): %w", row.Source,
			row.Continuation.Method, taskplane.ErrContinuationNotAllowed)
	}
	return nil
}

// RecordAnchorTx is Sink.RecordAnchor inside a caller's transaction (the delivery engine marks a
// question delivered and records its anchor in one transaction). It refuses a source whose matrix
// row declares no reply-anchor continuation, and an unknown source.
func RecordAnchorTx(ctx context.Context, tx store.Tx, principal, source, providerID, taskID string, inputSeq int64, now time.Time) error {
	row, err := Declaration(source)
	if err != nil {
		// No row declares a reply-anchor continuation for it: refused for good, like a source
		// whose row declares another method (a retry could not change it).
		return fmt.Errorf("record anchor: %w (%w)", taskplane.ErrContinuationNotAllowed, err)
	}
	if err := AllowsAnchors(row); err != nil {
		return err
	}
	return taskplane.RecordAnchorTx(ctx, tx, principal, source, providerID, taskID, inputSeq, now)
}
