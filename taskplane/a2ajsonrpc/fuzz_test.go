package a2ajsonrpc

import (
	"encoding/json"
	"testing"

	"github.com/channels-dev/channels/taskplane/a2awire"
)

// FuzzJSONRPCDecode feeds arbitrary bodies to the JSON-RPC envelope and params decoding. It
// never panics; a refusal is a protocol error with a JSON-RPC code; the echoed id is always
// valid JSON; an accepted SendMessage re-encodes to params that decode to the same request.
func FuzzJSONRPCDecode(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"SendStreamingMessage","params":{"message":{"message_id":"m2","role":1,"parts":[{"data":{"a":[1,{"b":null}]}}]},"configuration":{"history_length":2}}}`,
		`{"jsonrpc":"2.0","id":null,"method":"GetTask","params":{"id":"t1","historyLength":"0"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"ListTasks","params":{"status":"TASK_STATE_COMPLETED","pageSize":5,"statusTimestampAfter":"2025-01-01T00:00:00Z","includeArtifacts":true}}`,
		`{"jsonrpc":"2.0","id":3,"method":"CancelTask","params":{"id":"t1","metadata":{"k":"v"}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"SubscribeToTask","params":{"id":"t1","tenant":"acme"}}`,
		`{"jsonrpc":"2.0","id":5,"method":"GetExtendedAgentCard"}`,
		`{"jsonrpc":"2.0","id":{},"method":"GetTask"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"GetTask"}]`,
		`{"jsonrpc":"1.0"}`,
		`not json`,
	} {
		f.Add([]byte(s))
	}
	lim := a2awire.DefaultLimits()
	f.Fuzz(func(t *testing.T, body []byte) {
		if err := a2awire.CheckBody(body, lim); err != nil {
			return
		}
		req, werr := ParseRequest(body)
		if !json.Valid(req.ID) {
			t.Fatalf("id %q is not valid JSON", req.ID)
		}
		if werr != nil {
			if werr.Kind == nil || werr.RPC().Code == 0 {
				t.Fatalf("refusal without a code: %#v", werr)
			}
			return
		}
		check := func(err *a2awire.Error) {
			if err != nil && (err.Kind == nil || err.RPC().Code == 0) {
				t.Fatalf("params refusal without a code: %#v", err)
			}
		}
		if sm, err := a2awire.DecodeSendMessageRequest(req.Params, lim); err == nil {
			m := a2awire.ToMessage(sm.Message)
			if _, ok := m.Metadata[a2awire.ExtElicitation]; !ok {
				b, merr := json.Marshal(map[string]any{"message": a2awire.FromMessage(m, a2awire.View{})})
				if merr != nil {
					t.Fatal(merr)
				}
				if _, err := a2awire.DecodeSendMessageRequest(b, lim); err != nil {
					t.Fatalf("re-decode of %s: %v", b, err)
				}
			}
		} else {
			check(err)
		}
		_, err := a2awire.DecodeGetTaskRequest(req.Params, lim)
		check(err)
		_, err = a2awire.DecodeListTasksRequest(req.Params, lim)
		check(err)
		_, err = a2awire.DecodeCancelTaskRequest(req.Params, lim)
		check(err)
		_, err = a2awire.DecodeSubscribeToTaskRequest(req.Params, lim)
		check(err)
		_, err = a2awire.DecodeTenantRequest(req.Params, lim)
		check(err)
		// The response envelope always encodes.
		if !json.Valid(encode(req.ID, nil, a2awire.Errorf(a2awire.ErrInternal, "x"))) {
			t.Fatal("error response is not valid JSON")
		}
	})
}
