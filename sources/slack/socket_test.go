package slack_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// socketFake is Slack's Socket Mode side: the websocket apps.connections.open points to. It
// accepts only the Origin Slack's clients send, says hello, sends envelopes, reads acks, pings
// far more often than the client's ping interval, and can ask the client to reconnect.
type socketFake struct {
	t   testing.TB
	srv *httptest.Server

	opens atomic.Int64 // websocket connections accepted
	next  atomic.Int64 // envelope ids

	mu      sync.Mutex
	cur     *fakeConn
	changed chan struct{} // closed and replaced when cur changes
	acks    map[string]chan json.RawMessage
}

type fakeConn struct {
	c    *websocket.Conn
	wmu  sync.Mutex
	done chan struct{}
}

func (c *fakeConn) write(v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return c.c.WriteJSON(v)
}

func newSocketFake(t testing.TB) *socketFake {
	f := &socketFake{t: t, changed: make(chan struct{}), acks: map[string]chan json.RawMessage{}}
	up := websocket.Upgrader{CheckOrigin: func(r *http.Request) bool { return r.Header.Get("Origin") == "https://api.slack.com" }}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return // Upgrade answered the refusal
		}
		f.serve(&fakeConn{c: c, done: make(chan struct{})})
	}))
	t.Cleanup(func() {
		f.mu.Lock()
		if f.cur != nil {
			_ = f.cur.c.Close()
		}
		f.mu.Unlock()
		f.srv.Close()
	})
	return f
}

func (f *socketFake) url() string {
	return "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/link/?ticket=1"
}

func (f *socketFake) serve(fc *fakeConn) {
	n := f.opens.Add(1)
	if err := fc.write(map[string]any{"type": "hello", "num_connections": 1,
		"debug_info":      map[string]any{"host": "fake", "approximate_connection_time": 18060},
		"connection_info": map[string]any{"app_id": "A0APP"}}); err != nil {
		return
	}
	f.setCurrent(fc)
	go func() { // pings, far more often than the client's 30s ping interval
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-fc.done:
				return
			case <-t.C:
				if fc.c.WriteControl(websocket.PingMessage, []byte(fmt.Sprint("ping-", n)), time.Now().Add(time.Second)) != nil {
					return
				}
			}
		}
	}()
	defer func() {
		close(fc.done)
		_ = fc.c.Close()
		f.mu.Lock()
		if f.cur == fc {
			f.cur = nil
			close(f.changed)
			f.changed = make(chan struct{})
		}
		f.mu.Unlock()
	}()
	for {
		_, b, err := fc.c.ReadMessage()
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(b, &ack) != nil || ack.EnvelopeID == "" {
			f.t.Errorf("socket fake: not an ack: %s", b)
			continue
		}
		f.mu.Lock()
		ch := f.acks[ack.EnvelopeID]
		f.mu.Unlock()
		if ch == nil {
			f.t.Errorf("socket fake: ack of an unknown envelope %s", ack.EnvelopeID)
			continue
		}
		select {
		case ch <- ack.Payload:
		default:
			f.t.Errorf("socket fake: envelope %s acked twice", ack.EnvelopeID)
		}
	}
}

func (f *socketFake) setCurrent(fc *fakeConn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur = fc
	close(f.changed)
	f.changed = make(chan struct{})
}

// conn waits for a connected client.
func (f *socketFake) conn() *fakeConn {
	deadline := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		cur, changed := f.cur, f.changed
		f.mu.Unlock()
		if cur != nil {
			return cur
		}
		select {
		case <-changed:
		case <-deadline:
			f.t.Fatalf("socket fake: no client connected within 10s")
		}
	}
}

// send sends an envelope of type typ (events_api, interactive, …) and returns its envelope id
// and the channel its ack arrives on.
func (f *socketFake) send(typ string, payload any, retry int) (string, <-chan json.RawMessage) {
	id := fmt.Sprintf("env-%d", f.next.Add(1))
	ch := make(chan json.RawMessage, 1)
	f.mu.Lock()
	f.acks[id] = ch
	f.mu.Unlock()
	raw, ok := payload.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(payload)
		if err != nil {
			f.t.Fatal(err)
		}
		raw = b
	}
	env := map[string]any{"envelope_id": id, "type": typ, "payload": raw, "accepts_response_payload": typ == "interactive",
		"retry_attempt": retry}
	if retry > 0 {
		env["retry_reason"] = "timeout"
	}
	if err := f.conn().write(env); err != nil {
		f.t.Fatalf("socket fake: send %s: %v", id, err)
	}
	return id, ch
}

// disconnect asks the connected client to reconnect, as Slack does before it recycles a
// connection, and waits until that connection is gone.
func (f *socketFake) disconnect() {
	fc := f.conn()
	if err := fc.write(map[string]any{"type": "disconnect", "reason": "refresh_requested",
		"debug_info": map[string]any{"host": "fake"}}); err != nil {
		f.t.Fatal(err)
	}
	select {
	case <-fc.done:
	case <-time.After(10 * time.Second):
		f.t.Fatal("socket fake: the client kept the connection after disconnect")
	}
}
