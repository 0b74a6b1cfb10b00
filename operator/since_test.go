package operator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/operator"
)

// A since longer than a time.Duration holds (about 292 years) is refused like any other bad
// value, in days as in hours or minutes: "200000d" overflowed into the future (the year 2062), and
// the listings it bounded came back empty.
func TestParseSinceRefusesADurationThatOverflows(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Time{
		"90m":                  now.Add(-90 * time.Minute),
		"24h":                  now.Add(-24 * time.Hour),
		"7d":                   now.AddDate(0, 0, -7),
		"0d":                   now,
		"106751d":              now.Add(-106751 * 24 * time.Hour),
		"2562047h":             now.Add(-2562047 * time.Hour),
		"2025-06-01T00:00:00Z": time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC),
	} {
		if got, err := operator.ParseSince(v, now); err != nil || !got.Equal(want) {
			t.Errorf("ParseSince(%q) = %s, %v; want %s", v, got, err, want)
		}
	}
	_, bad := operator.ParseSince("yesterday", now)
	for _, v := range []string{"106752d", "200000d", "9223372036854775807d", "99999999999999999999d", "2562048h", "153722868m"} {
		got, err := operator.ParseSince(v, now)
		if err == nil {
			t.Errorf("ParseSince(%q) = %s; want an error", v, got)
			continue
		}
		if msg := strings.Replace(err.Error(), v, "yesterday", 1); msg != bad.Error() {
			t.Errorf("ParseSince(%q): %v; want the error other bad values get (%v)", v, err, bad)
		}
	}
}
