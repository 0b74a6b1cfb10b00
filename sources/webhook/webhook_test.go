package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/internal/drain"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/sources/sourcetest"
	"github.com/channels-dev/channels/sources/webhook"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

const (
	secret    = "test-secret-0123456789"
	crmSecret = "test-secret-crm-0123456789" // a second instance's own
)

// options is the configuration of the "ci" endpoint every test uses.
func options(callback string) map[string]any {
	return map[string]any{
		"secret":       secret,
		"identity":     "event.id",
		"conversation": []any{"repo", "thread"},
		"text":         "event.text",
		"reply_to":     "in_reply_to",
		"non_work":     map[string]any{"event.type": []any{"ping"}},
		"callback":     callback,
	}
}

// receiver is the sender's side of the conversation: it takes callback POSTs, checks their
// signature and answers with an id.
type receiver struct {
	t   *testing.T
	srv *httptest.Server

	mu         sync.Mutex
	deliveries []webhook.Payload
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{t: t}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ts, _ := strconv.ParseInt(r.Header.Get(webhook.HeaderTimestamp), 10, 64)
		if r.Header.Get(webhook.HeaderSignature) != webhook.SignCallback([]byte(secret), time.Unix(ts, 0), body) {
			t.Errorf("callback signature does not verify")
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var p webhook.Payload
		if err := json.Unmarshal(body, &p); err != nil || p.Delivery != r.Header.Get(webhook.HeaderDelivery) {
			t.Errorf("callback body %s (delivery header %q): %v", body, r.Header.Get(webhook.HeaderDelivery), err)
		}
		rc.mu.Lock()
		rc.deliveries = append(rc.deliveries, p)
		n := len(rc.deliveries)
		rc.mu.Unlock()
		fmt.Fprintf(w, `{"id": %d}`, 1000+n) // a numeric id: must not lose digits
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// driver is the kit's adapter: the "provider" is any system POSTing signed JSON.
type driver struct {
	rc  *receiver
	srv *httptest.Server

	mu  sync.Mutex
	mux http.Handler
}

func newDriver(t *testing.T) *driver {
	d := &driver{rc: newReceiver(t)}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		h := d.mux
		d.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *driver) Principal() string { return "alice" }

func (d *driver) New(t *testing.T) sources.Source {
	src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: options(d.rc.srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	ep := src.(sources.Endpoint)
	mux := http.NewServeMux()
	mux.Handle(ep.Pattern(), ep)
	d.mu.Lock()
	d.mux = mux
	d.mu.Unlock()
	return src
}

func (d *driver) Inject(t *testing.T, in sourcetest.Input) sourcetest.Ack {
	var body []byte
	switch in.Kind {
	case sourcetest.Malformed:
		body = []byte(`{"event": {"id": "` + in.ID + `", "text": `) // cut short
	default:
		kind := "message"
		if in.Kind == sourcetest.NonWork {
			kind = "ping"
		}
		doc := map[string]any{
			"event": map[string]any{"id": in.ID, "text": in.Text, "type": kind},
			"repo":  "acme/app", "thread": in.Conversation,
		}
		if in.ReplyTo != "" {
			// Receipts are namespaced by instance; the sender only knows its own id.
			doc["in_reply_to"] = strings.TrimPrefix(in.ReplyTo, "ci:")
		}
		if in.BodyTaskID != "" {
			doc["taskId"] = in.BodyTaskID
			doc["contextId"] = "ctx-from-the-body"
		}
		body, _ = json.Marshal(doc)
	}
	req, err := signed(d.srv.URL+"/sources/webhook/ci", body, time.Now(), secret)
	if err != nil {
		t.Errorf("post: %v", err)
		return sourcetest.Unacked
	}
	// The provider sees the answer when the status line arrives, not when the body ends.
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("post: %v", err)
		return sourcetest.Unacked
	}
	go func() { _, _ = io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
	switch {
	case resp.StatusCode/100 == 2:
		return sourcetest.Acked
	case resp.StatusCode/100 == 4:
		return sourcetest.Refused
	}
	return sourcetest.Unacked
}

// signed builds a POST signed with key at ts.
func signed(url string, body []byte, ts time.Time, key string) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(webhook.HeaderSignature, webhook.Sign([]byte(key), ts, body))
	return req, nil
}

// post sends a signed POST and reads the whole answer.
func post(url string, body []byte, ts time.Time, key string) (*http.Response, error) {
	req, err := signed(url, body, ts, key)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

func TestWebhookPassesTheKit(t *testing.T) {
	sourcetest.Run(t, newDriver(t))
}

func TestWebhookRefusesBadRequestsWithEvidence(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		plane := taskplane.New(open(t))
		sink, err := sources.NewSink(plane, webhook.Name)
		if err != nil {
			t.Fatal(err)
		}
		src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: options("")})
		if err != nil {
			t.Fatal(err)
		}
		ep := src.(sources.Endpoint)
		mux := http.NewServeMux()
		mux.Handle(ep.Pattern(), ep)
		srv := httptest.NewServer(mux)
		defer srv.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- sources.Run(ctx, src, sink) }()
		defer func() { cancel(); <-done }()
		for src.(sources.HealthChecker).Health(ctx) != nil {
			time.Sleep(time.Millisecond)
		}

		url := srv.URL + "/sources/webhook/ci"
		good := []byte(`{"event": {"id": "e1", "text": "hi"}, "repo": "r", "thread": "t"}`)
		now := time.Now()
		for _, tc := range []struct {
			name     string
			req      func() (*http.Response, error)
			code     int
			message  string
			kind     string // evidence kind
			reason   string // evidence reason
			rowCount int    // rows of kind expected (counted kinds: the sum of counts)
		}{
			{"bad signature", func() (*http.Response, error) { return post(url, good, now, "another-secret-0123456") },
				http.StatusUnauthorized, "signature does not match", sources.EvidenceRejected, "bad-signature", 1},
			{"tampered body", func() (*http.Response, error) {
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(append(good[:len(good)-1:len(good)-1], ',', '}')))
				req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
				req.Header.Set(webhook.HeaderSignature, webhook.Sign([]byte(secret), now, good))
				return http.DefaultClient.Do(req)
			}, http.StatusUnauthorized, "signature does not match", sources.EvidenceRejected, "bad-signature", 2},
			// A callback Channels sent, captured and replayed to intake: it is signed for the other
			// direction, so it is no event.
			{"a callback replayed as an event", func() (*http.Response, error) {
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(good))
				req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
				req.Header.Set(webhook.HeaderSignature, webhook.SignCallback([]byte(secret), now, good))
				return http.DefaultClient.Do(req)
			}, http.StatusUnauthorized, "signature does not match", sources.EvidenceRejected, "bad-signature", 3},
			{"stale timestamp", func() (*http.Response, error) { return post(url, good, now.Add(-10*time.Minute), secret) },
				http.StatusUnauthorized, "the window is 5m0s", sources.EvidenceRejected, "stale-timestamp", 1},
			{"future timestamp", func() (*http.Response, error) { return post(url, good, now.Add(10*time.Minute), secret) },
				http.StatusUnauthorized, "the window is 5m0s", sources.EvidenceRejected, "stale-timestamp", 2},
			{"unsigned", func() (*http.Response, error) { return http.Post(url, "application/json", bytes.NewReader(good)) },
				http.StatusUnauthorized, "missing X-Channels-Timestamp", sources.EvidenceRejected, "unsigned", 1},
			{"oversize", func() (*http.Response, error) {
				big := append([]byte(`{"pad": "`), bytes.Repeat([]byte("x"), webhook.DefaultMaxBody)...)
				return post(url, append(big, `"}`...), now, secret)
			}, http.StatusRequestEntityTooLarge, "larger than", sources.EvidenceRejected, "oversize", 1},
			{"malformed JSON", func() (*http.Response, error) { return post(url, []byte(`{"event": `), now, secret) },
				http.StatusBadRequest, "invalid JSON", sources.EvidenceMalformed, "invalid JSON", 1},
			{"no identity", func() (*http.Response, error) {
				return post(url, []byte(`{"event": {"text": "hi"}, "repo": "r", "thread": "t"}`), now, secret)
			}, http.StatusBadRequest, "no identity at event.id", sources.EvidenceMalformed, "no identity at event.id", 1},
			{"object where the text belongs", func() (*http.Response, error) {
				return post(url, []byte(`{"event": {"id": "e2", "text": {"x": 1}}, "repo": "r", "thread": "t"}`), now, secret)
			}, http.StatusBadRequest, "no text at event.text", sources.EvidenceMalformed, "no text at event.text", 1},
			{"identity too long for the task plane", func() (*http.Response, error) {
				return post(url, []byte(`{"event": {"id": "`+strings.Repeat("i", taskplane.MaxIdentityLen)+`", "text": "hi"}, "repo": "r", "thread": "t"}`), now, secret)
			}, http.StatusBadRequest, "invalid event", sources.EvidenceMalformed, "invalid-event", 1},
			{"GET", func() (*http.Response, error) { return http.Get(url) },
				http.StatusMethodNotAllowed, "", "", "", 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp, err := tc.req()
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.message) {
					t.Fatalf("answer %d %q, want %d containing %q", resp.StatusCode, b, tc.code, tc.message)
				}
				if tc.kind == "" {
					return
				}
				if err := sink.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				counts, err := sources.CountByReason(ctx, plane.Store(), store.EvidenceFilter{Principal: "alice", Source: webhook.Name, Kind: tc.kind})
				if err != nil {
					t.Fatal(err)
				}
				if counts[tc.reason] != int64(tc.rowCount) {
					t.Fatalf("%s evidence by reason = %v, want %d for %q", tc.kind, counts, tc.rowCount, tc.reason)
				}
			})
		}
		page, err := plane.ListTasks(ctx, "alice", taskplane.ListQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if page.TotalSize != 0 {
			t.Fatalf("tasks = %d after only refused requests, want 0", page.TotalSize)
		}
		if ev, _ := plane.Store().ListEvidence(ctx, store.EvidenceFilter{Kind: sources.EvidenceAccepted}); len(ev) != 0 {
			t.Fatalf("accepted evidence = %d, want 0", len(ev))
		}
		// The same endpoint still accepts an authentic request.
		resp, err := post(url, good, time.Now(), secret)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("authentic request: %v %v", resp.Status, err)
		}
	})
}

