package results_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/sources/webhook"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/results"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

const secret = "results-test-secret-0123456789"

// fakeSender stands in for the webhook's callback: it records what Channels sends and answers
// with ids the way the webhook does (namespaced by instance).
type fakeSender struct {
	mu   sync.Mutex
	sent []delivery.Delivery
}

func (f *fakeSender) Send(_ context.Context, d delivery.Delivery) (delivery.Receipt, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, d)
	return delivery.Receipt{ProviderID: fmt.Sprintf("ci:cb-%d", len(f.sent))}, nil
}

func (f *fakeSender) deliveries() []delivery.Delivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]delivery.Delivery(nil), f.sent...)
}

func post(t *testing.T, url string, doc map[string]any) map[string]any {
	t.Helper()
	body, _ := json.Marshal(doc)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	now := time.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.HeaderTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(webhook.HeaderSignature, webhook.Sign([]byte(secret), now, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s %s", url, resp.Status, raw)
	}
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNativeQuestionIsDeliveredAndItsAnswerContinuesTheTask: a webhook event makes a task; the
// agent asks a question; the question goes home through the delivery engine (a fake sender in
// place of the callback) and its provider id becomes the reply anchor; the person's reply to
// exactly that message, a second webhook event, continues the same task; the agent completes;
// the answer goes home too.
func TestNativeQuestionIsDeliveredAndItsAnswerContinuesTheTask(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		st := open(t)
		fake := &fakeSender{}
		engine := delivery.New(st, delivery.Routes{webhook.Name: {Sender: fake, Recovery: delivery.Idempotent}},
			delivery.WithAnchorRecorder(sources.RecordAnchorTx), delivery.WithPoll(20*time.Millisecond))
		plane := taskplane.New(st, taskplane.WithResults(&results.Home{Engine: engine}))

		mux := http.NewServeMux()
		host, err := sources.NewHost(plane, mux, []sources.Instance{{Source: webhook.Name, Config: sources.Config{
			Instance: "ci", Principal: "alice", Options: map[string]any{"secret": secret, "identity": "event.id",
				"conversation": []any{"repo", "thread"}, "text": "event.text", "reply_to": "in_reply_to"}}}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mux)
		defer srv.Close()

		agent := taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
			var users []string
			for _, m := range turn.Task.History {
				if m.Role == taskplane.RoleUser {
					users = append(users, m.Parts[0].Text)
				}
			}
			if len(users) == 1 {
				return turn.RequireInput(ctx, taskplane.Question{Text: "which branch?"})
			}
			return turn.Complete(ctx, &taskplane.Message{Parts: []taskplane.Part{taskplane.TextPart("deploying " + users[len(users)-1])}})
		})
		disp := &taskplane.Dispatcher{Plane: plane, Executor: agent, Concurrency: 2, Poll: 20 * time.Millisecond}
		var wg sync.WaitGroup
		defer wg.Wait()
		defer stop()
		wg.Go(func() { _ = disp.Run(ctx) })
		wg.Go(func() { _ = engine.Run(ctx) })
		host.Start(ctx)
		waitFor(t, "the webhook to run", func() bool { return host.Health(ctx) == nil })

		first := post(t, srv.URL+"/sources/webhook/ci", map[string]any{
			"event": map[string]any{"id": "e1", "text": "deploy please"}, "repo": "web", "thread": "t1"})
		taskID, _ := first["taskId"].(string)
		if taskID == "" || first["outcome"] != "created" {
			t.Fatalf("first event: %v", first)
		}
		waitFor(t, "the question to be delivered", func() bool {
			ds, err := st.ListDeliveries(ctx, store.DeliveryFilter{TaskID: taskID, State: store.DeliveryDelivered})
			return err == nil && len(ds) == 1
		})
		sent := fake.deliveries()
		q := sent[0]
		if q.Operation != delivery.OpQuestion || q.State != taskplane.StateInputRequired || q.TaskID != taskID ||
			q.Message.Parts[0].Text != "which branch?" || !strings.Contains(string(q.Locator), `"instance":"ci"`) {
			t.Fatalf("question delivery %+v", q)
		}
		anchor, err := st.GetAnchor(ctx, "alice", webhook.Name, "ci:cb-1")
		if err != nil || anchor.TaskID != taskID {
			t.Fatalf("reply anchor %+v, %v; want one for task %s", anchor, err, taskID)
		}

		// The person answers that exact message: the same task continues.
		second := post(t, srv.URL+"/sources/webhook/ci", map[string]any{
			"event": map[string]any{"id": "e2", "text": "main"}, "repo": "web", "thread": "t1", "in_reply_to": "cb-1"})
		if second["taskId"] != taskID || second["outcome"] != "continued" {
			t.Fatalf("answer: %v, want task %s continued", second, taskID)
		}
		waitFor(t, "the answer to be delivered", func() bool { return len(fake.deliveries()) == 2 })
		reply := fake.deliveries()[1]
		if reply.Operation != delivery.OpReply || reply.State != taskplane.StateCompleted || reply.Message.Parts[0].Text != "deploying main" {
			t.Fatalf("reply delivery %+v", reply)
		}
		task, err := plane.GetTask(ctx, "alice", taskID)
		if err != nil || task.Status.State != taskplane.StateCompleted {
			t.Fatalf("task %+v %v", task, err)
		}
		// Nothing is sent twice.
		time.Sleep(100 * time.Millisecond)
		if n := len(fake.deliveries()); n != 2 {
			t.Fatalf("%d deliveries, want the question and the answer", n)
		}
	})
}

