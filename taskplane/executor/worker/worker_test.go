package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/executor/worker"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

const (
	tokenAll   = "worker-token-all-0123456789"
	tokenBob   = "worker-token-bob-0123456789"
	tokenOther = "worker-token-other-012345678"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Microsecond)
	return c.now
}

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

type env struct {
	plane *taskplane.Plane
	clock *clock
	srv   *httptest.Server
	// serving counts the requests whose handler has not returned.
	serving atomic.Int64

	mu    sync.Mutex
	ended []time.Duration // the turns the API timed (Config.TurnEnded)
}

// turnsEnded returns the durations of the turns the API timed so far.
func (e *env) turnsEnded() []time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.ended)
}

func eachDriver(t *testing.T, fn func(t *testing.T, e *env), opts ...taskplane.Option) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		fn(t, newEnv(t, open(t), opts...))
	})
}

// newEnv serves the worker API over a plane on st, its clock fixed, with the tokens all (every
// principal), bob (bob's) and other, until t ends.
func newEnv(t *testing.T, st store.Store, opts ...taskplane.Option) *env {
	t.Helper()
	c := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	p := taskplane.New(st, append([]taskplane.Option{taskplane.WithClock(c.Now)}, opts...)...)
	e := &env{plane: p, clock: c}
	api, err := worker.New(p, worker.Config{Lease: time.Minute, MaxWait: 2 * time.Second, Poll: 20 * time.Millisecond,
		Tokens: []worker.Token{{Name: "all", Token: tokenAll}, {Name: "bob", Token: tokenBob, Principals: []string{"bob"}},
			{Name: "other", Token: tokenOther}},
		TurnEnded: func(d time.Duration) { e.mu.Lock(); e.ended = append(e.ended, d); e.mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(api.Pattern(), api)
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.serving.Add(1)
		defer e.serving.Add(-1)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) accept(t *testing.T, principal, source, id string) *taskplane.Task {
	t.Helper()
	ev := taskplane.Event{Principal: principal, Source: source, Identity: id, ConversationKey: id,
		Message: taskplane.Message{ID: id, Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("please " + id)}}}
	acc, err := e.plane.Accept(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	return acc.Task
}

// call makes one API call and returns the status and decoded body.
func (e *env) call(t *testing.T, method, path, token, lease string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lease != "" {
		req.Header.Set(worker.LeaseHeader, lease)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

func (e *env) claim(t *testing.T, token string) (taskID, lease string) {
	t.Helper()
	code, body := e.call(t, http.MethodPost, "/worker/v1/claim?wait=1s", token, "", nil)
	if code != http.StatusOK {
		t.Fatalf("claim: %d %v", code, body)
	}
	// The lease's length comes with it: a worker's clock need not agree with leaseUntil's.
	if ms, _ := body["leaseMs"].(float64); ms != float64(time.Minute.Milliseconds()) {
		t.Fatalf("claim: leaseMs %v, want the configured lease, %d", body["leaseMs"], time.Minute.Milliseconds())
	}
	return body["taskId"].(string), body["lease"].(string)
}

// waitServing waits, at most limit, until n requests are being served; false if they never were.
func (e *env) waitServing(n int64, limit time.Duration) bool {
	for deadline := time.Now().Add(limit); e.serving.Load() != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

func errCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func TestWorkerAPIAuthority(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		if code, _ := e.call(t, http.MethodPost, "/worker/v1/claim", "", "", nil); code != http.StatusUnauthorized {
			t.Fatalf("claim without a token: %d", code)
		}
		if code, _ := e.call(t, http.MethodPost, "/worker/v1/claim", "not-a-worker-token-at-all", "", nil); code != http.StatusUnauthorized {
			t.Fatalf("claim with a wrong token: %d", code)
		}
		a := e.accept(t, "alice", taskplane.SourceA2A, "m-a")
		b := e.accept(t, "alice", taskplane.SourceA2A, "m-b")
		idA, leaseA := e.claim(t, tokenAll)
		idB, leaseB := e.claim(t, tokenAll)
		if idA != a.ID || idB != b.ID {
			t.Fatalf("claimed %s, %s; want %s, %s", idA, idB, a.ID, b.ID)
		}
		// The claimed task reads back, WORKING, its history marked untrusted.
		code, view := e.call(t, http.MethodGet, "/worker/v1/tasks/"+idA, tokenAll, leaseA, nil)
		if code != http.StatusOK || view["state"] != string(taskplane.StateWorking) {
			t.Fatalf("read: %d %v", code, view)
		}
		h := view["history"].([]any)[0].(map[string]any)
		if h["untrusted"] != true || !strings.HasPrefix(h["parts"].([]any)[0].(map[string]any)["text"].(string), "<untrusted-content id=") {
			t.Fatalf("history %v", h)
		}

		// Another task's ID with this lease: refused.
		if code, body := e.call(t, http.MethodGet, "/worker/v1/tasks/"+idB, tokenAll, leaseA, nil); code != http.StatusConflict || errCode(body) != "no-turn" {
			t.Fatalf("read of another task with A's lease: %d %v", code, body)
		}
		if code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+idB+"/complete", tokenAll, leaseA,
			map[string]any{"response": "hijack"}); code != http.StatusConflict || errCode(body) != "no-turn" {
			t.Fatalf("complete of another task with A's lease: %d %v", code, body)
		}
		// Another worker presenting A's lease: refused (the lease is bound to the worker).
		if code, _ := e.call(t, http.MethodGet, "/worker/v1/tasks/"+idA, tokenOther, leaseA, nil); code != http.StatusConflict {
			t.Fatalf("A's lease under another worker token: %d", code)
		}
		// A missing or forged lease: refused.
		if code, _ := e.call(t, http.MethodGet, "/worker/v1/tasks/"+idA, tokenAll, "", nil); code != http.StatusConflict {
			t.Fatalf("no lease: %d", code)
		}

		// Complete A; A is finished: every further call is refused.
		code, done := e.call(t, http.MethodPost, "/worker/v1/tasks/"+idA+"/complete", tokenAll, leaseA,
			map[string]any{"response": "all done"})
		if code != http.StatusOK || done["state"] != string(taskplane.StateCompleted) {
			t.Fatalf("complete: %d %v", code, done)
		}
		for _, c := range []struct{ method, path string }{
			{http.MethodGet, ""}, {http.MethodPost, "/complete"}, {http.MethodPost, "/outputs"}, {http.MethodPost, "/heartbeat"},
		} {
			if code, body := e.call(t, c.method, "/worker/v1/tasks/"+idA+c.path, tokenAll, leaseA,
				map[string]any{"name": "x", "value": map[string]any{}}); code != http.StatusConflict || errCode(body) != "no-turn" {
				t.Fatalf("%s %s on a finished task: %d %v", c.method, c.path, code, body)
			}
		}

		// B's lease goes stale; another worker takes B; the stale lease stays refused.
		e.clock.Advance(2 * time.Minute)
		if code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+idB+"/heartbeat", tokenAll, leaseB, nil); code != http.StatusConflict {
			t.Fatalf("heartbeat with a stale lease: %d %v", code, body)
		}
		idB2, leaseB2 := e.claim(t, tokenOther)
		if idB2 != idB {
			t.Fatalf("re-claim got %s, want %s", idB2, idB)
		}
		if code, _ := e.call(t, http.MethodPost, "/worker/v1/tasks/"+idB+"/reject", tokenAll, leaseB, map[string]any{"reason": "late"}); code != http.StatusConflict {
			t.Fatalf("reject with the stale lease: %d", code)
		}
		if code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+idB+"/reject", tokenOther, leaseB2,
			map[string]any{"reason": "out of scope"}); code != http.StatusOK || body["state"] != string(taskplane.StateRejected) {
			t.Fatalf("reject with the live lease: %d %v", code, body)
		}
		task, err := e.plane.GetTask(context.Background(), "alice", idB)
		if err != nil || task.Status.State != taskplane.StateRejected || task.Status.Message.Parts[0].Text != "out of scope" {
			t.Fatalf("task B %+v %v", task.Status, err)
		}
	})
}

func TestWorkerTokenServesItsPrincipalsOnly(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		e.accept(t, "alice", taskplane.SourceA2A, "m-a")
		if code, _ := e.call(t, http.MethodPost, "/worker/v1/claim?wait=50ms", tokenBob, "", nil); code != http.StatusNoContent {
			t.Fatalf("bob's worker claimed alice's task: %d", code)
		}
		b := e.accept(t, "bob", taskplane.SourceA2A, "m-b")
		if id, _ := e.claim(t, tokenBob); id != b.ID {
			t.Fatalf("claimed %s, want bob's %s", id, b.ID)
		}
	})
}

