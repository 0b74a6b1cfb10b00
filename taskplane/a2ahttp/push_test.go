package a2ahttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/push"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// Secrets the push tests register; no response may ever contain them.
const (
	pushToken = "push-token-never-echoed"
	pushCreds = "push-credentials-never-echoed"
)

// lateNotifier lets the server be configured with a notifier that is built once the env's plane
// exists.
type lateNotifier struct{ n *push.Notifier }

func (l *lateNotifier) CheckURL(ctx context.Context, raw string) error { return l.n.CheckURL(ctx, raw) }
func (l *lateNotifier) Registered(principal, taskID string)            { l.n.Registered(principal, taskID) }

// newPushEnv starts a server offering push notifications through a notifier with o. run starts
// the notifier; without it nothing is ever sent (the SSRF tests register public names and must
// not reach them).
func newPushEnv(t *testing.T, o push.Options, run bool) (*env, *push.Notifier) {
	t.Helper()
	late := &lateNotifier{}
	e := newEnv(t, func(c *a2aConfig) { c.Push = late })
	o.Poll = 20 * time.Millisecond
	o.Policy = delivery.Policy{MaxAttempts: 4, InitialInterval: 10 * time.Millisecond, MaxInterval: 50 * time.Millisecond}
	late.n = push.New(e.plane, o)
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = late.n.Run(ctx)
		}()
		t.Cleanup(func() {
			cancel()
			<-done
		})
	}
	return e, late.n
}

// hookReceiver records notifications on loopback.
type hookReceiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  []pushReceived
	seen push.SeenIDs
}

type pushReceived struct {
	id     string
	body   []byte
	header http.Header
}

