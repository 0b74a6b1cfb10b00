// Package checkpoint keeps intake positions: one per (principal, source, instance), opaque bytes
// ordered by a sequence, with a version counting advances.
//
// A position belongs to one configured instance of a source (Position.Instance, the instance name
// of sources.Config): two mailboxes of one principal are two provider streams, and each resumes
// from its own position. An advance of one never moves, holds back or replaces the other's.
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
//
// Checkpoints stored before they were kept per instance (schema version 6) carry no instance
// name. Get returns such a checkpoint to an instance of its (principal, source) that has none of
// its own yet, with Position.Instance "", and the first instance to advance takes it over, so a
// source configured once resumes where it was. From then on it is that instance's alone: an
// instance configured later starts without a position.
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

// Position is a source instance's intake position: opaque bytes the source understands, and a
// sequence that orders positions. A source whose provider positions do not order by themselves (a
// new UIDVALIDITY) maps them onto a sequence that does.
type Position struct {
	// Instance is the configured instance of the source whose provider stream the position is in
	// (sources.Config.Instance). A position to be stored must name one; a stored position read
	// back names the instance it is stored under ("" for one kept from before positions were per
	// instance; see the package documentation).
	Instance string
	Bytes    []byte
	Seq      int64
}

// Taskplane converts p for taskplane.Event.Checkpoint.
func (p Position) Taskplane() *taskplane.Checkpoint {
	return &taskplane.Checkpoint{Instance: p.Instance, Position: p.Bytes, Seq: p.Seq}
}

// ErrNoInstance is returned for a position to be stored that names no source instance: it could
// be any instance's, and would hold back or replace another's.
var ErrNoInstance = errors.New("checkpoint position names no source instance")

// Checkpoint is the stored position of one (principal, source, instance).
type Checkpoint struct {
	Principal string
	Source    string
	Position  Position
	// Version counts the advances; 0 means no position was ever stored.
	Version   int64
	UpdatedAt time.Time
}

func fromStore(c store.Checkpoint) Checkpoint {
	return Checkpoint{Principal: c.Principal, Source: c.Source,
		Position: Position{Instance: c.Instance, Bytes: c.Position, Seq: c.Seq},
		Version:  c.Version, UpdatedAt: c.UpdatedAt}
}

// Get returns the stored checkpoint of the instance of source that principal configured. An
// instance that never stored one gets the checkpoint kept from before positions were per
// instance, if its (principal, source) has one (Position.Instance is then ""; see the package
// documentation), and otherwise the zero Checkpoint (Version 0, Position.Instance set), and no
// error.
func Get(ctx context.Context, r store.Reader, principal, source, instance string) (Checkpoint, error) {
	c, err := r.GetCheckpoint(ctx, principal, source, instance)
	if errors.Is(err, store.ErrNotFound) {
		return Checkpoint{Principal: principal, Source: source, Position: Position{Instance: instance}}, nil
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("get checkpoint %s/%s/%s: %w", principal, source, instance, err)
	}
	return fromStore(c), nil
}

// AdvanceTx moves the checkpoint of pos.Instance to pos inside tx if pos.Seq is greater than the
// stored Seq (or nothing is stored). It returns the checkpoint as stored after the call and
// whether it moved. A pos without an Instance is refused with ErrNoInstance.
func AdvanceTx(ctx context.Context, tx store.Tx, principal, source string, pos Position, now time.Time) (Checkpoint, bool, error) {
	if pos.Instance == "" {
		return Checkpoint{}, false, fmt.Errorf("advance checkpoint %s/%s to %d: %w", principal, source, pos.Seq, ErrNoInstance)
	}
	before, err := Get(ctx, tx, principal, source, pos.Instance)
	if err != nil {
		return Checkpoint{}, false, err
	}
	after, err := tx.AdvanceCheckpoint(ctx, store.Checkpoint{
		Principal: principal, Source: source, Instance: pos.Instance, Position: pos.Bytes, Seq: pos.Seq, UpdatedAt: now,
	})
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("advance checkpoint %s/%s/%s to %d: %w", principal, source, pos.Instance, pos.Seq, err)
	}
	c := fromStore(after)
	return c, c.Version != before.Version, nil
}

// ClassifyTx records the permanent classification of the event at pos (kind is an evidence kind
// such as "non-work" or "malformed-envelope"; detail holds no secrets or bodies) and advances the
// checkpoint of pos.Instance past it, in tx: the position moves only together with the evidence
// of why. A pos without an Instance is refused with ErrNoInstance, and nothing is written.
func ClassifyTx(ctx context.Context, tx store.Tx, principal, source string, pos Position, kind string, detail map[string]any, now time.Time) (Checkpoint, error) {
	if pos.Instance == "" {
		return Checkpoint{}, fmt.Errorf("classify %s event at seq %d: %w", kind, pos.Seq, ErrNoInstance)
	}
	d := map[string]any{"seq": pos.Seq, "instance": pos.Instance}
	for k, v := range detail {
		d[k] = v
	}
	if err := insertEvidence(ctx, tx, principal, source, kind, d, now); err != nil {
		return Checkpoint{}, err
	}
	c, _, err := AdvanceTx(ctx, tx, principal, source, pos, now)
	return c, err
}

// Resync moves the checkpoint of pos.Instance to pos after a position discontinuity and records
// checkpoint-resync evidence with the instance, the old and new sequences and the reason. pos.Seq
// must be greater than the stored Seq: a resync starts a new position space above the old one, it
// never goes back. A pos without an Instance is refused with ErrNoInstance.
func Resync(ctx context.Context, s store.Store, principal, source string, pos Position, reason string, now time.Time) (Checkpoint, error) {
	if pos.Instance == "" {
		return Checkpoint{}, fmt.Errorf("resync checkpoint %s/%s: %w", principal, source, ErrNoInstance)
	}
	var c Checkpoint
	err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		before, err := Get(ctx, tx, principal, source, pos.Instance)
		if err != nil {
			return err
		}
		if before.Version > 0 && pos.Seq <= before.Position.Seq {
			return fmt.Errorf("resync to seq %d: not above the stored seq %d (a checkpoint never moves backwards)", pos.Seq, before.Position.Seq)
		}
		if err := insertEvidence(ctx, tx, principal, source, EvidenceResync, map[string]any{
			"instance": pos.Instance, "fromSeq": before.Position.Seq, "toSeq": pos.Seq, "reason": reason}, now); err != nil {
			return err
		}
		c, _, err = AdvanceTx(ctx, tx, principal, source, pos, now)
		return err
	})
	if err != nil {
		return Checkpoint{}, fmt.Errorf("resync checkpoint %s/%s/%s: %w", principal, source, pos.Instance, err)
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