func TestWebhookSenderSignsAndReturnsTheReceipt(t *testing.T) {
	rc := newReceiver(t)
	src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: options(rc.srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	loc, _ := json.Marshal(map[string]any{"instance": "ci", "id": "e1"})
	r, err := src.(sources.Sender).Send(context.Background(), sources.Delivery{
		ID: "d-1", Principal: "alice", TaskID: "t-1", ContextID: "c-1", Operation: "question",
		State: taskplane.StateInputRequired, Locator: loc,
		Message: taskplane.Message{ID: "q", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("which one?")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.ProviderID != "ci:1001" {
		t.Fatalf("receipt = %q, want ci:1001 (the receiver's id, namespaced by instance)", r.ProviderID)
	}
	want := webhook.Payload{Delivery: "d-1", Operation: "question", State: "input-required", TaskID: "t-1", ContextID: "c-1", Event: "e1", Text: "which one?"}
	if len(rc.deliveries) != 1 || rc.deliveries[0] != want {
		t.Fatalf("deliveries = %+v, want [%+v]", rc.deliveries, want)
	}

	noCallback, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: options("")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noCallback.(sources.Sender).Send(context.Background(), sources.Delivery{ID: "d-2"}); err == nil {
		t.Fatal("Send without a callback must fail")
	}
}

func TestWebhookRefusesInvalidOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"short secret", func(o map[string]any) { o["secret"] = "short" }, "at least 16 bytes"},
		{"no identity path", func(o map[string]any) { delete(o, "identity") }, "paths are required"},
		{"bad window", func(o map[string]any) { o["window"] = "soon" }, "window"},
		{"negative max_body", func(o map[string]any) { o["max_body"] = -5 }, "max_body -5: want a positive number"},
		{"unknown option", func(o map[string]any) { o["identiy"] = "x" }, "unknown field"},
		{"callback not a URL", func(o map[string]any) { o["callback"] = "https://hooks.example.com/cb/s3cr3t%zz" }, "callback (url): want an absolute http or https URL"},
		{"callback not http", func(o map[string]any) { o["callback"] = "ftp://hooks.example.com/cb/s3cr3t" }, "callback ftp://hooks.example.com: want"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options("")
			tc.edit(o)
			_, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: o})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Fatalf("New = %v: the error holds the callback's secret", err)
			}
		})
	}
}

