package a2aagent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
)

// TestTheTokenGoesOnlyToTheHostsOfTheCurrentCard: the bearer token is sent to the agent URL's
// host and to the hosts of the interfaces its card lists; when the card is read again (after a
// transport failure) and no longer lists a host, the token is no longer sent there.
func TestTheTokenGoesOnlyToTheHostsOfTheCurrentCard(t *testing.T) {
	other := func() *url.URL {
		srv := httptest.NewServer(http.NotFoundHandler())
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		return u
	}
	old, moved := other(), other()
	agent, move := movingCard(t, old)
	e, err := New(Config{AgentURL: agent, Token: "tok", AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	agentURL, _ := url.Parse(agent)
	var auth *bearer // the bearer of the client connect made last
	connect := func() {
		t.Helper()
		_, card, err := e.connect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if auth, err = e.bearerFor(card); err != nil {
			t.Fatal(err)
		}
	}
	sent := func(u *url.URL) bool { return auth.header(u) != "" }
	connect()
	if !sent(agentURL) || !sent(old) || sent(moved) {
		t.Fatalf("first card: token to the agent URL %v, its interface %v, another host %v; want true, true, false",
			sent(agentURL), sent(old), sent(moved))
	}
	move(moved)
	e.reset()
	connect()
	if !sent(agentURL) || sent(old) || !sent(moved) {
		t.Errorf("card read again: token to the agent URL %v, the host it no longer lists %v, the host it lists now %v; want true, false, true",
			sent(agentURL), sent(old), sent(moved))
	}
}

// TestATurnKeepsItsTokenWhenAnotherTurnReadsANewCard: a turn keeps the client it started with
// (it polls its downstream task on it); another turn's transport failure makes the card be read
// again, and the new card lists another host: the first turn's next poll still carries the token
// to the host of its own card.
func TestATurnKeepsItsTokenWhenAnotherTurnReadsANewCard(t *testing.T) {
	var mu sync.Mutex
	var authAtOld []string
	oldSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		authAtOld = append(authAtOld, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "unauthenticated", http.StatusUnauthorized)
	}))
	t.Cleanup(oldSrv.Close)
	movedSrv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(movedSrv.Close)
	old, _ := url.Parse(oldSrv.URL)
	moved, _ := url.Parse(movedSrv.URL)
	agent, move := movingCard(t, old)
	e, err := New(Config{AgentURL: agent, Token: "tok", AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	clientA, _, err := e.connect(ctx) // turn A's client, kept for its whole turn
	if err != nil {
		t.Fatal(err)
	}
	_, _ = clientA.GetTask(ctx, &a2a.GetTaskRequest{ID: "downstream"})
	move(moved)
	e.reset() // turn B's transport failure: the card is read again, and lists moved
	if _, _, err := e.connect(ctx); err != nil {
		t.Fatal(err)
	}
	_, _ = clientA.GetTask(ctx, &a2a.GetTaskRequest{ID: "downstream"}) // turn A's next poll
	mu.Lock()
	defer mu.Unlock()
	if len(authAtOld) != 2 || authAtOld[0] == "" || authAtOld[1] == "" {
		t.Fatalf("turn A's polls of the host its card listed carried Authorization %q; want the token on both", authAtOld)
	}
}

// movingCard serves an agent card whose one interface is on host at first; move puts it on
// another host, for the next read of the card.
func movingCard(t *testing.T, host *url.URL) (agentURL string, move func(*url.URL)) {
	t.Helper()
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		u := host
		mu.Unlock()
		card := &a2a.AgentCard{Name: "agent", Description: "d", Version: "1",
			SupportedInterfaces: []*a2a.AgentInterface{a2a.NewAgentInterface(u.String()+"/rpc", a2a.TransportProtocolJSONRPC)},
			DefaultInputModes:   []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"}}
		a2asrv.NewStaticAgentCardHandler(card).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func(u *url.URL) {
		mu.Lock()
		host = u
		mu.Unlock()
	}
}
