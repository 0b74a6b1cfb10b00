package delivery_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/sources/webhook"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// fixedSender answers every Send with one receipt and error, counting calls; its Lookup finds
// the delivery with the same receipt (a provider that has it).
type fixedSender struct {
	mu    sync.Mutex
	calls int
	rc    delivery.Receipt
	err   error
}

func (s *fixedSender) Send(context.Context, delivery.Delivery) (delivery.Receipt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return s.rc, s.err
}

func (s *fixedSender) Lookup(context.Context, delivery.Delivery) (delivery.Receipt, bool, error) {
	return s.rc, true, nil
}

// recoverFor runs the engine as Run would over the next hour and returns the delivery then.
func recoverFor(t *testing.T, e *delivery.Engine, c *clock, rec delivery.Record) delivery.Record {
	t.Helper()
	for range 30 {
		c.Advance(2 * time.Minute)
		_, _ = e.RunOnce(context.Background())
	}
	got, err := e.Get(context.Background(), rec.Principal, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// What a provider answers is its own text: a receipt id holding a NUL byte, an error whose text
// is not UTF-8 (a reason phrase in Latin-1). Postgres text refuses both; the outcome of the one
// call is recorded all the same, on every driver, and the provider is not called again.
func TestAProvidersUnstorableTextIsRecordedAfterOneCall(t *testing.T) {
	cases := []struct {
		name     string
		recovery delivery.Recovery
		rc       delivery.Receipt
		err      error
		want     delivery.State
	}{
		{"receipt id with NUL, idempotent", delivery.Idempotent, delivery.Receipt{ProviderID: "rcv-\x00-1"}, nil, delivery.StateDelivered},
		{"receipt id with NUL, lookup", delivery.Lookup, delivery.Receipt{ProviderID: "rcv-\x00-1"}, nil, delivery.StateDelivered},
		{"receipt id not UTF-8, lookup", delivery.Lookup, delivery.Receipt{ProviderID: "rcv-\xff-1"}, nil, delivery.StateDelivered},
		{"refusal not UTF-8", delivery.Lookup, delivery.Receipt{},
			delivery.Permanent(errors.New("callback answered 400 Bad \xff Request")), delivery.StateFailed},
		{"refusal with NUL", delivery.Idempotent, delivery.Receipt{},
			delivery.Permanent(errors.New("callback answered 400 \x00")), delivery.StateFailed},
	}
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				c := newClock()
				snd := &fixedSender{rc: tc.rc, err: tc.err}
				e := newEngine(t, open(t), delivery.Route{Sender: snd, Recovery: tc.recovery}, c,
					delivery.WithFinishTimeout(300*time.Millisecond))
				got := recoverFor(t, e, c, mustDeliver(t, e, request("t-1", "the answer")))
				if got.State != tc.want || snd.calls != 1 {
					t.Errorf("%s after %d provider calls (last error %q); want %s after 1", got.State, snd.calls, got.LastError, tc.want)
				}
			})
		}
	})
}

// The same through the webhook source's sender, against receivers that answer so: one that takes
// the answer and names it {"id":"a\u0000b"}, one that refuses it with "400 Requête invalide" in
// Latin-1 (RFC 9112 allows such a reason phrase). Each is posted once.
func TestAWebhookReceiversUnstorableAnswerIsPostedOnce(t *testing.T) {
	receivers := map[string]func(posts *atomic.Int32) (url string, stop func()){
		"a receipt id with NUL": func(posts *atomic.Int32) (string, func()) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				posts.Add(1)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"id":"a\u0000b"}`))
			}))
			return srv.URL, srv.Close
		},
		"a Latin-1 reason phrase": func(posts *atomic.Int32) (string, func()) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer conn.Close()
						r := bufio.NewReader(conn)
						for {
							line, err := r.ReadString('\n')
							if err != nil {
								return
							}
							if line == "\r\n" {
								break
							}
						}
						posts.Add(1)
						_, _ = conn.Write([]byte("HTTP/1.1 400 Requ\xeate invalide\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
					}()
				}
			}()
			return "http://" + ln.Addr().String() + "/cb", func() { ln.Close() }
		},
	}
	want := map[string]delivery.State{"a receipt id with NUL": delivery.StateDelivered, "a Latin-1 reason phrase": delivery.StateFailed}
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		for name, start := range receivers {
			t.Run(name, func(t *testing.T) {
				var posts atomic.Int32
				url, stop := start(&posts)
				defer stop()
				src, err := sources.New(webhook.Name, sources.Config{Instance: "ci", Principal: "alice", Options: map[string]any{
					"secret": "0123456789abcdef0123456789abcdef", "identity": "event.id", "conversation": []any{"repo", "thread"},
					"text": "event.text", "reply_to": "in_reply_to", "callback": url}})
				if err != nil {
					t.Fatal(err)
				}
				c := newClock()
				e := newEngine(t, open(t), delivery.Route{Sender: src.(delivery.Sender), Recovery: delivery.Idempotent}, c,
					delivery.WithFinishTimeout(300*time.Millisecond))
				got := recoverFor(t, e, c, mustDeliver(t, e, request("t-1", "the answer")))
				if got.State != want[name] || posts.Load() != 1 {
					t.Errorf("%s after %d POSTs (last error %q); want %s after 1", got.State, posts.Load(), got.LastError, want[name])
				}
			})
		}
	})
}
