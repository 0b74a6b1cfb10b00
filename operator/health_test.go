package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/operator"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// flakyProbe is a provider connection whose health the test sets.
type flakyProbe struct {
	mu  sync.Mutex
	err error
}

func (p *flakyProbe) set(err error) { p.mu.Lock(); p.err = err; p.mu.Unlock() }

func (p *flakyProbe) probe(context.Context) []sources.InstanceHealth {
	p.mu.Lock()
	defer p.mu.Unlock()
	return []sources.InstanceHealth{
		{Source: "slack", Instance: "acme", Checks: true, Err: p.err},
		{Source: "webhook", Instance: "ci", Checks: false},
	}
}

// readyz reads /readyz as the operator (token op-token), and checks that a caller without the
// token gets the same status code and the status alone: no source names, no store errors.
func readyz(t *testing.T, h http.Handler) (int, operator.Readiness) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
	req.Header.Set("Authorization", "Bearer op-token")
	h.ServeHTTP(rec, req)
	var r operator.Readiness
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("readyz body %q: %v", rec.Body.String(), err)
	}
	anon := httptest.NewRecorder()
	h.ServeHTTP(anon, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if want, _ := json.Marshal(map[string]string{"status": r.Status}); anon.Code != rec.Code || strings.TrimSpace(anon.Body.String()) != string(want) {
		t.Fatalf("readyz without the token: %d %s, want %d %s", anon.Code, anon.Body.String(), rec.Code, want)
	}
	return rec.Code, r
}

// TestReadyzFollowsSourceHealthAfterStartup proves /readyz reflects health after start-up: not
// ready until a source has connected, ready while it fails for less than the window, unready
// once it keeps failing past the window, ready again when it recovers — and unready when the
// store stops answering.
func TestReadyzFollowsSourceHealthAfterStartup(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		st := open(t)
		now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		clock := func() time.Time { return now }
		p := &flakyProbe{err: errors.New("socket mode: dial: connection refused")}
		h := operator.NewHealth(p.probe, time.Second, time.Minute, operator.WithHealthClock(clock))
		var ready atomic.Bool
		ready.Store(true)
		srv := &operator.Server{Store: st, StoreName: st.Capabilities().Name, Health: h, Ready: &ready, Token: "op-token"}
		mux := http.NewServeMux()
		srv.Mount(mux)
		step := func(d time.Duration, err error, wantCode int, wantStatus string) operator.Readiness {
			t.Helper()
			now = now.Add(d)
			p.set(err)
			h.Check(context.Background())
			code, r := readyz(t, mux)
			if code != wantCode || r.Sources[0].Status != wantStatus {
				t.Fatalf("at +%s: readyz %d with slack %s, want %d with %s (%+v)", d, code, r.Sources[0].Status, wantCode, wantStatus, r)
			}
			if r.Sources[1].Status != operator.StatusUnchecked {
				t.Fatalf("a source without a health check is %s, want unchecked", r.Sources[1].Status)
			}
			return r
		}
		refused := errors.New("socket mode: dial: connection refused")
		r := step(0, refused, 503, operator.StatusConnecting)
		if len(r.Reasons) != 1 || !strings.Contains(r.Reasons[0], "slack acme not connected") {
			t.Fatalf("reasons %v", r.Reasons)
		}
		step(time.Second, nil, 200, operator.StatusOK)
		step(10*time.Second, refused, 200, operator.StatusFailing) // within the window
		step(30*time.Second, refused, 200, operator.StatusFailing)
		r = step(31*time.Second, refused, 503, operator.StatusUnhealthy) // 61 s of failures
		if !strings.Contains(r.Reasons[0], "connection refused") {
			t.Fatalf("reasons %v do not say why", r.Reasons)
		}
		step(5*time.Minute, refused, 503, operator.StatusUnhealthy)
		step(time.Second, nil, 200, operator.StatusOK)             // recovered
		step(50*time.Second, refused, 200, operator.StatusFailing) // a new window starts
		step(time.Second, nil, 200, operator.StatusOK)

		ready.Store(false) // shutting down
		if code, r := readyz(t, mux); code != 503 || !strings.Contains(strings.Join(r.Reasons, ";"), "shutting down") {
			t.Fatalf("readyz while shutting down = %d %v", code, r.Reasons)
		}
		ready.Store(true)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if code, r := readyz(t, mux); code != 503 || !strings.Contains(strings.Join(r.Reasons, ";"), "store unreachable") {
			t.Fatalf("readyz with the store closed = %d %v", code, r.Reasons)
		}
	})
}

// TestOpenAdminIsOpenToThisMachineOnly: with no operator token on a loopback listener, the admin
// pages, /metrics and the details of /readyz are open to requests under a loopback Host name, not
// to a page that reached the listener by DNS rebinding nor to a request under another name (such
// as the public URL's, through a reverse proxy), which get the readiness status alone.
func TestOpenAdminIsOpenToThisMachineOnly(t *testing.T) {
	st := storetest.OpenSQLite(t)
	var ready atomic.Bool
	ready.Store(true)
	srv := &operator.Server{Store: st, StoreName: "sqlite", Ready: &ready, OpenAdmin: true}
	mux := http.NewServeMux()
	srv.Mount(mux)
	for _, tc := range []struct {
		host, path, want string
		code             int
	}{
		{"localhost:8788", "/readyz", `"store":"sqlite"`, http.StatusOK},
		{"channels.example.com", "/readyz", `{"status":"ready"}`, http.StatusOK},
		{"channels.example.com", "/admin/api/summary", "operator token", http.StatusForbidden},
		{"rebind.attacker.example", "/readyz", `{"status":"ready"}`, http.StatusOK},
		{"127.0.0.1:8788", "/admin/api/summary", `"sources"`, http.StatusOK},
		{"rebind.attacker.example", "/admin/api/summary", "operator token", http.StatusForbidden},
	} {
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		req.Host = tc.host
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("GET %s as %s: %d %s, want %d with %s", tc.path, tc.host, rec.Code, rec.Body.String(), tc.code, tc.want)
		}
	}
}

// The instrumented store keeps the clock of the store it wraps (store.Clock), so the task plane
// and the delivery engine that `channels serve` builds on it measure leases on the database's.
func TestInstrumentedStoreKeepsTheStoresClock(t *testing.T) {
	ahead := time.Now().Add(time.Hour)
	s := storetest.Clocked{Store: storetest.OpenSQLite(t), Clock: func() time.Time { return ahead }}
	if got := store.NowFunc(operator.NewMetrics().Store(s))(); !got.Equal(ahead) {
		t.Errorf("the instrumented store's clock = %v, want the wrapped store's %v", got, ahead)
	}
}