func TestHostMountsAndRunsConfiguredWebhooks(t *testing.T) {
	plane := taskplane.New(storetest.OpenSQLite(t))
	crm := options("")
	crm["secret"] = crmSecret
	inst := []sources.Instance{
		{Source: webhook.Name, Config: sources.Config{Instance: "ci", Principal: "alice", Options: options("")}},
		{Source: webhook.Name, Config: sources.Config{Instance: "crm", Principal: "bob", Options: crm}},
	}
	if _, err := sources.NewHost(plane, http.NewServeMux(), append(inst, inst[0])); err == nil {
		t.Fatal("an instance configured twice was accepted")
	}
	mux := http.NewServeMux()
	host, err := sources.NewHost(plane, mux, inst)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	host.Start(ctx)
	for host.Health(ctx) != nil {
		time.Sleep(time.Millisecond)
	}
	body := []byte(`{"event": {"id": "e1", "text": "hi"}, "repo": "r", "thread": "t"}`)
	for name, key := range map[string]string{"ci": secret, "crm": crmSecret} {
		resp, err := post(srv.URL+"/sources/webhook/"+name, body, time.Now(), key)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST to %s: %v %v", name, resp.Status, err)
		}
	}
	cancel()
	if err := host.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := sources.Configured(inst)[webhook.Name]; len(got) != 2 {
		t.Fatalf("Configured = %v", got)
	}
	for _, p := range []string{"alice", "bob"} {
		page, err := plane.ListTasks(context.Background(), p, taskplane.ListQuery{})
		if err != nil || page.TotalSize != 1 {
			t.Fatalf("%s tasks = %d, %v; want 1 each (the instance's principal)", p, page.TotalSize, err)
		}
	}
}

