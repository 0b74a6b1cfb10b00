// Package mediarange reads the media types and ranges an agent card offers as input modes
// ("text/plain", "image/*", "*/*") and tells whether they cover a part's media type.
package mediarange

import (
	"mime"
	"slices"
	"strings"
)

// Parse checks one media type or range: a type ("image/png"), a range of one type's subtypes
// ("image/*"), or "*/*". It returns it lower-cased, without parameters.
func Parse(s string) (string, bool) {
	mt, _, err := mime.ParseMediaType(s)
	if err != nil {
		return "", false
	}
	typ, sub, ok := strings.Cut(mt, "/")
	if !ok || typ == "" || sub == "" || (typ == "*" && sub != "*") {
		return "", false
	}
	return mt, true
}

// List splits a comma-separated list of media types and ranges, checking each; empty items are
// skipped. It returns the first item that is not one.
func List(s string) (modes []string, bad string) {
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if _, ok := Parse(item); !ok {
			return nil, item
		}
		modes = append(modes, item)
	}
	return modes, ""
}

// Covers reports whether one of ranges covers the media type mt (parameters ignored). A value
// of mt that is not a media type, or is itself a range, is covered by nothing.
func Covers(ranges []string, mt string) bool {
	if slices.Contains(ranges, mt) && !strings.Contains(mt, "*") {
		return true // the common case (text/plain), without parsing
	}
	want, ok := Parse(mt)
	if !ok || strings.Contains(want, "*") {
		return false
	}
	typ, _, _ := strings.Cut(want, "/")
	for _, m := range ranges {
		r, ok := Parse(m)
		if ok && (r == "*/*" || r == want || r == typ+"/*") {
			return true
		}
	}
	return false
}
