package a2ajsonrpc

import (
	"strings"
	"testing"
)

// TestARequestIDIsBounded: a request's id is echoed in its answer and in every event of a stream,
// so one longer than MaxIDBytes is refused (INVALID_REQUEST, answered with a null id) rather than
// repeated; one at the bound is kept.
func TestARequestIDIsBounded(t *testing.T) {
	body := func(id string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":"` + id + `","method":"GetTask","params":{"id":"t1"}}`)
	}
	req, err := ParseRequest(body(strings.Repeat("x", MaxIDBytes-2)))
	if err != nil || len(req.ID) != MaxIDBytes {
		t.Fatalf("an id of %d bytes: %v (id %d bytes)", MaxIDBytes, err, len(req.ID))
	}
	req, err = ParseRequest(body(strings.Repeat("x", 64<<10)))
	if err == nil || err.RPC().Code != -32600 || string(req.ID) != "null" {
		t.Fatalf("an id of 64 KiB: %v, answered with id of %d bytes; want INVALID_REQUEST with a null id", err, len(req.ID))
	}
}

// TestMalformedJSONStartingWithABracketIsAParseError: a body that is not valid JSON is -32700
// whatever its first character (JSON-RPC 2.0 answers a truncated batch so); a well-formed batch,
// which A2A does not define, is -32600. Both carry a null id.
func TestMalformedJSONStartingWithABracketIsAParseError(t *testing.T) {
	for body, want := range map[string]int{
		`[{"jsonrpc":"2.0","method":"GetTask","params":{"id":"t1"},"id":"1"},{"jsonrpc":"2.0","method"]`: -32700,
		`[`:    -32700,
		` [1,`: -32700,
		`[{"jsonrpc":"2.0","method":"GetTask","params":{"id":"t1"},"id":1}]`: -32600,
	} {
		req, err := ParseRequest([]byte(body))
		if err == nil {
			t.Fatalf("%s: accepted", body)
		}
		if code := err.RPC().Code; code != want {
			t.Errorf("%s: code %d (%s), want %d", body, code, err.Message, want)
		}
		if string(req.ID) != "null" {
			t.Errorf("%s: id %s, want null", body, req.ID)
		}
	}
}
