package netguard

import "testing"

// The public URL's host passes the loopback listener's Host guard however either is written: the
// public host is read like a Host header (lowercased, without a trailing dot), so a public_url
// written as a fully qualified name (https://agents.example.com.) matches its requests.
func TestPublicHostWithATrailingDotPassesTheGuard(t *testing.T) {
	for _, host := range []string{"agents.example.com.", "agents.example.com.:443", "agents.example.com"} {
		if !LoopbackHost(host, "agents.example.com.") {
			t.Errorf("Host %q under public host agents.example.com. refused", host)
		}
	}
}