// Each refusal is classified by what it says of the receiver; a 429's Retry-After is read in
// both its forms (seconds, an HTTP date), and a 429 without a usable one backs off (retryable,
// spending attempts) rather than snoozing a guessed second.
func TestWebhookSenderClassifiesRefusals(t *testing.T) {
	inAnHour := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		status     int
		retryAfter string
		want       delivery.Kind
		wantWait   time.Duration
	}{
		{http.StatusBadRequest, "", delivery.KindPermanent, 0},
		{http.StatusRequestTimeout, "", delivery.KindRetryable, 0},
		{http.StatusTooEarly, "", delivery.KindRetryable, 0},
		{http.StatusTooManyRequests, "7", delivery.KindRetryAfter, 7 * time.Second},
		{http.StatusTooManyRequests, inAnHour, delivery.KindRetryAfter, time.Hour},
		{http.StatusTooManyRequests, "99999999999", delivery.KindRetryAfter, 9223372036 * time.Second}, // as long as a Duration holds
		{http.StatusTooManyRequests, "", delivery.KindRetryable, 0},
		{http.StatusTooManyRequests, "soon", delivery.KindRetryable, 0},
		{http.StatusBadGateway, "", delivery.KindIndeterminate, 0},
	} {
		t.Run(fmt.Sprintf("%d %s", tc.status, tc.retryAfter), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: options(srv.URL)})
			if err != nil {
				t.Fatal(err)
			}
			_, err = src.(sources.Sender).Send(context.Background(), sources.Delivery{ID: "d-1", Operation: "reply"})
			kind, wait, _ := delivery.Classify(err)
			if kind != tc.want || wait < tc.wantWait-2*time.Second || wait > tc.wantWait { // an HTTP date counts whole seconds
				t.Fatalf("Classify(%v) = %v, %v; want %v, %v", err, kind, wait, tc.want, tc.wantWait)
			}
		})
	}
}

