// Package netguard tells public addresses from the ones a server must not be made to reach
// (SSRF): loopback, private, link-local, cloud metadata, reserved, and IPv6 forms that embed them.
// The push notifier and the a2a executor check every address they dial against it. It also tells
// a loopback Host header (LoopbackHost), for servers that trust loopback callers.
package netguard

import (
	"net"
	"net/netip"
	"strings"
)

// Unspecified is Classify's reason for 0.0.0.0 and [::]: dialled, they reach this host.
const Unspecified = "unspecified"

// ranges are the addresses that are not public. privateOK marks those an operator's opt-in for
// private networks admits (never cloud metadata, documentation or reserved ones).
var ranges = []struct {
	p         netip.Prefix
	reason    string
	privateOK bool
}{
	// Cloud metadata first: inside link-local and ULA ranges, and never admitted.
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata", false},
	{netip.MustParsePrefix("169.254.170.2/32"), "cloud metadata", false}, // ECS task metadata
	{netip.MustParsePrefix("100.100.100.200/32"), "cloud metadata", false},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata", false},

	{netip.MustParsePrefix("0.0.0.0/32"), Unspecified, false},
	{netip.MustParsePrefix("0.0.0.0/8"), "this network", false},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback", true},
	{netip.MustParsePrefix("10.0.0.0/8"), "private", true},
	{netip.MustParsePrefix("172.16.0.0/12"), "private", true},
	{netip.MustParsePrefix("192.168.0.0/16"), "private", true},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local", true},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT)", true},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved", false},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation", false},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking", false},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation", false},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation", false},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast", false},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved", false},

	{netip.MustParsePrefix("::/128"), Unspecified, false},
	{netip.MustParsePrefix("::1/128"), "loopback", true},
	{netip.MustParsePrefix("::/96"), "reserved (IPv4-compatible)", false},
	{netip.MustParsePrefix("100::/64"), "reserved (discard)", false},
	{netip.MustParsePrefix("2001::/32"), "reserved (Teredo)", false},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation", false},
	{netip.MustParsePrefix("fc00::/7"), "unique-local", true},
	{netip.MustParsePrefix("fe80::/10"), "link-local", true},
	{netip.MustParsePrefix("fec0::/10"), "site-local", true},
	{netip.MustParsePrefix("ff00::/8"), "multicast", false},
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	nat64loc  = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour = netip.MustParsePrefix("2002::/16")
	siit      = netip.MustParsePrefix("::ffff:0:0:0/96") // IPv4-translated (RFC 6052 / SIIT)
)

// Classify returns why a is not a public address ("" when it is) and whether the opt-in admits
// it. IPv6 addresses that embed an IPv4 address (mapped, translated, NAT64, 6to4) are judged by
// it.
func Classify(a netip.Addr) (reason string, privateOK bool) {
	if !a.IsValid() {
		return "invalid", false
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a), siit.Contains(a):
			return Classify(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		case nat64loc.Contains(a):
			return "reserved (local NAT64)", false
		case sixToFour.Contains(a):
			return Classify(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		}
	}
	if a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return "broadcast", false
	}
	for _, r := range ranges {
		if r.p.Contains(a) {
			return r.reason, r.privateOK
		}
	}
	return "", false
}

// LoopbackHost reports whether hostport (a Host header) names this machine's loopback interface
// (localhost, *.localhost, 127.0.0.0/8, [::1]) or, when public is not "", the host public (the
// public URL's). A server that trusts loopback callers asks it against DNS rebinding: a web page
// whose name the attacker re-points at 127.0.0.1 reaches a loopback listener from the browser,
// but its requests carry the attacker's name in Host.
func LoopbackHost(hostport, public string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = HostName(host)
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	return public != "" && host == HostName(public)
}

// HostName is a host as compared: lowercased, without IPv6 brackets or a trailing dot (the root
// of a fully qualified name), so "Agents.Example.com." is "agents.example.com".
func HostName(host string) string {
	return strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
}
