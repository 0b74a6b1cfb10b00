package suggest

import "testing"

func TestNearest(t *testing.T) {
	kinds := []string{"woken", "wake-failed", "settled"}
	for _, c := range []struct {
		word string
		max  int
		want string
	}{
		{"wake_failed", 2, "wake-failed"},
		{"woke", 2, "woken"},
		{"nope", 2, ""},
		{"setled", 0, ""},
		{"settled", 0, "settled"},
	} {
		if got := Nearest(c.word, kinds, c.max); got != c.want {
			t.Errorf("Nearest(%q, %d) = %q, want %q", c.word, c.max, got, c.want)
		}
	}
}