// TestA2ATasksAreNotSentHome: an A2A caller reads its task itself; finishing it delivers nothing.
func TestA2ATasksAreNotSentHome(t *testing.T) {
	ctx := context.Background()
	st := storetest.OpenSQLite(t)
	fake := &fakeSender{}
	engine := delivery.New(st, delivery.Routes{taskplane.SourceA2A: {Sender: fake, Recovery: delivery.Idempotent}})
	plane := taskplane.New(st, taskplane.WithResults(&results.Home{Engine: engine}))
	if _, err := plane.Accept(ctx, taskplane.Event{Principal: "alice", Source: taskplane.SourceA2A, Identity: "m-1",
		Message: taskplane.Message{ID: "m-1", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("hi")}}}); err != nil {
		t.Fatal(err)
	}
	g, err := plane.ClaimTurn(ctx, taskplane.ClaimRequest{Owner: "test", Lease: time.Minute})
	if err != nil || g == nil {
		t.Fatalf("claim: %v %v", g, err)
	}
	if err := plane.NewTurn(g).Complete(ctx, &taskplane.Message{Parts: []taskplane.Part{taskplane.TextPart("hello")}}); err != nil {
		t.Fatal(err)
	}
	if err := plane.EndTurn(ctx, g, taskplane.TurnEnd{}); err != nil {
		t.Fatal(err)
	}
	ds, err := st.ListDeliveries(ctx, store.DeliveryFilter{})
	if err != nil || len(ds) != 0 {
		t.Fatalf("deliveries %v %v, want none", ds, err)
	}
}

func TestWhatIsSentHome(t *testing.T) {
	for _, c := range []struct {
		state taskplane.State
		msg   *taskplane.Message
		op    string
		text  string
	}{
		{taskplane.StateInputRequired, &taskplane.Message{ID: "q", Parts: []taskplane.Part{taskplane.TextPart("which?")}}, delivery.OpQuestion, "which?"},
		{taskplane.StateAuthRequired, nil, delivery.OpQuestion, "The agent needs you to authenticate to continue."},
		{taskplane.StateCompleted, &taskplane.Message{ID: "a", Parts: []taskplane.Part{taskplane.TextPart("done!")}}, delivery.OpReply, "done!"},
		{taskplane.StateFailed, nil, delivery.OpReply, "The task failed."},
		{taskplane.StateCanceled, nil, delivery.OpReply, "The task was canceled."},
	} {
		task := &taskplane.Task{ID: "t1", Status: taskplane.Status{State: c.state, Message: c.msg}}
		op, msg, ok := results.What(task)
		if !ok || op != c.op || msg.Parts[0].Text != c.text {
			t.Errorf("%s: %q %q %v", c.state, op, msg.Parts[0].Text, ok)
		}
		if _, again, _ := results.What(task); again.ID != msg.ID {
			t.Errorf("%s: the notice id changed between calls", c.state)
		}
	}
	if _, _, ok := results.What(&taskplane.Task{Status: taskplane.Status{State: taskplane.StateWorking}}); ok {
		t.Error("a WORKING task has something to send")
	}
}

