package operator

import (
	"fmt"
	"slices"
	"strings"

	"github.com/channels-dev/channels/checkpoint"
	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/internal/suggest"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
)

// EvidenceKinds are the kinds of evidence record Channels writes, sorted. The set is fixed: a
// filter by another kind is a mistake, never a kind that merely has no records yet.
var EvidenceKinds = slices.Sorted(slices.Values([]string{
	taskplane.EvidenceAccepted, taskplane.EvidenceContinued, taskplane.EvidenceDuplicate,
	taskplane.EvidenceDuplicateConflict, taskplane.EvidenceAnchorMiss, taskplane.EvidenceRetention,
	taskplane.EvidenceWoken, taskplane.EvidenceWakeFailed, taskplane.EvidenceUnhealthy, taskplane.EvidenceTimeout,
	taskplane.EvidenceSettled, taskplane.EvidenceResultFailed, taskplane.EvidencePushRegistered,
	sources.EvidenceNonWork, sources.EvidenceMalformed, sources.EvidenceRejected,
	checkpoint.EvidenceResync,
	delivery.EvidenceDelivered, delivery.EvidenceReconciled, delivery.EvidenceFailed, delivery.EvidenceAmbiguous,
	delivery.EvidenceResolved, delivery.EvidenceConflict, delivery.EvidenceAnchorRefused,
}))

// CheckEvidenceKind returns nil for a kind in EvidenceKinds, and otherwise an error that names
// the nearest kind (when one is two edits away or less) and every valid one.
func CheckEvidenceKind(kind string) error {
	if slices.Contains(EvidenceKinds, kind) {
		return nil
	}
	msg := fmt.Sprintf("unknown evidence kind %q", kind)
	if s := suggest.Nearest(kind, EvidenceKinds, 2); s != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", s)
	}
	return fmt.Errorf("%s: want one of %s", msg, strings.Join(EvidenceKinds, ", "))
}
