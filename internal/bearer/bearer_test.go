package bearer

import "testing"

// TestTheSchemeIsCaseInsensitiveAndTheTokenTrimmed: "Bearer", "bearer" and "BEARER" all carry a
// token, spaces around it are not part of it; another scheme, or none, carries nothing.
func TestTheSchemeIsCaseInsensitiveAndTheTokenTrimmed(t *testing.T) {
	for h, want := range map[string]string{
		"Bearer abc":      "abc",
		"bearer abc":      "abc",
		"BEARER abc":      "abc",
		"  Bearer   abc ": "abc",
		"Basic abc":       "",
		"Bearer":          "",
		"Bearer   ":       "",
		"abc":             "",
		"":                "",
	} {
		got, ok := Token(h)
		if got != want || ok != (want != "") {
			t.Errorf("Token(%q) = %q, %v; want %q", h, got, ok, want)
		}
	}
}
