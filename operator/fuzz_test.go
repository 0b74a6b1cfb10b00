package operator_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/operator"
)

// FuzzParseSince feeds arbitrary --since values and admin API queries to their parsing. Nothing
// panics; a duration is counted back from now, exactly, and never lands after it (no overflow
// into the future); an RFC 3339 time is taken as written; the evidence query's bounds hold.
func FuzzParseSince(f *testing.F) {
	for _, s := range []string{"90m", "24h", "7d", "0d", "106751d", "2562047h", "2025-06-01T00:00:00Z", "106752d",
		"9223372036854775807d", "99999999999999999999d", "2562048h", "153722868m", "yesterday", "-5m", "+3d", "1.5d", "1h30m",
		"2025-10-28T10:30:00.000+05:30", ""} {
		f.Add(s, "source=slack&kind=accepted&after=12&limit=100&until=1h")
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v, query string) {
		got, err := operator.ParseSince(v, now)
		if err != nil {
			if !strings.Contains(err.Error(), "want a duration") {
				t.Fatalf("ParseSince(%q): unclear error %v", v, err)
			}
		} else {
			if days, ok := strings.CutSuffix(v, "d"); ok {
				if n, perr := strconv.ParseInt(days, 10, 64); perr == nil {
					if n < 0 || now.Sub(got) != time.Duration(n)*24*time.Hour {
						t.Fatalf("ParseSince(%q) = %s: not %d days back", v, got, n)
					}
				}
			}
			if d, perr := time.ParseDuration(v); perr == nil && (d < 0 || now.Sub(got) != d) {
				t.Fatalf("ParseSince(%q) = %s: not %s back", v, got, d)
			}
			if tm, perr := time.Parse(time.RFC3339, v); perr == nil && !tm.Equal(got) {
				if _, derr := time.ParseDuration(v); derr != nil {
					t.Fatalf("ParseSince(%q) = %s, not the time %s", v, got, tm)
				}
			}
			if _, perr := time.Parse(time.RFC3339, v); perr != nil && got.After(now) {
				t.Fatalf("ParseSince(%q) = %s: a duration back from now lands after it", v, got)
			}
		}
		q, perr := url.ParseQuery(query)
		if perr != nil {
			return
		}
		q.Set("since", v)
		fl, err := operator.EvidenceQuery(q, now)
		if err != nil {
			return
		}
		if fl.Limit < 1 || fl.Limit > 1000 || fl.AfterID < 0 {
			t.Fatalf("EvidenceQuery(%v) = limit %d, after %d", q, fl.Limit, fl.AfterID)
		}
		if v != "" && !fl.Since.Equal(got) {
			t.Fatalf("EvidenceQuery since %q = %s, ParseSince says %s", v, fl.Since, got)
		}
	})
}
