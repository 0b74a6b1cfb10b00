package worker_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/executor/worker"
)

// TestAForgedClaimTimeInTheLeaseIsNotTimedAsIs: a worker holds its lease token and may alter the
// claim time in it (the secret does not cover it): the turn it then ends must not put an absurd
// duration into channels_executor_turn_duration_seconds (56 years, in the +Inf bucket and the
// _sum for good).
func TestAForgedClaimTimeInTheLeaseIsNotTimedAsIs(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		e.accept(t, "alice", taskplane.SourceA2A, "m-forged")
		id, l := e.claim(t, tokenAll)
		raw, err := base64.RawURLEncoding.DecodeString(l)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		m["c"] = 1 // one nanosecond after the epoch
		b, _ := json.Marshal(m)
		forged := base64.RawURLEncoding.EncodeToString(b)
		if code, body := e.call(t, http.MethodPost, "/worker/v1/tasks/"+id+"/complete", tokenAll, forged, map[string]any{"response": "ok"}); code != http.StatusOK {
			t.Fatalf("complete with the altered lease: %d %v (the altered lease is accepted: only the secret is checked)", code, body)
		}
		for _, d := range e.turnsEnded() {
			if d > time.Hour { // the lease is a minute; a turn longer than its lease could not end with ok
				t.Fatalf("the forged claim time was observed as a turn of %v", d)
			}
		}
	})
}

// TestAReleaseRetriedAtOnceIsTimedOnce: a worker that retries its release (the first one's
// answer lost or slow) sends it twice at once with the same lease: both resume the turn, one ends
// it, the other's EndTurn finds no turn; the turn is timed once.
func TestAReleaseRetriedAtOnceIsTimedOnce(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		const rounds = 100
		oks := 0
		for i := range rounds {
			e.accept(t, "alice", taskplane.SourceA2A, fmt.Sprintf("m-%d", i))
			id, l := e.claim(t, tokenAll)
			var wg sync.WaitGroup
			codes := make([]int, 2)
			for j := range 2 {
				wg.Go(func() {
					// Not e.call: it may t.Fatal, and this is not the test's goroutine.
					req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/worker/v1/tasks/"+id+"/release", nil)
					req.Header.Set("Authorization", "Bearer "+tokenAll)
					req.Header.Set(worker.LeaseHeader, l)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Errorf("release: %v", err)
						return
					}
					resp.Body.Close()
					codes[j] = resp.StatusCode
				})
			}
			wg.Wait()
			for _, c := range codes {
				if c == http.StatusOK {
					oks++
				}
			}
		}
		// A released wake is offered again later (not due on the test's clock): each round's claim
		// takes that round's new task. rounds turns, each ended by a release.
		if n := len(e.turnsEnded()); n != rounds {
			t.Fatalf("%d turns, each released (twice at once), were observed %d times; %d of the %d release calls answered 200",
				rounds, n, oks, 2*rounds)
		}
	})
}
