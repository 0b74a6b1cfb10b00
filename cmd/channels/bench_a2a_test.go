package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestBenchA2APrintsOneJSONLine runs short loads against the in-process Channels and the a2a-go
// reference over both bindings and modes, and checks the one JSON line each prints. Each load is
// bounded by its number of requests, not by a short duration, which a loaded machine (the race
// detector, two cores) can spend before any request finishes.
func TestBenchA2APrintsOneJSONLine(t *testing.T) {
	for _, args := range [][]string{
		{"--binding", "rest", "--mode", "blocking", "--peer", "a2a-go", "--rounds", "3"},
		{"--binding", "jsonrpc", "--mode", "immediate", "--peer", "a2a-go"},
		{"--binding", "jsonrpc", "--mode", "blocking"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			c := newCLI(t, nil)
			argv := append([]string{"bench", "a2a", "--duration", "2m", "--warmup", "0", "--concurrency", "2", "--max-requests", "20"}, args...)
			if code := c.run(context.Background(), argv...); code != 0 {
				t.Fatalf("exit %d: %s", code, c.stderr.String())
			}
			out := strings.TrimSpace(c.stdout.String())
			if strings.Count(out, "\n") != 0 {
				t.Fatalf("want one line, got %q", out)
			}
			var r benchA2AResult
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatal(err)
			}
			if r.Requests == 0 || r.Errors != 0 || r.ReqPerSec <= 0 || r.P50Ms <= 0 || r.P99Ms < r.P50Ms ||
				r.Requests != 20 || !strings.HasPrefix(r.Store, "sqlite://") || r.Server != "channels" {
				t.Fatalf("channels figures: %s", out)
			}
			if peer := strings.Contains(strings.Join(args, " "), "a2a-go"); peer {
				if r.Peer == nil || r.Peer.Server != "a2a-go" || r.Peer.Requests != 20 || r.Peer.Errors != 0 || r.Ratio <= 0 {
					t.Fatalf("peer figures: %s", out)
				}
				rounds := 4 // the default
				if strings.Contains(strings.Join(args, " "), "--rounds 3") {
					rounds = 3
				}
				if r.Rounds != rounds {
					t.Fatalf("rounds %d, want %d: %s", r.Rounds, rounds, out)
				}
			} else if r.Peer != nil {
				t.Fatalf("a peer ran without --peer: %s", out)
			}
		})
	}
}

func TestBenchA2ARefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--binding", "grpc"}, {"--mode", "fast"}, {"--peer", "python"}, {"--concurrency", "0"}, {"--duration", "0s"},
		{"--rounds", "0"}, {"--rounds", "101"}, {"--peer", "a2a-go", "--duration", "1s", "--rounds", "20"},
	} {
		c := newCLI(t, nil)
		if code := c.run(context.Background(), append([]string{"bench", "a2a"}, args...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", args, code)
		}
	}
}

// A loader measured in slices reports the figures of all of them, and --max-requests bounds
// them together.
func TestBenchA2ALoaderAddsUpItsSlices(t *testing.T) {
	peer, err := startBenchA2AGo()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.stop()
	o := a2aBenchOptions{binding: "rest", mode: "blocking", concurrency: 2, maxRequests: 7}
	l := newA2ALoader(peer.url, o)
	defer l.close()
	ctx := context.Background()
	if err := l.measure(ctx, o, 2*time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	first := l.elapsed
	o.maxRequests = 12
	if err := l.measure(ctx, o, 2*time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	r := l.result("a2a-go")
	if r.Requests != 12 || r.Errors != 0 || len(l.lat) != 12 || l.elapsed <= first || r.ReqPerSec <= 0 {
		t.Fatalf("two slices of 7 and 5 requests: %+v (elapsed %s after the first %s)", r, l.elapsed, first)
	}
	// The bound is reached: a further slice sends nothing.
	if err := l.measure(ctx, o, 2*time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	if r := l.result("a2a-go"); r.Requests != 12 {
		t.Fatalf("a slice past --max-requests sent %d more", r.Requests-12)
	}
}

// A duration too short for any request to finish is reported as such, not as a total failure
// with an empty error: every request was cut off, none failed.
func TestBenchA2ASaysNoRequestCompletedWithinTheDuration(t *testing.T) {
	c := newCLI(t, nil)
	code := c.run(context.Background(), "bench", "a2a", "--duration", "1ns", "--warmup", "0", "--concurrency", "1")
	if code == 0 {
		t.Fatalf("exit 0 with no request measured: %s", c.stdout.String())
	}
	if !strings.Contains(c.stderr.String(), "no request completed within the duration") {
		t.Fatalf("exit %d: %q, want it to say no request completed within the duration", code, c.stderr.String())
	}
}