func TestWorkerClaimLongPolls(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		start := time.Now()
		if code, _ := e.call(t, http.MethodPost, "/worker/v1/claim?wait=100ms", tokenAll, "", nil); code != http.StatusNoContent {
			t.Fatalf("empty queue: %d, want 204", code)
		}
		if time.Since(start) < 100*time.Millisecond {
			t.Fatal("the claim did not wait")
		}
		got := make(chan string, 1)
		go func() {
			code, body := e.call(t, http.MethodPost, "/worker/v1/claim?wait=2s", tokenAll, "", nil)
			if code == http.StatusOK {
				got <- body["taskId"].(string)
			} else {
				got <- ""
			}
		}()
		time.Sleep(100 * time.Millisecond)
		task := e.accept(t, "alice", taskplane.SourceA2A, "m-late")
		if id := <-got; id != task.ID {
			t.Fatalf("waiting claim got %q, want %s", id, task.ID)
		}
	})
}

func TestWorkerDeclaredOutputsValidated(t *testing.T) {
	manifest := &taskplane.Manifest{Outputs: []taskplane.OutputDecl{{Name: "summary"}}}
	eachDriver(t, func(t *testing.T, e *env) {
		e.accept(t, "alice", taskplane.SourceA2A, "m-a")
		id, l := e.claim(t, tokenAll)
		for _, bad := range []map[string]any{
			{"name": "Summary", "value": map[string]any{}},
			{"name": "other", "value": map[string]any{}},
			{"name": "summary", "value": "text"},
			{"name": "summary"},
		} {
			if code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/outputs", tokenAll, l, bad); code != http.StatusBadRequest || errCode(body) != "invalid" {
				t.Fatalf("output %v: %d %v", bad, code, body)
			}
		}
		code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/outputs", tokenAll, l,
			map[string]any{"name": "summary", "value": map[string]any{"text": "short"}})
		if code != http.StatusOK || body["artifactId"] != "output:summary" {
			t.Fatalf("valid output: %d %v", code, body)
		}
		evs, err := e.plane.Events(context.Background(), "alice", id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if last := evs[len(evs)-1]; last.Kind != taskplane.EventArtifact || last.Artifact.Artifact.Name != "summary" {
			t.Fatalf("last event %+v, want the output's artifact update", last)
		}
		if code, _ := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/complete", tokenAll, l, map[string]any{
			"response": map[string]any{"text": "done"}, "outputs": []any{map[string]any{"name": "nope", "value": map[string]any{}}},
		}); code != http.StatusBadRequest {
			t.Fatalf("complete with an undeclared output: %d", code)
		}
	}, taskplane.WithManifest(manifest))
}