// A callback that redirects is refused, and the signed answer goes nowhere but the configured URL.
func TestWebhookCallbackFollowsNoRedirect(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		fmt.Fprint(w, `{"id": "x"}`)
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: options(srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = src.(sources.Sender).Send(context.Background(), sources.Delivery{ID: "d-1", Operation: "reply"})
	if kind, _, _ := delivery.Classify(err); kind != delivery.KindPermanent || elsewhere.Load() != 0 {
		t.Fatalf("Send to a redirecting callback: %v (%v), %d requests elsewhere; want a permanent refusal and none", err, kind, elsewhere.Load())
	}
}

// A receiver that took the answer but gave no id has it: the answer is delivered, not sent again.
func TestWebhookCallbackWithoutAnIDIsDelivered(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: options(srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := src.(sources.Sender).Send(context.Background(), sources.Delivery{ID: "d-1", Operation: "reply"})
	if err != nil || r.ProviderID != "" || calls.Load() != 1 {
		t.Fatalf("Send to a receiver answering 204: %+v, %v after %d calls; want delivered with no id", r, err, calls.Load())
	}

	// A 2xx that is not JSON (a proxy's page) says nothing of the receiver: an unknown outcome.
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<html>sign in</html>")
	}))
	defer page.Close()
	src, err = sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: options(page.URL)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = src.(sources.Sender).Send(context.Background(), sources.Delivery{ID: "d-2", Operation: "reply"})
	if kind, _, _ := delivery.Classify(err); kind != delivery.KindIndeterminate {
		t.Fatalf("Send to a 200 HTML page: %v (%v), want an unknown outcome", err, kind)
	}
}

// send makes one Send of a question to the "ci" endpoint whose callback receiver is h.
func send(t *testing.T, h http.HandlerFunc) (sources.Receipt, error) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: options(srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	return src.(sources.Sender).Send(context.Background(), sources.Delivery{ID: "d-1", Operation: "question"})
}

// A receiver that took the answer and answered 2xx with more JSON than is read (64 KiB: it echoes
// the payload, say) has it: the answer is delivered, with the id when it comes within the bound,
// without one otherwise, and not sent again as an unknown outcome. A page that is not JSON is
// still an unknown outcome, however long.
func TestWebhookReceiptOverTheBodyLimitIsDelivered(t *testing.T) {
	big := strings.Repeat("x", 70<<10)
	for _, tc := range []struct {
		name, body, want string
		delivered        bool
	}{
		{"id first", fmt.Sprintf(`{"id": "42", "echo": %q}`, big), "ci:42", true},
		{"numeric id after a nested object", fmt.Sprintf(`{"meta": {"id": "no"}, "id": 42, "echo": %q}`, big), "ci:42", true},
		{"id past the bound", fmt.Sprintf(`{"echo": %q, "id": "42"}`, big), "", true},
		{"an array", fmt.Sprintf(`[%q]`, big), "", true},
		{"not JSON", "<html>" + big, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := send(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, tc.body) })
			if tc.delivered && (err != nil || r.ProviderID != tc.want) {
				kind, _, _ := delivery.Classify(err)
				t.Fatalf("Send = %+v, %v (%v); want delivered with %q", r, err, kind, tc.want)
			}
			if kind, _, _ := delivery.Classify(err); !tc.delivered && (err == nil || kind != delivery.KindIndeterminate) {
				t.Fatalf("Send = %+v, %v (%v); want an unknown outcome", r, err, kind)
			}
		})
	}
}

// Under the delivery engine, such a receipt is one POST, delivered, not 16 POSTs ending ambiguous.
func TestWebhookReceiptOverTheBodyLimitIsPostedOnce(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		fmt.Fprintf(w, `{"id": "42", "echo": %q}`, strings.Repeat("x", 70<<10))
	}))
	defer srv.Close()
	now := time.Now()
	eng := engineTo(t, srv.URL, func() time.Time { return now })
	rec, err := eng.Deliver(context.Background(), answer)
	if err != nil {
		t.Fatal(err)
	}
	rec = processUntilSettled(t, eng, rec, func() { now = now.Add(10 * time.Minute) }, 30)
	if rec.State != delivery.StateDelivered || rec.ProviderID != "ci:42" || calls.Load() != 1 {
		t.Fatalf("delivery %s (%q) after %d POSTs the receiver took; want delivered with ci:42 after 1", rec.State, rec.ProviderID, calls.Load())
	}
}

// A 2xx whose body fails to arrive (the connection drops after the status line) lost the
// receiver's id with it: an unknown outcome, which the idempotent class repeats to get the id,
// not a delivery without one (a question's replies would have nothing to continue).
func TestWebhook2xxWhoseBodyFailsIsAnUnknownOutcome(t *testing.T) {
	r, err := send(t, func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
		buf.Flush()
		conn.Close()
	})
	if kind, _, _ := delivery.Classify(err); err == nil || kind != delivery.KindIndeterminate {
		t.Fatalf("Send = %+v, %v (%v); want an unknown outcome", r, err, kind)
	}
}

