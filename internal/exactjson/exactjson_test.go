package exactjson

import (
	"encoding/json"
	"testing"
)

func TestUnmarshalKeepsNumbersAsWritten(t *testing.T) {
	var v map[string]any
	if err := Unmarshal([]byte(`{"big":9007199254740993,"price":1.10,"list":[1e400]}`), &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	if want := `{"big":9007199254740993,"list":[1e400],"price":1.10}`; string(b) != want {
		t.Fatalf("re-encoded %s, want %s", b, want)
	}
}

func TestUnmarshalRefusesWhatJSONUnmarshalRefuses(t *testing.T) {
	for _, in := range []string{``, ` `, `{`, `{} {}`, `{}x`, `[1,]`} {
		var v any
		if err := Unmarshal([]byte(in), &v); err == nil {
			t.Errorf("Unmarshal(%q) = nil error", in)
		}
		if err := json.Unmarshal([]byte(in), &v); err == nil {
			t.Errorf("json.Unmarshal(%q) = nil error: the cases are wrong", in)
		}
	}
	var v any
	if err := Unmarshal([]byte(" {\"a\":1} \n"), &v); err != nil {
		t.Errorf("white space around the value: %v", err)
	}
}

// TestValidUnicodeRefusesWhatDecodesAsReplacement: bytes that are not UTF-8 and lone surrogate
// escapes are refused; pairs, other escapes (an escaped backslash before a "u" among them) and
// plain UTF-8 pass.
func TestValidUnicodeRefusesWhatDecodesAsReplacement(t *testing.T) {
	for body, want := range map[string]bool{
		`"café"`:               true,
		`"\ud83d\ude00"`:       true, // a pair
		`"\\ud800"`:            true, // an escaped backslash, then text
		`"\n\t\u00e9"`:         true,
		"\"caf\xe9\"":          false,
		`"\ud800"`:             false, // a lone high surrogate
		`"\udc00"`:             false, // a lone low surrogate
		`"\ud800\u0041"`:       false, // a high surrogate not followed by a low one
		`"\ud800x"`:            false,
		`{"a":"\udbff","b":1}`: false,
	} {
		if got := ValidUnicode([]byte(body)); got != want {
			t.Errorf("ValidUnicode(%s) = %v, want %v", body, got, want)
		}
	}
}
