package a2awire_test

import (
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/a2awire"
)

// ParseTime takes RFC 3339 timestamps with any offset RFC 3339 allows, and refuses offsets past
// 23:59 that time.Parse would take.
func TestParseTimeTakesOnlyRFC3339Offsets(t *testing.T) {
	want := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, s := range []string{"2026-01-01T00:00:00Z", "2026-01-01T02:00:00+02:00", "2026-01-01T00:00:00-00:00",
		"2026-01-01T23:59:00+23:59", "2025-12-31T00:01:00-23:59"} {
		got, err := a2awire.ParseTime(s)
		if err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("ParseTime(%q) = %v, %v; want %v in UTC", s, got, err, want)
		}
	}
	for _, s := range []string{"2026-01-01T00:00:00+24:00", "2026-01-01T00:00:00+23:60", "2026-01-01T00:00:00-24:00",
		"2026-01-01T00:00:00+99:00", "2026-01-01 00:00:00Z", "2026-01-01T00:00:60Z"} {
		if got, err := a2awire.ParseTime(s); err == nil {
			t.Errorf("ParseTime(%q) = %v, want an error", s, got)
		}
	}
}
