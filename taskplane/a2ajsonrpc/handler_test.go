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