func TestWorkerRequireInput(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		// A source without a continuation method: the question is refused, the turn stays.
		e.accept(t, "alice", "cron", "ev-1")
		id, l := e.claim(t, tokenAll)
		if code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/require-input", tokenAll, l,
			map[string]any{"question": "which?"}); code != http.StatusUnprocessableEntity || errCode(body) != "continuation-not-allowed" {
			t.Fatalf("question on a cron task: %d %v", code, body)
		}
		if code, _ := e.call(t, http.MethodGet, "/worker/v1/tasks/"+id, tokenAll, l, nil); code != http.StatusOK {
			t.Fatalf("the turn did not survive the refusal: %d", code)
		}
		// A webhook task can ask, with a schema.
		e.accept(t, "alice", "webhook", "ev-2")
		id2, l2 := e.claim(t, tokenAll)
		code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id2+"/require-input", tokenAll, l2, map[string]any{
			"question": "how many?", "requestedSchema": map[string]any{"type": "object"}})
		if code != http.StatusOK || body["state"] != string(taskplane.StateInputRequired) {
			t.Fatalf("question on a webhook task: %d %v", code, body)
		}
		task, err := e.plane.GetTask(context.Background(), "alice", id2)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := task.Status.Message.Metadata[taskplane.ExtElicitation]; !ok {
			t.Fatalf("question metadata %v, want the elicitation schema", task.Status.Message.Metadata)
		}
		// The question ended the turn.
		if code, _ := e.call(t, http.MethodGet, "/worker/v1/tasks/"+id2, tokenAll, l2, nil); code != http.StatusConflict {
			t.Fatalf("call after the question: %d", code)
		}
	}, taskplane.WithQuestionPolicy(nil))
}

