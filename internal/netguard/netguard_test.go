package netguard

import (
	"net/netip"
	"testing"
)

// Each kind of address is told apart, with IPv6 forms that embed an IPv4 address judged by it.
func TestClassifyAddresses(t *testing.T) {
	for _, c := range []struct {
		addr      string
		reason    string
		privateOK bool
	}{
		{"93.184.216.34", "", false},
		{"2606:2800:220:1:248:1893:25c8:1946", "", false},
		{"127.0.0.1", "loopback", true},
		{"::1", "loopback", true},
		{"10.1.2.3", "private", true},
		{"172.20.0.1", "private", true},
		{"192.168.1.1", "private", true},
		{"169.254.1.1", "link-local", true},
		{"fe80::1", "link-local", true},
		{"fd12:3456::1", "unique-local", true},
		{"100.64.0.1", "shared address space (CGNAT)", true},
		{"169.254.169.254", "cloud metadata", false},
		{"fd00:ec2::254", "cloud metadata", false},
		{"100.100.100.200", "cloud metadata", false},
		{"0.0.0.0", "unspecified", false},
		{"::", "unspecified", false},
		{"224.0.0.1", "multicast", false},
		{"255.255.255.255", "broadcast", false},
		{"198.51.100.7", "documentation", false},
		{"::ffff:10.0.0.1", "private", true}, // IPv4-mapped
		{"::ffff:169.254.169.254", "cloud metadata", false},
		{"64:ff9b::a00:1", "private", true},             // NAT64 of 10.0.0.1
		{"2002:7f00:1::1", "loopback", true},            // 6to4 of 127.0.0.1
		{"2002:5db8:d822::1", "", false},                // 6to4 of a public address
		{"::ffff:0:7f00:1", "loopback", true},           // IPv4-translated (SIIT) 127.0.0.1
		{"::ffff:0:a9fe:a9fe", "cloud metadata", false}, // IPv4-translated 169.254.169.254
	} {
		reason, ok := Classify(netip.MustParseAddr(c.addr))
		if reason != c.reason || (reason != "" && ok != c.privateOK) {
			t.Errorf("Classify(%s) = %q, %v; want %q, %v", c.addr, reason, ok, c.reason, c.privateOK)
		}
	}
}
