package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchA2APrintsOneJSONLine runs short loads against the in-process Channels and the a2a-go
// reference over both bindings and modes, and checks the one JSON line each prints.
func TestBenchA2APrintsOneJSONLine(t *testing.T) {
	for _, args := range [][]string{
		{"--binding", "rest", "--mode", "blocking", "--peer", "a2a-go"},
		{"--binding", "jsonrpc", "--mode", "immediate", "--peer", "a2a-go"},
		{"--binding", "jsonrpc", "--mode", "blocking"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			c := newCLI(t, nil)
			argv := append([]string{"bench", "a2a", "--duration", "300ms", "--warmup", "0", "--concurrency", "2", "--max-requests", "500"}, args...)
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
				r.Requests > 500 || !strings.HasPrefix(r.Store, "sqlite://") || r.Server != "channels" {
				t.Fatalf("channels figures: %s", out)
			}
			if peer := strings.Contains(strings.Join(args, " "), "a2a-go"); peer {
				if r.Peer == nil || r.Peer.Server != "a2a-go" || r.Peer.Requests == 0 || r.Peer.Errors != 0 || r.Ratio <= 0 {
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