func TestWorkerSettle(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		e.accept(t, "bob", taskplane.SourceA2A, "m-1")
		id, l := e.claim(t, tokenBob)
		if code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/settle", tokenBob, "", map[string]any{"outcome": "accepted"}); code != http.StatusConflict || errCode(body) != "not-finished" {
			t.Fatalf("settle of a working task: %d %v", code, body)
		}
		e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/complete", tokenBob, l, map[string]any{"response": "ok"})
		code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/settle", tokenBob, "", map[string]any{"outcome": "accepted", "feedback": "great"})
		if code != http.StatusOK || body["state"] != string(taskplane.StateCompleted) {
			t.Fatalf("settle: %d %v", code, body)
		}
	})
}

// writeTokens writes a worker tokens file and returns its path.
func writeTokens(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "workers.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A misspelt key must not load: "principal" for "principals" would otherwise load a worker
// meant for alice as one that claims every principal's tasks. The error names the file and the key.
func TestTokensFileRefusesUnknownKeys(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"workers":[{"name":"bot","token":"0123456789abcdef-bot","principal":["alice"]}]}`, `entry 0: json: unknown field "principal"`},
		{`{"workers":[{"name":"ok","token":"0123456789abcdef-ok","principals":["bob"]},
			{"name":"bot","token":"0123456789abcdef-bot","principle":["alice"]}]}`, `entry 1: json: unknown field "principle"`},
		{`{"workers":[{"name":"bot","token":"0123456789abcdef-bot","principals":["alice"]}],"principals":["alice"]}`, `unknown field "principals"`},
		{`{"worker":[{"name":"bot","token":"0123456789abcdef-bot","principals":["alice"]}]}`, `unknown field "worker"`},
		{`{"workers":[{"name":"bot","token":"0123456789abcdef-bot","principals":["alice"]}]} {}`, "data after the JSON value"},
	} {
		path := writeTokens(t, tc.body)
		toks, err := worker.LoadTokens(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadTokens(%s): %+v, %v; want an error naming the file and %q", tc.body, toks, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("the error carries a token: %v", err)
		}
	}
	toks, err := worker.LoadTokens(writeTokens(t, `{"workers":[{"name":"bot","token":"0123456789abcdef-bot","principals":["alice"]}]}`))
	if err != nil || len(toks) != 1 || !slices.Equal(toks[0].Principals, []string{"alice"}) {
		t.Fatalf("a well-formed file: %+v, %v", toks, err)
	}
}

// An entry that names no principals is refused, not read as "all": all is written ["*"], alone.
func TestTokensFileEntryWithoutPrincipalsIsRefusedUnlessAllIsExplicit(t *testing.T) {
	for _, body := range []string{
		`{"workers":[{"name":"bot","token":"0123456789abcdef-bot"}]}`,
		`{"workers":[{"name":"bot","token":"0123456789abcdef-bot","principals":[]}]}`,
		`{"workers":[{"name":"bot","token":"0123456789abcdef-bot","principals":null}]}`,
	} {
		toks, err := worker.LoadTokens(writeTokens(t, body))
		if err == nil || !strings.Contains(err.Error(), `worker "bot" lists no principals`) || !strings.Contains(err.Error(), `"principals": ["*"]`) {
			t.Errorf("LoadTokens(%s): %+v, %v; want a refusal saying to write \"principals\": [\"*\"]", body, toks, err)
		}
	}
	for _, body := range []string{
		`{"workers":[{"name":"bot","token":"0123456789abcdef-bot","principals":["*","alice"]}]}`,
		`{"workers":[{"name":"bot","token":"0123456789abcdef-bot","principals":["alice",""]}]}`,
	} {
		if toks, err := worker.LoadTokens(writeTokens(t, body)); err == nil {
			t.Errorf("LoadTokens(%s): %+v, want a refusal", body, toks)
		}
	}
	// ["*"] is every principal: the loaded token has no restriction (and no principal named "*").
	toks, err := worker.LoadTokens(writeTokens(t, `{"workers":[{"name":"bot","token":"0123456789abcdef-bot","principals":["*"]}]}`))
	if err != nil || len(toks) != 1 || len(toks[0].Principals) != 0 {
		t.Fatalf(`principals ["*"]: %+v, %v; want one worker of every principal`, toks, err)
	}
}

// Two entries with one token would let the first take every request and silently drop the
// second's scope; two with one name would share leases. Both are refused, and the error names
// the workers, never the token. New refuses them too.
func TestTokensFileRefusesDuplicateTokensAndNames(t *testing.T) {
	const secret = "0123456789abcdef-shared"
	for _, tc := range []struct{ body, want string }{
		{`{"workers":[{"name":"ops","token":"` + secret + `","principals":["*"]},
			{"name":"bob","token":"` + secret + `","principals":["bob"]}]}`, `workers "ops" and "bob" have the same token`},
		{`{"workers":[{"name":"bot","token":"0123456789abcdef-one","principals":["alice"]},
			{"name":"bot","token":"0123456789abcdef-two","principals":["bob"]}]}`, `two workers are named "bot"`},
	} {
		path := writeTokens(t, tc.body)
		toks, err := worker.LoadTokens(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadTokens: %+v, %v; want an error naming the file and %q", toks, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("the error carries the token: %v", err)
		}
	}
	for _, toks := range [][]worker.Token{
		{{Name: "ops", Token: secret}, {Name: "bob", Token: secret, Principals: []string{"bob"}}},
		{{Name: "bot", Token: "0123456789abcdef-one"}, {Name: "bot", Token: "0123456789abcdef-two"}},
	} {
		if _, err := worker.New(nil, worker.Config{Tokens: toks}); err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("New with %d workers sharing a token or a name: %v, want a refusal without the token", len(toks), err)
		}
	}
}

// A body over the 1 MiB limit is 413 "too-large" naming the limit, not the 400 a malformed body
// gets; the turn is untouched.
func TestWorkerOversizeBodyIs413NamingTheLimit(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		e.accept(t, "alice", taskplane.SourceA2A, "m-a")
		id, l := e.claim(t, tokenAll)
		code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/complete", tokenAll, l,
			map[string]any{"response": strings.Repeat("x", 2<<20)})
		errBody, _ := body["error"].(map[string]any)
		msg, _ := errBody["message"].(string)
		if code != http.StatusRequestEntityTooLarge || errCode(body) != "too-large" || !strings.Contains(msg, "1048576 bytes") {
			t.Fatalf("oversize complete: %d %v, want 413 too-large naming the limit", code, body)
		}
		if code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/complete", tokenAll, l, "not an object"); code != http.StatusBadRequest || errCode(body) != "invalid" {
			t.Fatalf("malformed complete: %d %v, want 400 invalid", code, body)
		}
		if code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/complete", tokenAll, l, map[string]any{"response": "done"}); code != http.StatusOK {
			t.Fatalf("complete after the refusals: %d %v", code, body)
		}
	})
}

// A claim whose worker left while it waited ends at once and holds nothing, with or without a
// body: net/http watches for a client that went away only once the body was read to its end, so
// a claim sent with "{}" used to go on waiting, claim the next task and hold it for a whole lease.
func TestAClaimSentWithABodyEndsWhenItsWorkerLeaves(t *testing.T) {
	for _, body := range []string{"", "{}"} {
		t.Run("body="+body, func(t *testing.T) {
			eachDriver(t, func(t *testing.T, e *env) {
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/worker/v1/claim?wait=2s", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+tokenAll)
				req.Header.Set("Content-Type", "application/json")
				done := make(chan struct{})
				go func() {
					defer close(done)
					if resp, err := http.DefaultClient.Do(req); err == nil {
						resp.Body.Close()
					}
				}()
				if !e.waitServing(1, 5*time.Second) {
					t.Fatal("the claim never reached the server")
				}
				cancel()
				<-done
				// The claim waits 2 s at most: ended well before, it noticed its worker leave.
				if !e.waitServing(0, time.Second) {
					t.Fatal("the claim was still waiting a second after its worker left")
				}
				task := e.accept(t, "alice", taskplane.SourceA2A, "m-after-leave")
				code, got := e.call(t, http.MethodPost, "/worker/v1/claim?wait=1s", tokenAll, "", nil)
				if code != http.StatusOK || got["taskId"] != task.ID {
					t.Fatalf("the next worker's claim: %d %v; want the task, not held by the claim whose worker left", code, got)
				}
			})
		})
	}
}

// A call that takes no body ignores one sent, within the same 1 MiB limit as the others.
func TestABodyOnACallThatTakesNoneIsReadWithinTheLimit(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		e.accept(t, "alice", taskplane.SourceA2A, "m-a")
		code, got := e.call(t, http.MethodPost, "/worker/v1/claim?wait=1s", tokenAll, "", map[string]any{})
		if code != http.StatusOK {
			t.Fatalf("claim with {}: %d %v", code, got)
		}
		id, l := got["taskId"].(string), got["lease"].(string)
		big := map[string]any{"pad": strings.Repeat("x", 2<<20)}
		for _, call := range []string{"heartbeat", "release"} {
			if code, got := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/"+call, tokenAll, l, big); code != http.StatusRequestEntityTooLarge || errCode(got) != "too-large" {
				t.Fatalf("%s with a 2 MiB body: %d %v, want 413 too-large", call, code, got)
			}
		}
		if code, got := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/heartbeat", tokenAll, l, map[string]any{}); code != http.StatusOK {
			t.Fatalf("heartbeat with {}: %d %v", code, got)
		}
		if code, got := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/release", tokenAll, l, map[string]any{}); code != http.StatusOK {
			t.Fatalf("release with {}: %d %v", code, got)
		}
	})
}

// A number a worker sends, such as an id past 2^53 in a part's metadata, is recorded as written.
func TestWorkerNumbersAreRecordedExactly(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		e.accept(t, "bob", taskplane.SourceA2A, "m-1")
		id, l := e.claim(t, tokenBob)
		body := json.RawMessage(`{"response":{"parts":[{"text":"ok","metadata":{"id":9007199254740993,"price":1.10}}]}}`)
		if code, out := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/complete", tokenBob, l, body); code != http.StatusOK {
			t.Fatalf("complete: %d %v", code, out)
		}
		task, err := e.plane.GetTask(context.Background(), "bob", id)
		if err != nil {
			t.Fatal(err)
		}
		md := task.Status.Message.Parts[0].Metadata
		if fmt.Sprint(md["id"]) != "9007199254740993" || fmt.Sprint(md["price"]) != "1.10" {
			t.Fatalf("metadata recorded as %v", md)
		}
	})
}

// A follow-up accepted during a worker's turn: the worker's completion is refused with
// "unseen-message", the turn is over, and the next claim carries the follow-up.
func TestWorkerCompletionAfterAFollowUpIsRefusedAndTheTaskOfferedAgain(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		task := e.accept(t, "bob", taskplane.SourceA2A, "m-1")
		id, l := e.claim(t, tokenBob)
		more := taskplane.Event{Principal: "bob", Source: taskplane.SourceA2A, Identity: "m-2", TaskID: task.ID,
			Message: taskplane.Message{ID: "m-2", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("also this")}}}
		if _, err := e.plane.Accept(context.Background(), more); err != nil {
			t.Fatal(err)
		}
		code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/complete", tokenBob, l, map[string]any{"response": "ok"})
		if code != http.StatusConflict || errCode(body) != "unseen-message" {
			t.Fatalf("complete after a follow-up: %d %v", code, body)
		}
		if code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/heartbeat", tokenBob, l, nil); code != http.StatusConflict || errCode(body) != "no-turn" {
			t.Fatalf("the refused turn still holds the task: %d %v", code, body)
		}
		code, body = e.call(t, http.MethodPost, "/worker/v1/claim?wait=1s", tokenBob, "", nil)
		if code != http.StatusOK || body["taskId"] != id || body["offer"] != float64(1) {
			t.Fatalf("claim again: %d %v", code, body)
		}
		if !strings.Contains(fmt.Sprint(body["task"]), "also this") {
			t.Fatalf("the next claim does not carry the follow-up: %v", body["task"])
		}
	})
}
