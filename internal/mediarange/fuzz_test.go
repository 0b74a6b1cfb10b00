package mediarange_test

import (
	"strings"
	"testing"

	"github.com/channels-dev/channels/internal/mediarange"
)

// FuzzMediaRange feeds arbitrary lists of input modes and media types to Parse, List and
// Covers. Nothing panics; a parsed type is canonical (lower-case, one type and subtype, parsing
// it again gives it back); List keeps exactly the non-empty items when it refuses none; and
// Covers agrees with a plain reading of the ranges: a concrete media type is covered by "*/*",
// by itself, or by its type's "type/*".
func FuzzMediaRange(f *testing.F) {
	for _, s := range []struct{ modes, mt string }{
		{"text/plain, image/*, Application/JSON", "text/plain; charset=utf-8"},
		{" text/plain, image/* ,,*/*", "image/svg+xml"},
		{"text/plain", "TEXT/PLAIN"},
		{"*/*", "application/x-anything"},
		{"text/plain,text", "video/mp4"},
		{"image/*", "image/*"},
		{"*/plain", "a b/c"},
		{`text/plain; q="a,b"`, `text/plain; q="a,b"`},
		{"", ""},
	} {
		f.Add(s.modes, s.mt)
	}
	f.Fuzz(func(t *testing.T, list, mt string) {
		if p, ok := mediarange.Parse(mt); ok {
			typ, sub, found := strings.Cut(p, "/")
			if !found || typ == "" || sub == "" || strings.Contains(sub, "/") || p != strings.ToLower(p) {
				t.Fatalf("Parse(%q) = %q: not one type and subtype in lower case", mt, p)
			}
			if typ == "*" && sub != "*" {
				t.Fatalf("Parse(%q) = %q: a wildcard type with a subtype", mt, p)
			}
			if p2, ok := mediarange.Parse(p); !ok || p2 != p {
				t.Fatalf("Parse(Parse(%q)) = %q, %v; want %q", mt, p2, ok, p)
			}
		}
		modes, bad := mediarange.List(list)
		var items []string
		for it := range strings.SplitSeq(list, ",") {
			if it = strings.TrimSpace(it); it != "" {
				items = append(items, it)
			}
		}
		if bad != "" {
			if modes != nil {
				t.Fatalf("List(%q) refused %q but returned %q", list, bad, modes)
			}
			if _, ok := mediarange.Parse(bad); ok {
				t.Fatalf("List(%q) refused %q, which parses", list, bad)
			}
			return
		}
		if len(modes) != len(items) {
			t.Fatalf("List(%q) = %q, want the %d items %q", list, modes, len(items), items)
		}
		for i, m := range modes {
			if m != items[i] {
				t.Fatalf("List(%q) = %q, want %q", list, modes, items)
			}
			if _, ok := mediarange.Parse(m); !ok {
				t.Fatalf("List(%q) kept %q, which does not parse", list, m)
			}
		}
		want := false
		if w, ok := mediarange.Parse(mt); ok && !strings.Contains(w, "*") {
			typ, _, _ := strings.Cut(w, "/")
			for _, m := range modes {
				r, _ := mediarange.Parse(m)
				want = want || r == "*/*" || r == w || r == typ+"/*"
			}
		}
		if got := mediarange.Covers(modes, mt); got != want {
			t.Fatalf("Covers(%q, %q) = %v, want %v", modes, mt, got, want)
		}
		if w, ok := mediarange.Parse(mt); ok && !strings.Contains(w, "*") && !mediarange.Covers([]string{"*/*"}, mt) {
			t.Fatalf("*/* does not cover %q", mt)
		}
	})
}
