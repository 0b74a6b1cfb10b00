// Package checkpoint keeps intake positions: one per (principal, source), opaque bytes ordered by
// a sequence, with a version counting advances.
//
// A position moves in exactly two ways, both inside a store transaction that also records why:
//
//   - with an accepted event: the source puts the event's Position on sources.Event, and the task
//     plane advances it in the Accept transaction (taskplane.Event.Checkpoint), so a position is
//     never ahead of the work it covers;
//   - after a permanent classification (non-work, a malformed envelope, a resync), with the
//     evidence that says so, by ClassifyTx or Resync.
//
// It never moves backwards: a position whose Seq is not greater than the stored one leaves the
// stored one as it is. When acceptance fails, the transaction rolls back and the position holds,
// so the provider's event is read again.
package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

// EvidenceResync is the evidence kind of a position discontinuity (an IMAP UIDVALIDITY change):
// the source starts over in a new position space and says so.
const EvidenceResync = "checkpoint-resync"

// Position is a source's intake position: opaque bytes the source understands, and a sequence
// that orders positions. A source whose provider positions do not order by themselves (a new
// UIDVALIDITY) maps them onto a sequence that does.
type Position struct {
	Bytes []byte
	Seq   int64
}

// Taskplane converts p for taskplane.Event.Checkpoint.
func (p Position) Taskplane() *taskplane.Checkpoint {
	return &taskplane.Checkpoint{Position: p.Bytes, Seq: p.Seq}
}

// Checkpoint is the stored position of one (principal, source).
type Checkpoint struct {
	Principal string
	Source    string
	Position  Position
	// Version counts the advances; 0 means no position was ever stored.
	Version   int64
	UpdatedAt time.Time
}

func fromStore(c store.Checkpoint) Checkpoint {
	return Checkpoint{Principal: c.Principal, Source: c.Source, Position: Position{Bytes: c.Position, Seq: c.Seq},
		Version: c.Version, UpdatedAt: c.UpdatedAt}
}

// Get returns the stored checkpoint; a source that never stored one gets the zero Checkpoint
// (Version 0) for that principal and source, and no error.
func Get(ctx context.Context, r store.Reader, principal, source string) (Checkpoint, error) {
	c, err := r.GetCheckpoint(ctx, principal, source)
	if errors.Is(err, store.ErrNotFound) {
		return Checkpoint{Principal: principal, Source: source}, nil
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("get checkpoint %s/%s: %w", principal, source, err)
	}
	return fromStore(c), nil
}

// AdvanceTx moves the checkpoint to pos inside tx if pos.Seq is greater than the stored Seq (or
// nothing is stored). It returns the checkpoint as stored after the call and whether it moved.
func AdvanceTx(ctx context.Context, tx store.Tx, principal, source string, pos Position, now time.Time) (Checkpoint, bool, error) {
	before, err := Get(ctx, tx, principal, source)
	if err != nil {
		return Checkpoint{}, false, err
	}
	after, err := tx.AdvanceCheckpoint(ctx, store.Checkpoint{
		Principal: principal, Source: source, Position: pos.Bytes, Seq: pos.Seq, UpdatedAt: now,
	})
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("advance checkpoint %s/%s to %d: %w", principal, source, pos.Seq, err)
	}
	c := fromStore(after)
	return c, c.Version != before.Version, nil
}

// ClassifyTx records the permanent classification of the event at pos (kind is an evidence kind
// such as "non-work" or "malformed-envelope"; detail holds no secrets or bodies) and advances the
// checkpoint past it, in tx: the position moves only together with the evidence of why.
func ClassifyTx(ctx context.Context, tx store.Tx, principal, source string, pos Position, kind string, detail map[string]any, now time.Time) (Checkpoint, error) {
	d := map[string]any{"seq": pos.Seq}
	for k, v := range detail {
		d[k] = v
	}
	if err := insertEvidence(ctx, tx, principal, source, kind, d, now); err != nil {
		return Checkpoint{}, err
	}
	c, _, err := AdvanceTx(ctx, tx, principal, source, pos, now)
	return c, err
}

// Resync moves the checkpoint to pos after a position discontinuity and records checkpoint-resync
// evidence with the old and new sequences and the reason. pos.Seq must be greater than the stored
// Seq: a resync starts a new position space above the old one, it never goes back.
func Resync(ctx context.Context, s store.Store, principal, source string, pos Position, reason string, now time.Time) (Checkpoint, error) {
	var c Checkpoint
	err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		before, err := Get(ctx, tx, principal, source)
		if err != nil {
			return err
		}
		if before.Version > 0 && pos.Seq <= before.Position.Seq {
			return fmt.Errorf("resync to seq %d: not above the stored seq %d (a checkpoint never moves backwards)", pos.Seq, before.Position.Seq)
		}
		if err := insertEvidence(ctx, tx, principal, source, EvidenceResync,
			map[string]any{"fromSeq": before.Position.Seq, "toSeq": pos.Seq, "reason": reason}, now); err != nil {
			return err
		}
		c, _, err = AdvanceTx(ctx, tx, principal, source, pos, now)
		return err
	})
	if err != nil {
		return Checkpoint{}, fmt.Errorf("resync checkpoint %s/%s: %w", principal, source, err)
	}
	return c, nil
}

func insertEvidence(ctx context.Context, tx store.Tx, principal, source, kind string, detail map[string]any, now time.Time) error {
	b, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("encode %s evidence: %w", kind, err)
	}
	if err := tx.InsertEvidence(ctx, store.Evidence{Principal: principal, Source: source, Kind: kind,
		Detail: b, CreatedAt: now}); err != nil {
		return fmt.Errorf("write %s evidence: %w", kind, err)
	}
	return nil
}
