package store

import (
	"context"
	"time"
)

// Aggregate reads for operators (docs/operations.md): the per-source summary of `channels evidence`,
// /admin and /metrics. They count in the database instead of listing rows, so a summary costs the
// same with a thousand or a million evidence rows. SummaryReader is embedded in Reader.

// EvidenceCountFilter selects the evidence CountEvidence counts. Zero fields match anything.
type EvidenceCountFilter struct {
	Principal string
	Source    string
	Kind      string
	// Since (inclusive) and Until (exclusive) bound CreatedAt.
	Since time.Time
	Until time.Time
	// Bucket, when positive, splits the counts into buckets of this width starting at Since
	// (which must then be set): a chart's bars. Zero gives one count per (source, kind).
	Bucket time.Duration
}

// EvidenceCount is the evidence of one (Source, Kind), in one bucket when buckets were asked.
type EvidenceCount struct {
	Source string
	Kind   string
	// Bucket is the start of the bucket (Since + n × Bucket); zero without buckets.
	Bucket time.Time
	// Rows is the number of evidence rows.
	Rows int64
	// Events sums the rows' "count" detail field (truncated to an integer), a row without one, or
	// whose count is not a number from -1e9 to 1e9, counting once: counted evidence (non-work,
	// rejected) writes one row per reason and window holding how many events it stands for.
	Events int64
	// Last is the newest CreatedAt among the rows.
	Last time.Time
}

// DeliveryCount is the number of deliveries of one (Source, Lane, State).
type DeliveryCount struct {
	Source string
	Lane   string
	State  DeliveryState
	N      int64
	// Oldest is the smallest UpdatedAt among them: how long the longest-waiting one has waited.
	Oldest time.Time
}

// TaskCount is the number of tasks of one (Principal, Source, State).
type TaskCount struct {
	Principal string
	Source    string
	State     string
	N         int64
}

// SummaryReader holds the aggregate reads; Reader embeds it.
type SummaryReader interface {
	// CountEvidence counts evidence matching f per (Source, Kind), and per bucket when f.Bucket is
	// positive, ordered by Source, Kind, Bucket. Groups without rows are left out.
	CountEvidence(ctx context.Context, f EvidenceCountFilter) ([]EvidenceCount, error)
	// CountDeliveries counts the deliveries of principal ("" = every principal) per (Source,
	// Lane, State), ordered by Source, Lane, State.
	CountDeliveries(ctx context.Context, principal string) ([]DeliveryCount, error)
	// CountTasks counts tasks of every principal per (Principal, Source, State), ordered by
	// Principal, Source, State.
	CountTasks(ctx context.Context) ([]TaskCount, error)
	// ListCheckpoints returns the checkpoints of source ("" = every source) across principals and
	// instances, ordered by Source, Principal, Instance.
	ListCheckpoints(ctx context.Context, source string) ([]Checkpoint, error)
}
