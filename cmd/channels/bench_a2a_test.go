package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchA2APrintsOneJSONLine runs short loads against the in-process Channels and the a2a-go
// reference over both bindings and modes, and checks the one JSON line each prints. Each load is
// bounded by its number of requests, not by a short duration, which a loaded machine (the race
// detector, two cores) can spend before any request finishes.
func TestBenchA2APrintsOneJSONLine(t *testing.T) {
	for _, args := range [][]string{
		{"--binding", "rest", "--mode", "blocking", "--peer", "a2a-go"},
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
			} else if r.Peer != nil {
				t.Fatalf("a peer ran without --peer: %s", out)
			}
		})
	}
}

func TestBenchA2ARefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--binding", "grpc"}, {"--mode", "fast"}, {"--peer", "python"}, {"--concurrency", "0"}, {"--duration", "0s"},
	} {
		c := newCLI(t, nil)
		if code := c.run(context.Background(), append([]string{"bench", "a2a"}, args...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", args, code)
		}
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
