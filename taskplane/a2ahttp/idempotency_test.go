package a2ahttp_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
)

// A client's retry is often written by another encoder than its original (a proxy, a queue
// worker, another language's protobuf library): empty lists and objects for absent ones, object
// keys in another order, 1.0 for 1, escapes for characters. Each such retry is the same send and
// replays its outcome; a retry that changes what was sent is a conflict.
func TestARetryWrittenByAnotherEncoderReplays(t *testing.T) {
	e := newEnv(t)
	const text = `{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}]}}`
	same := []struct{ name, orig, retry string }{
		{"keys reordered, whitespace", text,
			"{ \"message\" : {\n \"parts\":[ {\"text\" : \"x\"} ],\n \"role\":\"ROLE_USER\", \"messageId\":\"%s\" } }"},
		{"message metadata {} for absent", text,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}],"metadata":{}}}`},
		{"request metadata {} for absent", text,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}]},"metadata":{}}`},
		{"extensions [] for absent", text,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}],"extensions":[]}}`},
		{"referenceTaskIds [] for absent", text,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}],"referenceTaskIds":[]}}`},
		{"part defaults written out", text,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x","mediaType":"","filename":"","metadata":{}}]}}`},
		{"data keys reordered",
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"a":1,"b":{"c":2,"d":3}}}]}}`,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"b":{"d":3,"c":2},"a":1}}]}}`},
		{"data number 1.0 for 1",
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"a":[1,20]}}]}}`,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"a":[1.0,2e1]}}]}}`},
		{"data string escaped",
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"a":"caf\u00e9"}}]}}`,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"a":"café"}}]}}`},
		{"message metadata number 1.0 for 1",
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}],"metadata":{"a":{"n":1}}}}`,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}],"metadata":{"a":{"n":1.0}}}}`},
		{"data number 12.50 for 1.25e1",
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":[1.25e1,-0]}]}}`,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":[12.50,0]}]}}`},
		{"data character past U+FFFF escaped as a pair",
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"s":"\uD83D\uDE00"}}]}}`,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"s":"😀"}}]}}`},
		{"request metadata number 1e0 for 1",
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}]},"metadata":{"a":[1]}}`,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}]},"metadata":{"a":[1e0]}}`},
	}
	for _, c := range same {
		id := uuid.NewString()
		st1, _, b1 := e.raw(http.MethodPost, "/message:send", tokenAlice, fmt.Appendf(nil, c.orig, id), nil)
		st2, _, b2 := e.raw(http.MethodPost, "/message:send", tokenAlice, fmt.Appendf(nil, c.retry, id), nil)
		if st1 != http.StatusOK || st2 != http.StatusOK {
			t.Errorf("%s: original %d, retry %d (%s), want both 200", c.name, st1, st2, b2)
			continue
		}
		if taskID(t, b1) != taskID(t, b2) {
			t.Errorf("%s: the retry answered with another task", c.name)
		}
	}
	different := []struct{ name, orig, retry string }{
		{"data value", `{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"a":1}}]}}`,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"a":2}}]}}`},
		{"data number for string", `{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"a":1}}]}}`,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"a":"1"}}]}}`},
		{"data empty object for null", `{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"a":null}}]}}`,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"a":{}}}]}}`},
		{"metadata value", `{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}]},"metadata":{"a":1}}`,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}]},"metadata":{"a":1.5}}`},
		{"metadata integer a double cannot tell apart",
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}]},"metadata":{"orderId":9007199254740993}}`,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}]},"metadata":{"orderId":9007199254740992}}`},
		{"data integer a double cannot tell apart",
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"account":12345678901234567890}}]}}`,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":{"account":12345678901234567891}}]}}`},
		{"data lone surrogates", `{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":"\ud800"}]}}`,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"data":"\udbff"}]}}`},
		{"data bytes that are not UTF-8", "{\"message\":{\"messageId\":\"%s\",\"role\":\"ROLE_USER\",\"parts\":[{\"data\":{\"s\":\"\xff\"}}]}}",
			"{\"message\":{\"messageId\":\"%s\",\"role\":\"ROLE_USER\",\"parts\":[{\"data\":{\"s\":\"\xfe\"}}]}}"},
		{"metadata nested empty object added", text,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}],"metadata":{"a":{}}}}`},
		{"extension added", text,
			`{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"x"}],"extensions":["https://example.com/ext"]}}`},
	}
	for _, c := range different {
		id := uuid.NewString()
		st1, _, _ := e.raw(http.MethodPost, "/message:send", tokenAlice, fmt.Appendf(nil, c.orig, id), nil)
		st2, _, b2 := e.raw(http.MethodPost, "/message:send", tokenAlice, fmt.Appendf(nil, c.retry, id), nil)
		if st1 != http.StatusOK || st2 != http.StatusConflict {
			t.Errorf("%s: original %d, retry %d (%s), want 200 then 409", c.name, st1, st2, b2)
		}
	}
}

// taskID is the id of the task a SendMessage answer carries.
func taskID(t *testing.T, body []byte) string {
	t.Helper()
	var r struct {
		Task struct{ ID string } `json:"task"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Task.ID == "" {
		t.Fatalf("not a task answer: %s", body)
	}
	return r.Task.ID
}

// A send the task plane refuses (a messageId no store can hold) is refused before the agent is
// asked for a direct reply: the agent does no work for a message that is not accepted.
// With FreshSends (every send new work) too.
func TestARefusedSendIsRefusedBeforeTheAgentIsAsked(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		e := newEnv(t, func(c *a2aConfig) { c.FreshSends = fresh })
		asked := e.exec.direct.Load()
		for _, msg := range []map[string]any{wireMsg("a\x00b", "direct"), func() map[string]any {
			m := wireMsg("m-ctx", "direct")
			m["contextId"] = "c\x00d"
			return m
		}()} {
			st, _, b := e.raw(http.MethodPost, "/message:send", tokenAlice, sendBody(t, msg, nil), nil)
			if code, _, reason := restError(t, b); st != http.StatusBadRequest || code != 400 || reason != "INVALID_PARAMS" {
				t.Fatalf("fresh sends %v: %v: %d %s, want 400 INVALID_PARAMS", fresh, msg, st, b)
			}
		}
		if n := e.exec.direct.Load() - asked; n != 0 {
			t.Fatalf("fresh sends %v: the agent was asked for a direct reply %d times for refused sends", fresh, n)
		}
	}
}