// TestRouterRoutesSendingInstancesByLocator: deliveries go to the instance their locator names;
// an endpoint without a callback, or another principal's, is no route.
func TestRouterRoutesSendingInstancesByLocator(t *testing.T) {
	plane := taskplane.New(storetest.OpenSQLite(t))
	opts := func(secret, callback string) map[string]any { // each instance its own secret
		return map[string]any{"secret": secret, "identity": "event.id", "conversation": []any{"repo"},
			"text": "event.text", "callback": callback}
	}
	host, err := sources.NewHost(plane, http.NewServeMux(), []sources.Instance{
		{Source: webhook.Name, Config: sources.Config{Instance: "ci", Principal: "alice", Options: opts(secret, "https://ci.example.com/cb")}},
		{Source: webhook.Name, Config: sources.Config{Instance: "quiet", Principal: "bob", Options: opts(secret+"-quiet", "")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := results.FromHost(host)
	if _, err := r.Route("alice", webhook.Name); err != nil {
		t.Fatalf("alice's ci endpoint: %v", err)
	}
	if _, err := r.Route("bob", webhook.Name); err == nil {
		t.Fatal("bob's endpoint has no callback but got a route")
	}
	route, _ := r.Route("alice", webhook.Name)
	if route.Recovery != delivery.Idempotent {
		t.Fatalf("recovery %q, want the matrix's idempotent", route.Recovery)
	}
	_, err = route.Sender.Send(context.Background(), delivery.Delivery{Principal: "alice", Locator: json.RawMessage(`{"instance":"other"}`)})
	if err == nil {
		t.Fatal("a delivery naming an unknown instance was sent")
	}
}

// TestCanceledNativeTaskTellsItsProvider: a cancel is an outcome like any other, so a native
// task's provider hears of it through a delivery.
func TestCanceledNativeTaskTellsItsProvider(t *testing.T) {
	ctx := context.Background()
	st := storetest.OpenSQLite(t)
	fake := &fakeSender{}
	engine := delivery.New(st, delivery.Routes{"webhook": {Sender: fake, Recovery: delivery.Idempotent}})
	plane := taskplane.New(st, taskplane.WithResults(&results.Home{Engine: engine}))
	acc, err := plane.Accept(ctx, taskplane.Event{Principal: "alice", Source: "webhook", Identity: "ev-1",
		ConversationKey: "c1", Message: taskplane.Message{ID: "m-1", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("hi")}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := plane.Cancel(ctx, "alice", acc.Task.ID, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := st.ListDeliveries(ctx, store.DeliveryFilter{})
	if err != nil || len(ds) != 1 || ds[0].TaskID != acc.Task.ID || ds[0].Operation != delivery.OpReply {
		t.Fatalf("deliveries %+v %v, want one reply for the canceled task", ds, err)
	}
}

// A notice an older build prepared for the current ask, under its ID without the input request,
// is found when the result is handed over again after an upgrade: the person is not told twice.
// One prepared for an earlier ask does not stand for the current one.
func TestANoticeOfAnOlderBuildIsNotSentAgain(t *testing.T) {
	ctx := context.Background()
	st := storetest.OpenSQLite(t)
	engine := delivery.New(st, delivery.Routes{"webhook": {Sender: &fakeSender{}, Recovery: delivery.Idempotent}})
	t.Cleanup(func() { engine.Close() })
	home := &results.Home{Engine: engine}
	plane := taskplane.New(st)
	acc, err := plane.Accept(ctx, taskplane.Event{Principal: "alice", Source: "webhook", Identity: "e-1",
		Message: taskplane.Message{ID: "m-1", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("hi")}}})
	if err != nil {
		t.Fatal(err)
	}
	ask := func() *taskplane.Task {
		t.Helper()
		if _, err := plane.Apply(ctx, "alice", acc.Task.ID, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateWorking}); err != nil {
			t.Fatal(err)
		}
		task, err := plane.Apply(ctx, "alice", acc.Task.ID, taskplane.AnyVersion, taskplane.SetStatus{State: taskplane.StateInputRequired})
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	// What an older build prepared for an ask: the notice under "notice-<task>-<state>".
	legacy := func(task *taskplane.Task) {
		t.Helper()
		op, msg, _ := results.What(task)
		msg.ID = "notice-" + task.ID + "-" + string(task.Status.State)
		if _, err := engine.Prepare(ctx, delivery.RequestFor(task, op, msg)); err != nil {
			t.Fatal(err)
		}
	}
	deliveries := func() int {
		t.Helper()
		ds, err := st.ListDeliveries(ctx, store.DeliveryFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(ds)
	}

	first := ask()
	legacy(first)
	if err := home.Settled(ctx, first); err != nil {
		t.Fatal(err)
	}
	if n := deliveries(); n != 1 {
		t.Fatalf("%d deliveries after the ask's result was handed over again, want the older build's one", n)
	}
	second := ask()
	if err := home.Settled(ctx, second); err != nil {
		t.Fatal(err)
	}
	if n := deliveries(); n != 2 {
		t.Fatalf("%d deliveries after a second ask, want its own notice too", n)
	}
}