// A callback URL may carry a secret in its path or query: a failed request's error names only
// the callback's origin.
func TestWebhookSenderErrorNamesOnlyTheCallbacksOrigin(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the request fails
	src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice",
		Options: options("http://" + addr + "/cb/s3cr3t-path?key=s3cr3t-query")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = src.(sources.Sender).Send(context.Background(), sources.Delivery{ID: "d-1", Operation: "reply"})
	if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "http://"+addr) {
		t.Fatalf("Send error %v: want the callback's origin and no path or query", err)
	}
}

// A callback that refuses the connection, or whose name does not resolve, certainly did not get
// the answer: retryable (backoff, then failed), not an unknown outcome that ends ambiguous in the
// operator's queue after an outage.
func TestWebhookCallbackNeverReachedIsRetryable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/cb"
	ln.Close()
	for _, callback := range []string{refused, "http://callback.invalid/cb"} {
		src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: options(callback)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = src.(sources.Sender).Send(context.Background(), sources.Delivery{ID: "d-1", Operation: "reply"})
		if kind, _, _ := delivery.Classify(err); kind != delivery.KindRetryable {
			t.Errorf("%s: %v classified %v, want retryable", callback, err, kind)
		}
	}
}

// engineTo builds a delivery engine, on SQLite and the clock now, whose webhook route sends to
// the "ci" endpoint with callback url, idempotent as the matrix declares.
func engineTo(t *testing.T, url string, now func() time.Time, opts ...delivery.Option) *delivery.Engine {
	t.Helper()
	src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: options(url)})
	if err != nil {
		t.Fatal(err)
	}
	eng := delivery.New(storetest.OpenSQLite(t), delivery.Routes{webhook.Name: {Sender: src.(sources.Sender), Recovery: delivery.Idempotent}},
		append([]delivery.Option{delivery.WithClock(now)}, opts...)...)
	t.Cleanup(func() { eng.Close() })
	return eng
}

// answer is a task's answer to the event e1 of the "ci" endpoint.
var answer = delivery.Request{Principal: "alice", TaskID: "t-1", ContextID: "c-1", Source: webhook.Name, Operation: delivery.OpReply,
	State: taskplane.StateCompleted, Locator: json.RawMessage(`{"instance":"ci","id":"e1"}`),
	Message: taskplane.Message{ID: "m-1", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("done")}}}

// processUntilSettled processes rec, calling advance (the clock) before each pass, until it
// settles or passes run out.
func processUntilSettled(t *testing.T, eng *delivery.Engine, rec delivery.Record, advance func(), passes int) delivery.Record {
	t.Helper()
	for range passes {
		if rec.State.Settled() {
			break
		}
		advance()
		var err error
		if rec, err = eng.Process(context.Background(), rec.Principal, rec.ID); err != nil {
			t.Fatal(err)
		}
	}
	return rec
}

// A receiver that rate-limits with 429 and no Retry-After for a few minutes does not make the
// answer fail: each 429 is a backoff that spends an attempt, not a one-second snooze that uses up
// the bounded snoozes (64) in about a minute.
func TestWebhookRateLimitWithoutRetryAfterBacksOffInsteadOfFailingInAMinute(t *testing.T) {
	var (
		calls   atomic.Int32
		limited atomic.Bool
	)
	limited.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if limited.Load() {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, `{"id": "42"}`)
	}))
	defer srv.Close()
	start := time.Now()
	now := start
	eng := engineTo(t, srv.URL, func() time.Time { return now })
	rec, err := eng.Deliver(context.Background(), answer)
	if err != nil {
		t.Fatal(err)
	}
	rec = processUntilSettled(t, eng, rec, func() { now = now.Add(1100 * time.Millisecond) }, 200)
	if rec.State.Settled() {
		t.Fatalf("delivery %s after %d POSTs in %s of 429s without Retry-After (%s)", rec.State, calls.Load(),
			now.Sub(start).Round(time.Second), rec.LastError)
	}
	limited.Store(false)
	rec = processUntilSettled(t, eng, rec, func() { now = now.Add(10 * time.Minute) }, 5)
	if rec.State != delivery.StateDelivered || rec.ProviderID != "ci:42" {
		t.Fatalf("delivery %s (%q) once the receiver took it, want delivered with ci:42", rec.State, rec.ProviderID)
	}
}

