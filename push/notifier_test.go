package push_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/push"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// received is one request a test receiver got.
type received struct {
	ID     string
	Body   []byte
	Header http.Header
}

// receiver is a webhook on loopback. fail decides, per request, the status to answer (0: 204).
// It applies each notification id's effect once (effects), as a receiver should.
type receiver struct {
	srv  *httptest.Server
	fail func(id string, attempt int) int

	mu sync.Mutex
	// retryAfter, if set, is the Retry-After header of every 429 and 503 answer.
	retryAfter string
	requests   []received
	attempts   map[string]int
	effects    []string
}

func newReceiver(t *testing.T, fail func(id string, attempt int) int) *receiver {
	rc := &receiver{fail: fail, attempts: map[string]int{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get(push.HeaderID)
		rc.mu.Lock()
		rc.attempts[id]++
		n := rc.attempts[id]
		rc.requests = append(rc.requests, received{ID: id, Body: body, Header: r.Header.Clone()})
		code := 0
		if rc.fail != nil {
			code = rc.fail(id, n)
		}
		if code == 0 && !contains(rc.effects, id) {
			rc.effects = append(rc.effects, id)
		}
		retryAfter := rc.retryAfter
		rc.mu.Unlock()
		if code == 0 {
			code = http.StatusNoContent
		}
		if retryAfter != "" && (code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable) {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (rc *receiver) port() string {
	_, port, _ := net.SplitHostPort(rc.srv.Listener.Addr().String())
	return port
}

func (rc *receiver) snapshot() ([]received, []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.requests...), append([]string(nil), rc.effects...)
}

// waitEffects waits until the receiver has applied n notifications.
func (rc *receiver) waitEffects(t *testing.T, n int) ([]received, []string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		reqs, effects := rc.snapshot()
		if len(effects) >= n {
			return reqs, effects
		}
		if time.Now().After(deadline) {
			t.Fatalf("receiver applied %d notifications, want %d: %v", len(effects), n, effects)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loopback resolves every name to 127.0.0.1, so a webhook named hook.test reaches the test
// receiver through the guard's resolution, without real DNS.
var loopback = push.ResolverFunc(func(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
})

func fastOptions(o push.Options) push.Options {
	o.Poll = 20 * time.Millisecond
	o.Policy = delivery.Policy{MaxAttempts: 5, InitialInterval: 10 * time.Millisecond, MaxInterval: 40 * time.Millisecond}
	o.Timeout = 5 * time.Second
	return o
}

func startNotifier(t *testing.T, p *taskplane.Plane, o push.Options) *push.Notifier {
	t.Helper()
	return runNotifier(t, push.New(p, fastOptions(o)))
}

// runNotifier runs n until the test ends.
func runNotifier(t *testing.T, n *push.Notifier) *push.Notifier {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return n
}

func acceptWithPush(t *testing.T, p *taskplane.Plane, principal, msgID string, cs ...taskplane.PushConfig) *taskplane.Task {
	t.Helper()
	acc, err := p.Accept(context.Background(), taskplane.Event{Principal: principal, Source: taskplane.SourceA2A,
		Identity: msgID, Message: taskplane.Message{ID: msgID, Role: taskplane.RoleUser,
			Parts: []taskplane.Part{taskplane.TextPart("work, please")}}, PushConfigs: cs})
	if err != nil {
		t.Fatal(err)
	}
	return acc.Task
}

func apply(t *testing.T, p *taskplane.Plane, principal, taskID string, changes ...taskplane.Change) {
	t.Helper()
	for _, c := range changes {
		if _, err := p.Apply(context.Background(), principal, taskID, taskplane.AnyVersion, c); err != nil {
			t.Fatalf("apply %T: %v", c, err)
		}
	}
}

var (
	working   = taskplane.SetStatus{State: taskplane.StateWorking}
	artifact  = taskplane.AddArtifact{Artifact: taskplane.Artifact{ID: "a1", Parts: []taskplane.Part{taskplane.TextPart("result")}}}
	completed = taskplane.SetStatus{State: taskplane.StateCompleted}
)

// kind names what a notification body holds: "task:STATE", "status:STATE" or "artifact:ID".
func kind(t *testing.T, body []byte) string {
	t.Helper()
	var r struct {
		Task *struct {
			Status struct{ State string } `json:"status"`
		} `json:"task"`
		StatusUpdate *struct {
			Status struct{ State string } `json:"status"`
		} `json:"statusUpdate"`
		ArtifactUpdate *struct {
			Artifact struct {
				ArtifactID string `json:"artifactId"`
			} `json:"artifact"`
		} `json:"artifactUpdate"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	switch {
	case r.Task != nil:
		return "task:" + r.Task.Status.State
	case r.StatusUpdate != nil:
		return "status:" + r.StatusUpdate.Status.State
	case r.ArtifactUpdate != nil:
		return "artifact:" + r.ArtifactUpdate.Artifact.ArtifactID
	}
	return "?"
}

func TestLoopbackReceiverGetsEveryTransitionInOrder(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		p := taskplane.New(open(t))
		rc := newReceiver(t, nil)
		n := startNotifier(t, p, push.Options{AllowPrivateNetworks: true, Resolver: loopback})
		// A name, resolved by the guard to loopback: the connection goes to the checked address.
		hookURL := "http://hook.test:" + rc.port() + "/a2a/notify"
		if err := n.CheckURL(context.Background(), hookURL); err != nil {
			t.Fatal(err)
		}
		task := acceptWithPush(t, p, "alice", "m1", taskplane.PushConfig{ID: "h1", URL: hookURL, Token: "tok-1",
			Auth: &taskplane.PushAuth{Scheme: "Bearer", Credentials: "receiver-secret"}})
		n.Registered("alice", task.ID)
		apply(t, p, "alice", task.ID, working, artifact, taskplane.SetStatus{State: taskplane.StateWorking,
			Message: &taskplane.Message{ID: "s2", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("still at it")}}}, completed)

		reqs, effects := rc.waitEffects(t, 5)
		var kinds []string
		for _, r := range reqs {
			kinds = append(kinds, kind(t, r.Body))
		}
		want := []string{"task:TASK_STATE_SUBMITTED", "status:TASK_STATE_WORKING", "artifact:a1", "status:TASK_STATE_WORKING", "status:TASK_STATE_COMPLETED"}
		if fmt.Sprint(kinds) != fmt.Sprint(want) {
			t.Fatalf("notifications %v, want %v", kinds, want)
		}
		if len(reqs) != len(effects) {
			t.Fatalf("%d requests for %d notifications: no retry was needed", len(reqs), len(effects))
		}
		for i, r := range reqs {
			wantID := fmt.Sprintf("%s:%d", task.ID, task.LastSeq+int64(i))
			if i == 0 {
				wantID += ":task:"
			}
			if r.ID != wantID && (i > 0 || !strings.HasPrefix(r.ID, wantID) || len(r.ID) != len(wantID)+12) {
				t.Errorf("notification %d id %q, want %q", i, r.ID, wantID)
			}
			h := r.Header
			if h.Get("Content-Type") != push.ContentType || h.Get("Authorization") != "Bearer receiver-secret" ||
				h.Get(push.HeaderToken) != "tok-1" || h.Get(push.HeaderTokenLegacy) != "tok-1" ||
				!strings.HasPrefix(h.Get(push.HeaderDelivery), "dlv_") {
				t.Errorf("notification %d headers: %v", i, h)
			}
			if _, err := push.Verify(h, r.Body, "tok-1", time.Now(), 0); err != nil {
				t.Errorf("notification %d does not verify: %v", i, err)
			}
		}

		// A config registered after the task finished still gets one notification: the task.
		if _, err := p.SetPushConfig(context.Background(), "alice", task.ID,
			taskplane.PushConfig{ID: "late", URL: "http://127.0.0.1:" + rc.port() + "/late"}); err != nil {
			t.Fatal(err)
		}
		n.Registered("alice", task.ID)
		reqs, _ = rc.waitEffects(t, 6)
		last := reqs[len(reqs)-1]
		if got := kind(t, last.Body); got != "task:TASK_STATE_COMPLETED" || !strings.Contains(last.ID, ":task:") {
			t.Fatalf("late registration got %s (%s)", got, last.ID)
		}
		if last.Header.Get(push.HeaderSignature) != "" || last.Header.Get("Authorization") != "" {
			t.Fatalf("a config without token or authentication sent %v", last.Header)
		}
		time.Sleep(100 * time.Millisecond) // nothing more may come
		if reqs, _ := rc.snapshot(); len(reqs) != 6 {
			t.Fatalf("%d requests, want 6", len(reqs))
		}
		// Both configs told the end of the task, so the notifier's passes no longer read them.
		for _, id := range []string{"h1", "late"} {
			if c, err := p.Store().GetPushConfig(context.Background(), "alice", task.ID, id); err != nil || !c.Finished {
				t.Errorf("config %s after the task's end: finished %v, %v", id, c.Finished, err)
			}
		}
	})
}

func TestRetriesAfterReceiverErrorsCauseNoDuplicateEffects(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		p := taskplane.New(open(t))
		// Every notification fails twice (500, then 502) before the receiver takes it: the engine
		// repeats it with the same id and body, and the receiver applies it once.
		rc := newReceiver(t, func(id string, attempt int) int {
			switch attempt {
			case 1:
				return http.StatusInternalServerError
			case 2:
				return http.StatusBadGateway
			}
			return 0
		})
		n := startNotifier(t, p, push.Options{AllowPrivateNetworks: true})
		task := acceptWithPush(t, p, "alice", "m1", taskplane.PushConfig{ID: "h1", URL: rc.srv.URL + "/hook", Token: "tok"})
		n.Registered("alice", task.ID)
		apply(t, p, "alice", task.ID, working, artifact, completed)

		reqs, effects := rc.waitEffects(t, 4)
		var kinds []string
		for _, id := range effects {
			for _, r := range reqs {
				if r.ID == id {
					kinds = append(kinds, kind(t, r.Body))
					break
				}
			}
		}
		want := []string{"task:TASK_STATE_SUBMITTED", "status:TASK_STATE_WORKING", "artifact:a1", "status:TASK_STATE_COMPLETED"}
		if fmt.Sprint(kinds) != fmt.Sprint(want) {
			t.Fatalf("effects %v, want %v", kinds, want)
		}
		// Each notification was sent three times with one id and one body; it took effect once.
		byID := map[string][]received{}
		for _, r := range reqs {
			byID[r.ID] = append(byID[r.ID], r)
		}
		for _, id := range effects {
			rs := byID[id]
			if len(rs) != 3 {
				t.Errorf("%s sent %d times, want 3", id, len(rs))
				continue
			}
			for _, r := range rs[1:] {
				if string(r.Body) != string(rs[0].Body) {
					t.Errorf("%s: a retry changed the body", id)
				}
				if _, err := push.Verify(r.Header, r.Body, "tok", time.Now(), 0); err != nil {
					t.Errorf("%s: a retry does not verify: %v", id, err)
				}
			}
		}
		// Order held across the retries: no notification was sent before the previous one took effect.
		firstSend := map[string]int{}
		for i, r := range reqs {
			if _, ok := firstSend[r.ID]; !ok {
				firstSend[r.ID] = i
			}
		}
		for i := 1; i < len(effects); i++ {
			lastOfPrev := -1
			for j, r := range reqs {
				if r.ID == effects[i-1] {
					lastOfPrev = j
				}
			}
			if firstSend[effects[i]] < lastOfPrev {
				t.Errorf("%s was sent before %s succeeded", effects[i], effects[i-1])
			}
		}
		// The engine kept the evidence of every attempt.
		recs, err := n.Engine().List(context.Background(), delivery.Filter{Principal: "alice", Source: taskplane.SourcePush})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 4 {
			t.Fatalf("%d deliveries, want 4", len(recs))
		}
		for _, rec := range recs {
			// The receiver may have answered before the engine recorded the answer.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			rec, err := n.Engine().Wait(ctx, "alice", rec.ID)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			atts, err := n.Engine().Attempts(context.Background(), "alice", rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			var outcomes []string
			for _, a := range atts {
				if a.Kind == "send" {
					outcomes = append(outcomes, a.Outcome+"/"+a.ProviderStatus)
				}
			}
			if rec.State != delivery.StateDelivered || fmt.Sprint(outcomes) != "[unknown/HTTP 500 unknown/HTTP 502 delivered/]" {
				t.Errorf("delivery %s (%s): %s, attempts %v", rec.ID, rec.Operation, rec.State, outcomes)
			}
		}
	})
}

func TestDNSNameResolvingToAPrivateAddressIsRefusedAtDelivery(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		p := taskplane.New(open(t))
		var answer atomic.Value
		answer.Store("93.184.216.34")
		var lookups atomic.Int32
		resolver := push.ResolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
			lookups.Add(1)
			return []netip.Addr{netip.MustParseAddr(answer.Load().(string))}, nil
		})
		n := push.New(p, fastOptions(push.Options{Resolver: resolver})) // no opt-in
		const hookURL = "https://rebind.example.com/hook"
		if err := n.CheckURL(context.Background(), hookURL); err != nil {
			t.Fatalf("registration check with a public answer: %v", err)
		}
		task := acceptWithPush(t, p, "alice", "m1", taskplane.PushConfig{ID: "h1", URL: hookURL, Token: "tok"})
		// Between registration and delivery the name starts pointing inside.
		answer.Store("10.20.30.40")
		before := lookups.Load()
		if _, err := n.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if lookups.Load() == before {
			t.Fatal("the delivery attempt did not resolve the webhook's name")
		}
		recs, err := n.Engine().List(context.Background(), delivery.Filter{Principal: "alice", TaskID: task.ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || recs[0].State != delivery.StateFailed || recs[0].Attempts != 1 ||
			!strings.Contains(recs[0].LastError, "10.20.30.40") || !strings.Contains(recs[0].LastError, "private") {
			t.Fatalf("deliveries after rebinding: %+v", recs)
		}
		// The config moves on rather than waiting forever on the refused notification.
		apply(t, p, "alice", task.ID, working)
		if _, err := n.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		recs, _ = n.Engine().List(context.Background(), delivery.Filter{Principal: "alice", TaskID: task.ID})
		if len(recs) != 2 {
			t.Fatalf("%d deliveries after the next event, want 2", len(recs))
		}
	})
}

// A receiver's URL may carry a secret in its path or query: a failed delivery's error, in the
// delivery record and in evidence, names only the receiver's origin.
func TestDeliveryErrorsNameOnlyTheReceiversOrigin(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		p := taskplane.New(open(t))
		var answer atomic.Value
		answer.Store("93.184.216.34")
		resolver := push.ResolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr(answer.Load().(string))}, nil
		})
		n := push.New(p, fastOptions(push.Options{Resolver: resolver}))
		const hookURL = "https://hooks.example.com/in/s3cr3t-path?key=s3cr3t-query"
		task := acceptWithPush(t, p, "alice", "m1", taskplane.PushConfig{ID: "h1", URL: hookURL, Token: "tok"})
		answer.Store("10.20.30.40") // the delivery attempt fails: refused at connect time
		if _, err := n.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if lastErr := failedWithoutSecret(t, p, n, task.ID, "s3cr3t"); !strings.Contains(lastErr, "https://hooks.example.com") {
			t.Fatalf("delivery error %q: want the receiver's origin", lastErr)
		}
	})
}

// A receiver that redirects (a trailing slash, http to https) would hand back its secret path in
// Location: the delivery error names only where the redirect points to.
func TestRedirectErrorNamesNoPath(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		p := taskplane.New(open(t))
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, r.URL.Path+"/", http.StatusPermanentRedirect)
		}))
		defer srv.Close()
		n := push.New(p, fastOptions(push.Options{AllowPrivateNetworks: true}))
		task := acceptWithPush(t, p, "alice", "m1", taskplane.PushConfig{ID: "h1", URL: srv.URL + "/in/s3cr3t-path", Token: "tok"})
		if _, err := n.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if lastErr := failedWithoutSecret(t, p, n, task.ID, "s3cr3t"); !strings.Contains(lastErr, "redirect") {
			t.Fatalf("delivery error %q: want the refused redirect", lastErr)
		}
	})
}

// failedWithoutSecret checks that alice's task has one delivery, which failed, and that neither its
// error nor any of alice's evidence holds secret; it returns the delivery's error.
func failedWithoutSecret(t *testing.T, p *taskplane.Plane, n *push.Notifier, taskID, secret string) string {
	t.Helper()
	recs, err := n.Engine().List(context.Background(), delivery.Filter{Principal: "alice", TaskID: taskID})
	if err != nil || len(recs) != 1 || recs[0].LastError == "" {
		t.Fatalf("deliveries: %+v, %v; want one that failed", recs, err)
	}
	if strings.Contains(recs[0].LastError, secret) {
		t.Fatalf("delivery error %q holds the receiver's secret", recs[0].LastError)
	}
	evs, err := p.Store().ListEvidence(context.Background(), store.EvidenceFilter{Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if strings.Contains(string(e.Detail), secret) {
			t.Fatalf("%s evidence holds the receiver's secret: %s", e.Kind, e.Detail)
		}
	}
	return recs[0].LastError
}

func TestRestartResumesFromTheDurableCursor(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		st := open(t)
		p := taskplane.New(st)
		rc := newReceiver(t, nil)
		opts := fastOptions(push.Options{AllowPrivateNetworks: true})
		first := push.New(p, opts)
		task := acceptWithPush(t, p, "alice", "m1", taskplane.PushConfig{ID: "h1", URL: rc.srv.URL})
		apply(t, p, "alice", task.ID, working)
		if _, err := first.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		rc.waitEffects(t, 2)
		// "Restart": a new plane and notifier over the same store.
		apply(t, p, "alice", task.ID, artifact, completed)
		second := push.New(taskplane.New(st), opts)
		if _, err := second.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		reqs, effects := rc.waitEffects(t, 4)
		if len(reqs) != 4 {
			t.Fatalf("%d requests for %d notifications: the restart sent some again", len(reqs), len(effects))
		}
		if got := kind(t, reqs[2].Body) + " " + kind(t, reqs[3].Body); got != "artifact:a1 status:TASK_STATE_COMPLETED" {
			t.Fatalf("after the restart: %s", got)
		}
	})
}

func TestDeletedConfigStopsItsNotifications(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		p := taskplane.New(open(t))
		// The receiver is down (503, no Retry-After): the first notification keeps retrying.
		rc := newReceiver(t, func(string, int) int { return http.StatusServiceUnavailable })
		n := push.New(p, fastOptions(push.Options{AllowPrivateNetworks: true}))
		task := acceptWithPush(t, p, "alice", "m1", taskplane.PushConfig{ID: "h1", URL: rc.srv.URL})
		if _, err := n.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := p.DeletePushConfig(context.Background(), "alice", task.ID, "h1"); err != nil {
			t.Fatal(err)
		}
		// The engine's next attempt finds the config gone and settles the notification: failed,
		// though the 503 before it may have come after the receiver acted, since the client that
		// deleted the config wants no answer to that question (no operator's queue entry).
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		recs, _ := n.Engine().List(ctx, delivery.Filter{Principal: "alice", TaskID: task.ID})
		if len(recs) != 1 {
			t.Fatalf("%d deliveries, want 1", len(recs))
		}
		go func() { _ = n.Engine().Run(ctx) }()
		rec, err := n.Engine().Wait(ctx, "alice", recs[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != delivery.StateFailed || !strings.Contains(rec.LastError, "deleted") {
			t.Fatalf("after delete: %s, %q", rec.State, rec.LastError)
		}
		before, _ := rc.snapshot()
		apply(t, p, "alice", task.ID, working)
		if _, err := n.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if after, _ := rc.snapshot(); len(after) != len(before) {
			t.Fatalf("a deleted config was notified: %d requests, then %d", len(before), len(after))
		}
	})
}

// A receiver that always answers 429 does not hold its notification, nor the config's later
// events, forever: past its bounded snoozes the notification fails and the config moves on.
func TestAReceiverThatAlwaysAsksToWaitFailsTheNotificationAndTheConfigMovesOn(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		p := taskplane.New(open(t))
		var first string
		var mu sync.Mutex
		rc := newReceiver(t, func(id string, _ int) int {
			mu.Lock()
			defer mu.Unlock()
			if first == "" {
				first = id
			}
			if id == first {
				return http.StatusTooManyRequests
			}
			return 0
		})
		rc.mu.Lock()
		rc.retryAfter = "1"
		rc.mu.Unlock()
		o := fastOptions(push.Options{AllowPrivateNetworks: true})
		o.Policy.MaxAttempts = 3
		o.Policy.MaxRetryAfters = 4
		o.Policy.MinRetryAfter, o.Policy.MaxRetryAfter = time.Millisecond, 5*time.Millisecond
		n := push.New(p, o)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = n.Run(ctx) }()
		defer func() { cancel(); <-done }()
		task := acceptWithPush(t, p, "alice", "m1", taskplane.PushConfig{ID: "h1", URL: rc.srv.URL})
		n.Registered("alice", task.ID)
		apply(t, p, "alice", task.ID, working, completed)
		reqs, effects := rc.waitEffects(t, 2)
		if got := kind(t, reqs[len(reqs)-1].Body); got != "status:TASK_STATE_COMPLETED" || len(effects) != 2 {
			t.Fatalf("effects %v, last %s; want the working and completed notifications after the refused one", effects, got)
		}
		sent := 0
		for _, r := range reqs {
			if r.ID == first {
				sent++
			}
		}
		if sent != 5 {
			t.Errorf("the notification the receiver always rate-limits was sent %d times, want 5 (four waits, then it fails)", sent)
		}
		recs, err := n.Engine().List(context.Background(), delivery.Filter{Principal: "alice", TaskID: task.ID})
		if err != nil {
			t.Fatal(err)
		}
		failed := 0
		for _, r := range recs {
			if r.State == delivery.StateFailed {
				failed++
			}
		}
		if failed != 1 {
			t.Errorf("deliveries %+v; want exactly one failed", recs)
		}
	})
}

// A receiver's Retry-After is read in both its forms (seconds, an HTTP date), and a 429 without
// a usable one backs off, spending attempts, rather than snoozing a guessed second: 60 such
// snoozes would fail the notification after a minute of rate limiting.
func TestARateLimitWaitsAsAskedOrBacksOffWithoutRetryAfter(t *testing.T) {
	p := taskplane.New(storetest.OpenSQLite(t))
	rc := newReceiver(t, func(string, int) int { return http.StatusTooManyRequests })
	n := push.New(p, fastOptions(push.Options{AllowPrivateNetworks: true}))
	for i, tc := range []struct {
		retryAfter, outcome string
		wait                time.Duration
	}{
		{"", "retry", 0},
		{"soon", "retry", 0},
		{"120", "retry-after", 2 * time.Minute},
		{time.Now().Add(30 * time.Minute).UTC().Format(http.TimeFormat), "retry-after", 30 * time.Minute},
	} {
		rc.mu.Lock()
		rc.retryAfter = tc.retryAfter
		rc.mu.Unlock()
		task := acceptWithPush(t, p, "alice", fmt.Sprintf("m%d", i), taskplane.PushConfig{ID: "h1", URL: rc.srv.URL})
		if _, err := n.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		recs, err := n.Engine().List(context.Background(), delivery.Filter{Principal: "alice", TaskID: task.ID})
		if err != nil || len(recs) != 1 {
			t.Fatalf("deliveries %+v, %v; want 1", recs, err)
		}
		as, err := n.Engine().Attempts(context.Background(), "alice", recs[0].ID)
		if err != nil || len(as) != 1 {
			t.Fatalf("attempts %+v, %v; want 1", as, err)
		}
		if a := as[0]; a.Outcome != tc.outcome || a.RetryAfter > tc.wait || a.RetryAfter < tc.wait-2*time.Second {
			t.Errorf("Retry-After %q: attempt %s waiting %s; want %s waiting %s", tc.retryAfter, a.Outcome, a.RetryAfter, tc.outcome, tc.wait)
		}
	}
}

// Retention deletes a task's push configs with the task: its token and credentials do not
// outlive it, whether or not a notifier runs.
func TestRetentionDeletesAPrunedTasksPushConfigsWithTheirSecrets(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		st := open(t)
		var mu sync.Mutex
		now := time.Now().UTC()
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		p := taskplane.New(st, taskplane.WithClock(clock), taskplane.WithRetention(time.Hour))
		task := acceptWithPush(t, p, "alice", "m1", taskplane.PushConfig{ID: "h1", URL: "https://hook.example/x", Token: "tok-SECRET",
			Auth: &taskplane.PushAuth{Scheme: "Bearer", Credentials: "cred-SECRET"}})
		apply(t, p, "alice", task.ID, completed)
		// A dispatcher's claim retires the finished task's wake: retention keeps a task while a
		// wake of it is pending.
		if g, err := p.ClaimTurn(context.Background(), taskplane.ClaimRequest{Owner: "retirer", Lease: time.Minute}); err != nil || g != nil {
			t.Fatalf("claim: %v, %v; want the finished task's wake retired", g, err)
		}
		mu.Lock()
		now = now.Add(2 * time.Hour)
		mu.Unlock()
		r, err := p.Prune(context.Background())
		if err != nil || r.Tasks != 1 || r.PushConfigs != 1 {
			t.Fatalf("prune: %+v %v; want the task and its config", r, err)
		}
		if c, err := st.GetPushConfig(context.Background(), "alice", task.ID, "h1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("task pruned, but its config is kept (token %q, credentials %q, err %v)", c.Token, c.AuthCredentials, err)
		}
	})
}
