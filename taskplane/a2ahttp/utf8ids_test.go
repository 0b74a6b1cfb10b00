package a2ahttp_test

import (
	"encoding/json"
	"net/http"
	"testing"
)

// Two sends whose messageIds differ only in a lone surrogate escape or in a byte that is not
// UTF-8 are two messages: each must be refused (as ProtoJSON refuses such strings) or make its
// own task; neither may be answered as the other's duplicate.
func TestNonUTF8MessageIDsDoNotCollide(t *testing.T) {
	e := newEnv(t)
	send := func(id string) (int, string) {
		body := []byte(`{"message":{"messageId":"` + id + `","role":"ROLE_USER","parts":[{"text":"hello"}]},"configuration":{"returnImmediately":true}}`)
		st, _, out := e.raw(http.MethodPost, "/message:send", tokenAlice, body, nil)
		var r struct {
			Task struct {
				ID string `json:"id"`
			} `json:"task"`
		}
		_ = json.Unmarshal(out, &r)
		return st, r.Task.ID
	}
	for _, pair := range [][2]string{{`\ud800`, `\udbff`}, {"caf\xe9", "caf\xe8"}} {
		st1, t1 := send(pair[0])
		st2, t2 := send(pair[1])
		if st1 == http.StatusOK && st2 == http.StatusOK && t1 == t2 {
			t.Errorf("messageIds %q and %q: both answered with task %s (the second send was taken as a duplicate)", pair[0], pair[1], t1)
		}
	}
}