// A receiver that took the first POST but answered after the engine's send timeout (an unknown
// outcome), and answers the repeat of the same X-Channels-Delivery 409 "already have it", has the
// answer: the delivery is ambiguous (an operator looks), not failed ("not delivered").
func TestWebhookRepeatRefusedAfterAnUnknownOutcomeIsAmbiguous(t *testing.T) {
	var calls atomic.Int32
	// The first POST is answered only once the engine gave up on it (its connection closed), so
	// its outcome is unknown to the engine however slowly it reaches the handler; the test goes
	// on once it was answered, not after a fixed sleep (a first POST still in the server's queue
	// when the repeat came counted as a third POST under load).
	landed := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			defer close(landed)
			_, _ = io.Copy(io.Discard, r.Body) // then the server notices the client going away
			select {
			case <-r.Context().Done():
			case <-time.After(20 * time.Second):
			}
			fmt.Fprint(w, `{"id":"1"}`)
			return
		}
		http.Error(w, "delivery already received", http.StatusConflict)
	}))
	defer srv.Close()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	eng := engineTo(t, srv.URL, clock, delivery.WithSendTimeout(time.Second))
	rec, err := eng.Deliver(context.Background(), answer)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != delivery.StateSending {
		t.Fatalf("delivery %s after a send that timed out, want sending (%s)", rec.State, rec.LastError)
	}
	select { // the first POST has landed
	case <-landed:
	case <-time.After(20 * time.Second):
		t.Fatal("the first POST never reached the receiver")
	}
	rec = processUntilSettled(t, eng, rec, func() { mu.Lock(); now = now.Add(time.Minute); mu.Unlock() }, 3)
	if rec.State != delivery.StateAmbiguous || calls.Load() != 2 {
		t.Fatalf("delivery %s after %d POSTs, the first of which the receiver took (last error %q); want ambiguous after 2",
			rec.State, calls.Load(), rec.LastError)
	}
}

// A body that cannot be read to its end (the sender went away, a broken chunked encoding, a read
// timeout) is 400 and counted as rejected "unreadable", not 413 and "oversize": only a body past
// the limit is oversize.
func TestAnUnreadableBodyIsNotRecordedAsOversize(t *testing.T) {
	src, rejected := runningWebhook(t)
	req := httptest.NewRequest(http.MethodPost, "/sources/webhook/ci", nil)
	req.Body, req.ContentLength = &sourcetest.CutOffBody{Prefix: `{"event": {"id": "e1"`}, 100
	// Headers that pass: the body is read, for its MAC.
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(time.Now().Unix(), 10))
	req.Header.Set(webhook.HeaderSignature, "sha256=00")
	rec := httptest.NewRecorder()
	src.ServeHTTP(rec, req)
	counts := rejected()
	if rec.Code != http.StatusBadRequest || counts[sources.RejectedUnreadable] != 1 || counts[sources.RejectedOversize] != 0 {
		t.Fatalf("a body cut off by its sender: HTTP %d %q, rejected evidence %v; want 400 and one %q", rec.Code,
			strings.TrimSpace(rec.Body.String()), counts, sources.RejectedUnreadable)
	}
}

// runningWebhook runs the "ci" webhook source of alice on a SQLite plane until the test ends. It
// returns the endpoint and a function that counts the source's rejected evidence by reason.
func runningWebhook(t *testing.T) (sources.Endpoint, func() map[string]int64) {
	t.Helper()
	ep, _, rejected := runningWebhookOn(t, storetest.OpenSQLite(t))
	return ep, rejected
}

// runningWebhookOn is runningWebhook on a plane over st, which it returns too.
func runningWebhookOn(t *testing.T, st store.Store) (sources.Endpoint, *taskplane.Plane, func() map[string]int64) {
	t.Helper()
	plane := taskplane.New(st)
	sink, err := sources.NewSink(plane, webhook.Name)
	if err != nil {
		t.Fatal(err)
	}
	src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: options("")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sources.Run(ctx, src, sink) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(10 * time.Second); src.(sources.HealthChecker).Health(ctx) != nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the webhook source never became healthy")
		}
	}
	return src.(sources.Endpoint), plane, func() map[string]int64 {
		t.Helper()
		if err := sink.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		counts, err := sources.CountByReason(ctx, plane.Store(), store.EvidenceFilter{Principal: "alice", Source: webhook.Name, Kind: sources.EvidenceRejected})
		if err != nil {
			t.Fatal(err)
		}
		return counts
	}
}

