package taskplane_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// When its LISTEN connection drops and comes back, RunListener pokes every subscriber (a stream,
// a blocking send, a running turn): notifications sent while it was down are lost, and without
// the poke a follower would see an event committed in that gap only at its periodic re-read.
func TestRunListenerPokesEverySubscriberWhenItReconnects(t *testing.T) {
	raw := storetest.PostgresURL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	app := q.Get("search_path") + "_listener" // the schema is the test's own
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	st, err := store.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	p := taskplane.New(st)
	acc, err := p.Accept(ctx, a2aEvent("m-listener-drop", "work"))
	if err != nil {
		t.Fatal(err)
	}
	poked, unsubscribe := p.Subscribe("alice", acc.Task.ID)
	defer unsubscribe()
	wg.Go(func() { _ = p.RunListener(ctx) })

	admin, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	listening := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND query ILIKE 'LISTEN%'`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor(t, "the listener to listen", func() bool { return listening() == 1 })
	select {
	case <-poked:
		t.Fatal("a subscriber was poked at the listener's first connect, with nothing committed since it subscribed")
	case <-time.After(200 * time.Millisecond):
	}
	var killed int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND query ILIKE 'LISTEN%'`, app).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminate the listening backend: killed %d, err %v", killed, err)
	}
	select {
	case <-poked:
	case <-time.After(15 * time.Second):
		t.Fatal("15s after the listener's connection dropped (it reconnects within about 100ms), its subscriber has not been poked")
	}
}
