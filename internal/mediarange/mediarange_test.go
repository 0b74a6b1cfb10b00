package mediarange_test

import (
	"testing"

	"github.com/channels-dev/channels/internal/mediarange"
)

func TestCovers(t *testing.T) {
	modes := []string{"text/plain", "image/*", "Application/JSON"}
	for mt, want := range map[string]bool{
		"text/plain": true, "text/plain; charset=utf-8": true, "TEXT/PLAIN": true, "application/json": true,
		"image/png": true, "image/svg+xml": true,
		"text/markdown": false, "application/x-unsupported-tck-type": false, "video/mp4": false,
		"": false, "not a type": false, "image/*": false, "*/*": false,
	} {
		if got := mediarange.Covers(modes, mt); got != want {
			t.Errorf("Covers(%v, %q) = %v, want %v", modes, mt, got, want)
		}
	}
	if !mediarange.Covers([]string{"*/*"}, "application/x-anything") {
		t.Error("*/* does not cover a media type")
	}
	if mediarange.Covers(nil, "text/plain") {
		t.Error("no modes cover text/plain")
	}
}

func TestList(t *testing.T) {
	got, bad := mediarange.List(" text/plain, image/* ,,*/*")
	if bad != "" || len(got) != 3 || got[0] != "text/plain" || got[1] != "image/*" || got[2] != "*/*" {
		t.Errorf("List = %q, bad %q", got, bad)
	}
	for _, s := range []string{"text", "*/plain", "text/", "a b/c"} {
		if _, bad := mediarange.List("text/plain," + s); bad != s {
			t.Errorf("List(%q) did not refuse it (bad %q)", s, bad)
		}
	}
}