func newHookReceiver(t *testing.T) *hookReceiver {
	h := &hookReceiver{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		if !h.seen.Mark(r.Header.Get(push.HeaderID), time.Now()) {
			h.got = append(h.got, pushReceived{id: r.Header.Get(push.HeaderID), body: b, header: r.Header.Clone()})
		}
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) wait(t *testing.T, n int) []pushReceived {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		h.mu.Lock()
		got := append([]pushReceived(nil), h.got...)
		h.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("receiver got %d notifications, want %d", len(got), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func summary(t *testing.T, body []byte) string {
	t.Helper()
	var r a2awire.StreamResponse
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("notification body %s: %v", body, err)
	}
	switch {
	case raw["task"] != nil:
		var task struct {
			Status struct{ State string } `json:"status"`
		}
		_ = json.Unmarshal(raw["task"], &task)
		return "task " + task.Status.State
	case raw["statusUpdate"] != nil:
		_ = json.Unmarshal(body, &r)
		return "status " + string(r.StatusUpdate.Status.State)
	case raw["artifactUpdate"] != nil:
		_ = json.Unmarshal(body, &r)
		return "artifact " + r.ArtifactUpdate.Artifact.ArtifactID
	}
	return "?"
}

func noSecrets(t *testing.T, what string, body []byte) {
	t.Helper()
	if s := string(body); strings.Contains(s, pushToken) || strings.Contains(s, pushCreds) {
		t.Fatalf("%s echoed a secret: %s", what, s)
	}
}

func TestCardDeclaresPushNotificationsWhenOffered(t *testing.T) {
	e, _ := newPushEnv(t, push.Options{}, false)
	_, _, body := e.raw(http.MethodGet, "/.well-known/agent-card.json", "", nil, nil)
	var card struct {
		Capabilities map[string]any `json:"capabilities"`
	}
	if err := json.Unmarshal(body, &card); err != nil {
		t.Fatal(err)
	}
	if card.Capabilities["pushNotifications"] != true {
		t.Fatalf("capabilities %v", card.Capabilities)
	}
}

func TestPushConfigCRUDOnBothBindings(t *testing.T) {
	forEachBinding(t, func(t *testing.T, binding string) {
		rc := newHookReceiver(t)
		e, _ := newPushEnv(t, push.Options{AllowPrivateNetworks: true}, false)
		alice, bob := e.client(binding, tokenAlice), e.client(binding, tokenBob)
		ctx := ctxT(t)
		task := send(t, alice, userMessage("input"), nil) // stays INPUT_REQUIRED

		created, err := alice.CreateTaskPushConfig(ctx, &a2a.PushConfig{TaskID: task.ID, ID: "hook-1", URL: rc.srv.URL + "/a",
			Token: pushToken, Auth: &a2a.PushAuthInfo{Scheme: "Bearer", Credentials: pushCreds}})
		if err != nil {
			t.Fatal(err)
		}
		if created.ID != "hook-1" || created.TaskID != task.ID || created.URL != rc.srv.URL+"/a" ||
			created.Token != "" || created.Auth == nil || created.Auth.Scheme != "Bearer" || created.Auth.Credentials != "" {
			t.Fatalf("created %+v (auth %+v)", created, created.Auth)
		}
		anon, err := alice.CreateTaskPushConfig(ctx, &a2a.PushConfig{TaskID: task.ID, URL: rc.srv.URL + "/b", Token: pushToken})
		if err != nil {
			t.Fatal(err)
		}
		if anon.ID == "" || anon.Token != "" {
			t.Fatalf("a config without id: %+v", anon)
		}
		got, err := alice.GetTaskPushConfig(ctx, &a2a.GetTaskPushConfigRequest{TaskID: task.ID, ID: "hook-1"})
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != "hook-1" || got.Token != "" || got.Auth == nil || got.Auth.Credentials != "" {
			t.Fatalf("get %+v", got)
		}
		list, err := alice.ListTaskPushConfigs(ctx, &a2a.ListTaskPushConfigRequest{TaskID: task.ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 {
			t.Fatalf("list %d configs, want 2", len(list))
		}
		for _, c := range list {
			if c.Token != "" || (c.Auth != nil && c.Auth.Credentials != "") {
				t.Fatalf("list echoed a secret: %+v", c)
			}
		}

		// Another principal's task and configs look exactly like missing ones.
		if _, err := bob.GetTaskPushConfig(ctx, &a2a.GetTaskPushConfigRequest{TaskID: task.ID, ID: "hook-1"}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("bob's get: %v", err)
		}
		if _, err := bob.ListTaskPushConfigs(ctx, &a2a.ListTaskPushConfigRequest{TaskID: task.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("bob's list: %v", err)
		}
		if _, err := bob.CreateTaskPushConfig(ctx, &a2a.PushConfig{TaskID: task.ID, URL: rc.srv.URL}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("bob's create: %v", err)
		}
		if err := bob.DeleteTaskPushConfig(ctx, &a2a.DeleteTaskPushConfigRequest{TaskID: task.ID, ID: "hook-1"}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("bob's delete: %v", err)
		}

		// Delete is idempotent; a deleted config is TaskNotFound.
		for range 2 {
			if err := alice.DeleteTaskPushConfig(ctx, &a2a.DeleteTaskPushConfigRequest{TaskID: task.ID, ID: "hook-1"}); err != nil {
				t.Fatalf("delete: %v", err)
			}
		}
		if _, err := alice.GetTaskPushConfig(ctx, &a2a.GetTaskPushConfigRequest{TaskID: task.ID, ID: "hook-1"}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("get after delete: %v", err)
		}
		if list, err := alice.ListTaskPushConfigs(ctx, &a2a.ListTaskPushConfigRequest{TaskID: task.ID}); err != nil || len(list) != 1 {
			t.Fatalf("list after delete: %d, %v", len(list), err)
		}
	})
}

func TestPushConfigResponsesNeverEchoCredentials(t *testing.T) {
	rc := newHookReceiver(t)
	e, _ := newPushEnv(t, push.Options{AllowPrivateNetworks: true}, false)
	task := send(t, e.client(a2awire.BindingHTTPJSON, tokenAlice), userMessage("input"), nil)
	config := map[string]any{"url": rc.srv.URL, "token": pushToken, "authentication": map[string]any{"scheme": "Basic", "credentials": pushCreds}}

	// REST: create, get, list, delete, each body checked raw.
	b, _ := json.Marshal(config)
	base := "/tasks/" + string(task.ID) + "/pushNotificationConfigs"
	status, _, body := e.raw(http.MethodPost, base, tokenAlice, b, nil)
	if status != http.StatusOK {
		t.Fatalf("REST create: %d %s", status, body)
	}
	noSecrets(t, "REST create", body)
	var created a2awire.TaskPushNotificationConfig
	if err := json.Unmarshal(body, &created); err != nil || created.ID == "" || created.Authentication == nil || created.Authentication.Scheme != "Basic" {
		t.Fatalf("REST create body %s", body)
	}
	for _, path := range []string{base + "/" + created.ID, base, base + "?pageSize=1"} {
		status, _, body := e.raw(http.MethodGet, path, tokenAlice, nil, nil)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		noSecrets(t, "GET "+path, body)
	}
	if status, _, body = e.raw(http.MethodGet, base, tokenAlice, nil, nil); status != http.StatusOK ||
		!strings.Contains(string(body), `"nextPageToken":""`) || !strings.Contains(string(body), `"configs":[{`) {
		t.Fatalf("REST list body %s", body)
	}

	// JSON-RPC: the same through the methods.
	params := map[string]any{"taskId": task.ID, "id": "rpc-1"}
	for k, v := range config {
		params[k] = v
	}
	for _, call := range []struct {
		method string
		params any
	}{
		{"CreateTaskPushNotificationConfig", params},
		{"GetTaskPushNotificationConfig", map[string]any{"taskId": task.ID, "id": "rpc-1"}},
		{"ListTaskPushNotificationConfigs", map[string]any{"taskId": task.ID}},
	} {
		r := e.rpc(tokenAlice, call.method, call.params, nil)
		if r.Error != nil {
			t.Fatalf("%s: %+v", call.method, r.Error)
		}
		noSecrets(t, call.method, r.Result)
	}
	if r := e.rpc(tokenAlice, "DeleteTaskPushNotificationConfig", map[string]any{"taskId": task.ID, "id": "rpc-1"}, nil); r.Error != nil || string(r.Result) != "{}" {
		t.Fatalf("delete: %s %+v", r.Result, r.Error)
	}
	status, _, body = e.raw(http.MethodDelete, base+"/"+created.ID, tokenAlice, nil, nil)
	if status != http.StatusOK || string(body) != "{}" {
		t.Fatalf("REST delete: %d %s", status, body)
	}
	status, _, body = e.raw(http.MethodGet, base+"/"+created.ID, tokenAlice, nil, nil)
	if _, _, reason := restError(t, body); status != http.StatusNotFound || reason != "TASK_NOT_FOUND" {
		t.Fatalf("REST get after delete: %d %s", status, body)
	}
}

func TestSendWithPushConfigNotifiesALoopbackReceiverOfEveryTransition(t *testing.T) {
	forEachBinding(t, func(t *testing.T, binding string) {
		rc := newHookReceiver(t)
		e, _ := newPushEnv(t, push.Options{AllowPrivateNetworks: true}, true)
		c := e.client(binding, tokenAlice)
		task := send(t, c, userMessage("steps"), &a2a.SendMessageConfig{PushConfig: &a2a.PushConfig{
			URL: rc.srv.URL + "/notify", Token: pushToken, Auth: &a2a.PushAuthInfo{Scheme: "Bearer", Credentials: pushCreds}}})
		if task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("send returned %s", task.Status.State)
		}
		// Every status change and artifact update in the task's log after the registration (the
		// acceptance: the log's first event), in order, after the snapshot.
		evs, err := e.plane.Events(ctxT(t), "alice", string(task.ID), 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"task TASK_STATE_SUBMITTED"}
		for _, ev := range evs {
			switch ev.Kind {
			case taskplane.EventStatus:
				want = append(want, "status "+string(a2awire.FromState(ev.Status.Status.State)))
			case taskplane.EventArtifact:
				want = append(want, "artifact "+ev.Artifact.Artifact.ID)
			}
		}
		if len(want) < 5 {
			t.Fatalf("the log holds only %v", want)
		}
		got := rc.wait(t, len(want))
		var kinds []string
		for _, r := range got {
			kinds = append(kinds, summary(t, r.body))
			if _, err := push.Verify(r.header, r.body, pushToken, time.Now(), 0); err != nil {
				t.Errorf("%s: %v", r.id, err)
			}
			if r.header.Get("Authorization") != "Bearer "+pushCreds || r.header.Get(push.HeaderToken) != pushToken ||
				r.header.Get(push.HeaderTokenLegacy) != pushToken || !strings.HasPrefix(r.id, string(task.ID)+":") {
				t.Errorf("%s headers %v", r.id, r.header)
			}
		}
		if strings.Join(kinds, ", ") != strings.Join(want, ", ") {
			t.Fatalf("notifications %v\nwant %v", kinds, want)
		}
		if want[len(want)-1] != "status TASK_STATE_COMPLETED" {
			t.Fatalf("the last notification is %s", want[len(want)-1])
		}
		// The config the send registered is listed like any other, without its secrets.
		list, err := c.ListTaskPushConfigs(ctxT(t), &a2a.ListTaskPushConfigRequest{TaskID: task.ID})
		if err != nil || len(list) != 1 || list[0].Token != "" || list[0].Auth.Credentials != "" {
			t.Fatalf("list after send: %+v, %v", list, err)
		}
	})
}

func TestSSRFArmsAreRefusedWithoutTheOptIn(t *testing.T) {
	resolver := push.ResolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		switch host {
		case "hooks.example.com":
			return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
		case "internal.example.com":
			return []netip.Addr{netip.MustParseAddr("10.0.0.8")}, nil
		}
		return nil, errors.New("no such host (test resolver)")
	})
	forEachBinding(t, func(t *testing.T, binding string) {
		// The notifier never runs: nothing is sent, only registrations are judged.
		e, _ := newPushEnv(t, push.Options{Resolver: resolver}, false)
		c := e.client(binding, tokenAlice)
		task := send(t, c, userMessage("input"), nil)
		for _, u := range []string{
			"https://10.1.2.3/hook",             // address arm: https to a private address
			"https://127.0.0.1:9/hook",          // loopback
			"https://169.254.169.254/latest/",   // cloud metadata
			"https://internal.example.com/hook", // a name resolving to a private address
			"http://hooks.example.com/hook",     // scheme arm: http to a public name
		} {
			_, err := c.CreateTaskPushConfig(ctxT(t), &a2a.PushConfig{TaskID: task.ID, URL: u})
			if !errors.Is(err, a2a.ErrInvalidParams) {
				t.Errorf("create %s: err = %v, want invalid params", u, err)
			}
			_, err = c.SendMessage(ctxT(t), &a2a.SendMessageRequest{Message: userMessage("complete"),
				Config: &a2a.SendMessageConfig{PushConfig: &a2a.PushConfig{URL: u}}})
			if !errors.Is(err, a2a.ErrInvalidParams) {
				t.Errorf("send with %s: err = %v, want invalid params", u, err)
			}
		}
		// Only the first task exists: no refused send created one.
		page, err := e.plane.ListTasks(ctxT(t), "alice", taskplane.ListQuery{PageSize: 100})
		if err != nil || page.TotalSize != 1 {
			t.Fatalf("tasks after refused sends: %d, %v", page.TotalSize, err)
		}
		// https to a public name is admitted (and, the notifier not running, never contacted).
		if _, err := c.CreateTaskPushConfig(ctxT(t), &a2a.PushConfig{TaskID: task.ID, URL: "https://hooks.example.com/hook"}); err != nil {
			t.Fatalf("https to a public name: %v", err)
		}
	})
}

// On Postgres, whose text refuses NUL and invalid UTF-8, an id holding one is a clean answer on
// both bindings — not found, an empty list, INVALID_PARAMS, or a delete's success — never a 500 /
// -32603 with an error logged per request: task ids (get, cancel, subscribe, push configs),
// context ids (list filter, send), message ids, and push config ids.
func TestIDsNoStoreCanHoldAreCleanAnswersOnBothBindings(t *testing.T) {
	late := &lateNotifier{}
	e := newEnvOn(t, storetest.OpenPostgres(t), nil, func(c *a2aConfig) { c.Push = late })
	late.n = push.New(e.plane, push.Options{AllowPrivateNetworks: true})
	task := send(t, e.client(a2awire.BindingHTTPJSON, tokenAlice), userMessage("input"), nil)
	id := string(task.ID)
	const nul = "a\x00b"
	msg := func(f map[string]any) map[string]any {
		m := map[string]any{"messageId": "m-nul", "role": "ROLE_USER", "parts": []any{map[string]any{"text": "hi"}}}
		for k, v := range f {
			m[k] = v
		}
		return map[string]any{"message": m}
	}
	for _, c := range []struct {
		method string
		params map[string]any
		code   int // 0: success
	}{
		{"GetTask", map[string]any{"id": nul}, -32001},
		{"CancelTask", map[string]any{"id": nul}, -32001},
		{"ListTasks", map[string]any{"contextId": nul}, 0},
		{"SendMessage", msg(map[string]any{"messageId": nul}), -32602},
		{"SendMessage", msg(map[string]any{"contextId": nul}), -32602},
		{"SendMessage", msg(map[string]any{"taskId": nul}), -32602},
		{"CreateTaskPushNotificationConfig", map[string]any{"taskId": id, "url": "http://127.0.0.1:9/x", "id": nul}, -32602},
		{"GetTaskPushNotificationConfig", map[string]any{"taskId": id, "id": nul}, -32001},
		{"GetTaskPushNotificationConfig", map[string]any{"taskId": nul, "id": "x"}, -32001},
		{"ListTaskPushNotificationConfigs", map[string]any{"taskId": nul}, -32001},
		{"DeleteTaskPushNotificationConfig", map[string]any{"taskId": id, "id": nul}, 0},
	} {
		r := e.rpc(tokenAlice, c.method, c.params, nil)
		switch {
		case c.code == 0 && r.Error != nil:
			t.Errorf("JSON-RPC %s %v: error %d %s, want success", c.method, c.params, r.Error.Code, r.Error.Message)
		case c.code != 0 && (r.Error == nil || r.Error.Code != c.code):
			t.Errorf("JSON-RPC %s %v: %+v, want error %d", c.method, c.params, r.Error, c.code)
		}
	}
	b, _ := json.Marshal(map[string]any{"url": "http://127.0.0.1:9/x", "id": nul})
	for _, c := range []struct {
		method, path string
		body         []byte
		status       int
	}{
		{http.MethodGet, "/tasks/a%00b", nil, http.StatusNotFound},
		{http.MethodGet, "/tasks/%FF", nil, http.StatusNotFound},
		{http.MethodPost, "/tasks/a%00b:cancel", nil, http.StatusNotFound},
		{http.MethodGet, "/tasks/a%00b:subscribe", nil, http.StatusNotFound},
		{http.MethodGet, "/tasks?contextId=a%00b", nil, http.StatusOK},
		{http.MethodGet, "/tasks?contextId=%FF", nil, http.StatusOK},
		{http.MethodGet, "/tasks/a%00b/pushNotificationConfigs", nil, http.StatusNotFound},
		{http.MethodPost, "/tasks/" + id + "/pushNotificationConfigs", b, http.StatusBadRequest},
		{http.MethodGet, "/tasks/" + id + "/pushNotificationConfigs/a%00b", nil, http.StatusNotFound},
		{http.MethodDelete, "/tasks/" + id + "/pushNotificationConfigs/a%00b", nil, http.StatusOK},
	} {
		if status, _, body := e.raw(c.method, c.path, tokenAlice, c.body, nil); status != c.status {
			t.Errorf("REST %s %s: %d %s, want %d", c.method, c.path, status, body, c.status)
		}
	}
}

// On a REST route whose body is the request (body "*"), a field the path does not bind comes
// from the body, tenant included, as SendMessage reads it: CancelTask and
// CreateTaskPushNotificationConfig echo the body's tenant (in the task locator, in the config)
// as JSON-RPC does with params.tenant, and a path tenant still wins.
func TestARESTBodyTenantIsReadWhereThePathHasNone(t *testing.T) {
	e, _ := newPushEnv(t, push.Options{AllowPrivateNetworks: true}, false)
	ext := map[string]string{"A2A-Extensions": a2awire.ExtOutfitterTask}
	task := send(t, e.client(a2awire.BindingHTTPJSON, tokenAlice), userMessage("input"), nil)

	status, _, b := e.raw(http.MethodPost, "/tasks/"+string(task.ID)+"/pushNotificationConfigs", tokenAlice,
		[]byte(`{"tenant":"acme","url":"http://127.0.0.1:9/hook"}`), nil)
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); status != http.StatusOK || err != nil || cfg["tenant"] != "acme" {
		t.Errorf("create with a body tenant: %d %s, want the config with tenant acme", status, b)
	}
	status, _, b = e.raw(http.MethodPost, "/other/tasks/"+string(task.ID)+"/pushNotificationConfigs", tokenAlice,
		[]byte(`{"tenant":"acme","url":"http://127.0.0.1:9/hook"}`), nil)
	if err := json.Unmarshal(b, &cfg); status != http.StatusOK || err != nil || cfg["tenant"] != "other" {
		t.Errorf("create with path and body tenants: %d %s, want the path's tenant, other", status, b)
	}

	status, _, b = e.raw(http.MethodPost, "/tasks/"+string(task.ID)+":cancel", tokenAlice, []byte(`{"tenant":"acme"}`), ext)
	var canceled struct {
		Metadata map[string]map[string]any `json:"metadata"`
	}
	if err := json.Unmarshal(b, &canceled); status != http.StatusOK || err != nil ||
		canceled.Metadata[a2awire.ExtOutfitterTask]["tenant"] != "acme" {
		t.Errorf("cancel with a body tenant: %d %s, want the locator's tenant acme", status, b)
	}
	status, _, b = e.raw(http.MethodPost, "/other/tasks/"+string(task.ID)+":cancel", tokenAlice, []byte(`{"tenant":"acme"}`), ext)
	if err := json.Unmarshal(b, &canceled); status != http.StatusOK || err != nil ||
		canceled.Metadata[a2awire.ExtOutfitterTask]["tenant"] != "other" {
		t.Errorf("cancel with path and body tenants: %d %s, want the path's tenant, other", status, b)
	}
}
