package a2awire_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/channels-dev/channels/taskplane/a2awire"
)

// checkRefusal fails the test unless err is a protocol error: a kind with a 4xx HTTP status and
// a JSON-RPC code.
func checkRefusal(t *testing.T, what string, err *a2awire.Error) {
	t.Helper()
	if err == nil {
		return
	}
	if err.Kind == nil || a2awire.KindOf(err).HTTPStatus < 400 || a2awire.KindOf(err).HTTPStatus >= 500 || err.RPC().Code == 0 {
		t.Fatalf("%s: refusal is not a client protocol error: %#v", what, err)
	}
}

// FuzzPushConfigDecode feeds arbitrary bodies and queries to the decoding of push-notification
// configs and their requests. Nothing panics; every refusal is a client protocol error; an
// accepted config has an absolute http(s) URL and a scheme when it authenticates, and re-encodes
// to a config that decodes to itself; accepted requests name what they must.
func FuzzPushConfigDecode(f *testing.F) {
	for _, s := range []string{
		`{"taskId":"t1","id":"c1","url":"https://h.example/hook","token":"tok","authentication":{"scheme":"Bearer","credentials":"cred"}}`,
		`{"task_id":"t1","id":"c1","url":"https://h.example/hook","token":"tok","authentication":{"scheme":"Bearer","credentials":"cred"}}`,
		`{"taskId":"t1","pushNotificationConfig":{"id":"c1","url":"https://h.example/hook","token":"tok","authentication":{"scheme":"Bearer","credentials":"cred"}}}`,
		`{"taskId":"t1","id":"c1","url":"https://h.example/hook","token":"tok","authentication":{"schemes":["Bearer"],"credentials":"cred"}}`,
		`{"taskId":"t1"}`,
		`{"url":"/hook"}`,
		`{"url":"ftp://h.example/"}`,
		`{"url":"https://h.example/","authentication":{"credentials":"x"}}`,
		`{"taskId":"t1","pushNotificationConfigId":"c1"}`,
		`{"taskId":"t1","pageSize":"5","pageToken":"x"}`,
		`{"taskId":"t1","pageSize":1000}`,
		`null`,
	} {
		f.Add([]byte(s), "pageSize=5&pageToken=abc&tenant=acme")
	}
	lim := a2awire.DefaultLimits()
	f.Fuzz(func(t *testing.T, body []byte, query string) {
		if a2awire.CheckBody(body, lim) != nil {
			return
		}
		c, err := a2awire.DecodeTaskPushNotificationConfig(body, "", lim)
		checkRefusal(t, "config", err)
		if err == nil {
			u, perr := url.Parse(c.URL)
			if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(c.URL, " \t\r\n") {
				t.Fatalf("accepted url %q", c.URL)
			}
			if c.Authentication != nil && c.Authentication.Scheme == "" {
				t.Fatalf("accepted authentication without a scheme: %+v", c.Authentication)
			}
			b, merr := json.Marshal(c)
			if merr != nil {
				t.Fatal(merr)
			}
			c2, err := a2awire.DecodeTaskPushNotificationConfig(b, "", lim)
			if err != nil {
				t.Fatalf("re-decode of %s: %v", b, err)
			}
			if diff := cmp.Diff(c, c2); diff != "" {
				t.Fatalf("round trip of %s changed the config (-first +second):\n%s", body, diff)
			}
			if r := a2awire.FromPushConfig(a2awire.ToPushConfig(*c), c.Tenant); r.Token != "" || (r.Authentication != nil && r.Authentication.Credentials != "") {
				t.Fatalf("a read shows secrets: %+v", r)
			}
		}
		if r, err := a2awire.DecodeTaskPushConfigRequest(body, lim); err == nil {
			if r.TaskID == "" || r.ID == "" {
				t.Fatalf("accepted config request without task or id: %+v", r)
			}
		} else {
			checkRefusal(t, "get config", err)
		}
		if r, err := a2awire.DecodeListTaskPushConfigsRequest(body, lim); err == nil {
			if r.TaskID == "" || r.PageSize < 0 || r.PageSize > lim.MaxPageSize {
				t.Fatalf("accepted list request %+v", r)
			}
		} else {
			checkRefusal(t, "list configs", err)
		}
		if q, perr := url.ParseQuery(query); perr == nil {
			r, err := a2awire.ListTaskPushConfigsFromQuery("t1", q, lim)
			checkRefusal(t, "list query", err)
			if err == nil && (r.PageSize < 0 || r.PageSize > lim.MaxPageSize || len(r.PageToken) > 1024) {
				t.Fatalf("accepted list query %+v", r)
			}
			lt, err := a2awire.ListTasksFromQuery(q, lim)
			checkRefusal(t, "list tasks query", err)
			if err == nil && lt.PageSize != nil && (*lt.PageSize < 1 || *lt.PageSize > lim.MaxPageSize) {
				t.Fatalf("accepted list tasks query %+v", lt)
			}
			if st, ok := a2awire.ParseTaskState(q.Get("status")); ok && st != a2awire.TaskStateUnspecified {
				if st2, ok := a2awire.ParseTaskState(string(st)); !ok || st2 != st {
					t.Fatalf("state %q reads back as %q, %v", st, st2, ok)
				}
			}
			if ts := q.Get("statusTimestampAfter"); ts != "" {
				if tm, err := a2awire.ParseTime(ts); err == nil {
					if tm.Location().String() != "UTC" {
						t.Fatalf("ParseTime(%q) is not in UTC", ts)
					}
				}
			}
		}
	})
}
