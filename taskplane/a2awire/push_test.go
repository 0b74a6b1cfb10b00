package a2awire_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

func TestDecodeTaskPushNotificationConfig(t *testing.T) {
	lim := a2awire.DefaultLimits()
	want := &a2awire.TaskPushNotificationConfig{TaskID: "t1", ID: "c1", URL: "https://h.example/hook", Token: "tok",
		Authentication: &a2awire.AuthenticationInfo{Scheme: "Bearer", Credentials: "cred"}}
	for name, body := range map[string]string{
		"v1":          `{"taskId":"t1","id":"c1","url":"https://h.example/hook","token":"tok","authentication":{"scheme":"Bearer","credentials":"cred"}}`,
		"snake_case":  `{"task_id":"t1","id":"c1","url":"https://h.example/hook","token":"tok","authentication":{"scheme":"Bearer","credentials":"cred"}}`,
		"rc-nested":   `{"taskId":"t1","pushNotificationConfig":{"id":"c1","url":"https://h.example/hook","token":"tok","authentication":{"scheme":"Bearer","credentials":"cred"}}}`,
		"v03-schemes": `{"taskId":"t1","id":"c1","url":"https://h.example/hook","token":"tok","authentication":{"schemes":["Bearer"],"credentials":"cred"}}`,
	} {
		got, err := a2awire.DecodeTaskPushNotificationConfig(json.RawMessage(body), "", lim)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	for name, c := range map[string]struct{ body, field string }{
		"no url":         {`{"taskId":"t1"}`, "url"},
		"relative url":   {`{"url":"/hook"}`, "url"},
		"ftp":            {`{"url":"ftp://h.example/"}`, "url"},
		"no scheme":      {`{"url":"https://h.example/","authentication":{"credentials":"x"}}`, "authentication.scheme"},
		"token too long": {`{"url":"https://h.example/","token":"` + strings.Repeat("x", 5000) + `"}`, "token"},
	} {
		_, err := a2awire.DecodeTaskPushNotificationConfig(json.RawMessage(c.body), "", lim)
		if err == nil || len(err.Violations) == 0 || err.Violations[0].Field != c.field {
			t.Errorf("%s: err = %v, want a violation of %s", name, err, c.field)
		}
	}
}

func TestSendConfigurationCarriesThePushConfig(t *testing.T) {
	req, err := a2awire.DecodeSendMessageRequest(json.RawMessage(`{"message":{"messageId":"m1","role":"ROLE_USER",
		"parts":[{"text":"hi"}]},"configuration":{"taskPushNotificationConfig":{"url":"https://h.example/hook","token":"tok"}}}`),
		a2awire.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	c := req.Configuration.PushNotificationConfig
	if !req.Configuration.PushConfig || c == nil || c.URL != "https://h.example/hook" || c.Token != "tok" {
		t.Fatalf("configuration: %+v", req.Configuration)
	}
	_, err = a2awire.DecodeSendMessageRequest(json.RawMessage(`{"message":{"messageId":"m1","role":"ROLE_USER",
		"parts":[{"text":"hi"}]},"configuration":{"taskPushNotificationConfig":{"token":"tok"}}}`), a2awire.DefaultLimits())
	if err == nil || err.Violations[0].Field != "configuration.taskPushNotificationConfig.url" {
		t.Fatalf("config without url: %v", err)
	}
}

func TestPushConfigReadsNeverEmitSecrets(t *testing.T) {
	c := taskplane.PushConfig{ID: "c1", TaskID: "t1", URL: "https://h.example/hook", Token: "tok",
		Auth: &taskplane.PushAuth{Scheme: "Basic", Credentials: "dXNlcjpwYXNz"}}
	b, err := json.Marshal(a2awire.FromPushConfig(c, ""))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != `{"id":"c1","taskId":"t1","url":"https://h.example/hook","authentication":{"scheme":"Basic"}}` {
		t.Fatalf("wire config %s", got)
	}
	back := a2awire.ToPushConfig(a2awire.TaskPushNotificationConfig{URL: "u", Token: "tok",
		Authentication: &a2awire.AuthenticationInfo{Scheme: "Bearer", Credentials: "cred"}})
	if back.Token != "tok" || back.Auth.Credentials != "cred" {
		t.Fatalf("ToPushConfig dropped the secrets it must store: %+v", back)
	}
}

func TestPushConfigRequests(t *testing.T) {
	lim := a2awire.DefaultLimits()
	if r, err := a2awire.DecodeTaskPushConfigRequest(json.RawMessage(`{"taskId":"t1","id":"c1"}`), lim); err != nil || r.TaskID != "t1" || r.ID != "c1" {
		t.Fatalf("get: %+v, %v", r, err)
	}
	if r, err := a2awire.DecodeTaskPushConfigRequest(json.RawMessage(`{"taskId":"t1","pushNotificationConfigId":"c1"}`), lim); err != nil || r.ID != "c1" {
		t.Fatalf("get by the v0.3 name: %+v, %v", r, err)
	}
	if _, err := a2awire.DecodeTaskPushConfigRequest(json.RawMessage(`{"taskId":"t1"}`), lim); err == nil {
		t.Fatal("get without id accepted")
	}
	if r, err := a2awire.DecodeListTaskPushConfigsRequest(json.RawMessage(`{"taskId":"t1","pageSize":"5","pageToken":"x"}`), lim); err != nil ||
		r.PageSize != 5 || r.PageToken != "x" {
		t.Fatalf("list: %+v, %v", r, err)
	}
	if _, err := a2awire.DecodeListTaskPushConfigsRequest(json.RawMessage(`{"taskId":"t1","pageSize":1000}`), lim); err == nil {
		t.Fatal("page size 1000 accepted")
	}
	r, err := a2awire.ListTaskPushConfigsFromQuery("t1", url.Values{"page_size": {"3"}}, lim)
	if err != nil || r.TaskID != "t1" || r.PageSize != 3 {
		t.Fatalf("list from query: %+v, %v", r, err)
	}
	b, _ := json.Marshal(a2awire.ListTaskPushConfigsResponse{Configs: []a2awire.TaskPushNotificationConfig{}})
	if string(b) != `{"configs":[],"nextPageToken":""}` {
		t.Fatalf("empty list %s", b)
	}
}