// A request its headers show is not signed with the secret is refused before its body is read:
// whoever lacks the secret cannot make the source read (or wait for) up to MaxBody.
func TestWebhookRefusesBadSignatureHeadersWithoutReadingTheBody(t *testing.T) {
	src, rejected := runningWebhook(t)
	now := strconv.FormatInt(time.Now().Unix(), 10)
	for i, tc := range []struct {
		name, ts, sig, reason string
	}{
		{"no headers", "", "", "unsigned"},
		{"no signature", now, "", "unsigned"},
		{"timestamp not a number", "yesterday", "sha256=00", "bad-timestamp"},
		{"stale timestamp", strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10), "sha256=00", "stale-timestamp"},
		{"signature not hex", now, "sha256=not-hex", "bad-signature"},
		{"signature of another scheme", now, "sha1=00", "bad-signature"},
	} {
		body := &sourcetest.UntouchedBody{}
		req := httptest.NewRequest(http.MethodPost, "/sources/webhook/ci", nil)
		req.Body, req.ContentLength = body, 1<<30
		if tc.ts != "" {
			req.Header.Set(webhook.HeaderTimestamp, tc.ts)
		}
		if tc.sig != "" {
			req.Header.Set(webhook.HeaderSignature, tc.sig)
		}
		rec := httptest.NewRecorder()
		src.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized || body.Touched {
			t.Fatalf("%s: HTTP %d %q, body read: %v; want 401 without reading the body", tc.name, rec.Code,
				strings.TrimSpace(rec.Body.String()), body.Touched)
		}
		if n := rejected()[tc.reason]; n < 1 {
			t.Fatalf("%s: no rejected evidence %q (case %d)", tc.name, tc.reason, i)
		}
	}
}

// A refusal's body is read, so the next delivery reuses the connection instead of opening another.
func TestWebhookRefusalsReuseTheirConnection(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, strings.Repeat("busy ", 200))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: options(srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		_, err := src.(sources.Sender).Send(context.Background(), sources.Delivery{ID: fmt.Sprintf("d-%d", i), Operation: "reply"})
		if kind, _, _ := delivery.Classify(err); kind != delivery.KindIndeterminate {
			t.Fatalf("send %d: %v (%v); want an indeterminate outcome", i, err, kind)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("three refused deliveries opened %d connections; want 1", n)
	}
}

// A refusal whose body trickles is classified from its status line: the body is given up on
// after a moment (drain.MaxWait), not waited for up to the client's timeout.
func TestWebhookASlowRefusalBodyDoesNotHoldTheSend(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte("refused "))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
	}))
	defer srv.Close()
	defer close(release)
	src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: options(srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = src.(sources.Sender).Send(context.Background(), sources.Delivery{ID: "d-1", Operation: "reply"})
	if kind, _, _ := delivery.Classify(err); kind != delivery.KindPermanent {
		t.Fatalf("a 400: %v (%v); want a permanent refusal", err, kind)
	}
	if d := time.Since(start); d > 3*drain.MaxWait {
		t.Fatalf("a 400 whose body trickles held the send %s", d)
	}
}

// Two instances of one server that share a signing secret are refused, at start and by config
// check: a request signed for one would be accepted by the other, under the other's principal
// (a capture replayed within the window to the other instance's URL).
func TestInstancesSharingASecretAreRefused(t *testing.T) {
	plane := taskplane.New(storetest.OpenSQLite(t))
	inst := []sources.Instance{
		{Source: webhook.Name, Config: sources.Config{Instance: "ci", Principal: "alice", Options: options("")}},
		{Source: webhook.Name, Config: sources.Config{Instance: "crm", Principal: "bob", Options: options("")}},
	}
	_, err := sources.NewHost(plane, http.NewServeMux(), inst)
	if err == nil || !strings.Contains(err.Error(), `"ci" and "crm" share one secret`) {
		t.Fatalf("two instances with one secret: %v", err)
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("the refusal quotes the secret: %v", err)
	}
}
