package push

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// notPublic is an independent reading of the addresses the guard must refuse, from the standard
// library's predicates, on the address and on an IPv4 address an IPv6 one embeds (mapped,
// NAT64, 6to4).
func notPublic(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	var embedded []netip.Addr
	if a.Is6() {
		b := a.As16()
		if netip.MustParsePrefix("64:ff9b::/96").Contains(a) {
			embedded = append(embedded, netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		}
		if netip.MustParsePrefix("2002::/16").Contains(a) {
			embedded = append(embedded, netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		}
	}
	for _, x := range append(embedded, a) {
		if x.IsLoopback() || x.IsPrivate() || x.IsLinkLocalUnicast() || x.IsLinkLocalMulticast() || x.IsMulticast() ||
			x.IsUnspecified() || x.IsInterfaceLocalMulticast() || netip.MustParsePrefix("100.64.0.0/10").Contains(x) ||
			x == netip.MustParseAddr("255.255.255.255") {
			return true
		}
	}
	return false
}

func metadata(a netip.Addr) bool {
	a = a.Unmap()
	for _, m := range []string{"169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254"} {
		if a == netip.MustParseAddr(m) {
			return true
		}
	}
	return false
}

// FuzzGuardCheckURL feeds arbitrary webhook URLs, with a resolver answering every name with
// one arbitrary address, to the SSRF guard. It never panics; a refusal says so (ErrForbidden, or
// a name that does not resolve); an
// accepted URL is https without user information, and neither its host (an address literal) nor
// the address its name resolves to is loopback, private, link-local, multicast, unspecified or
// shared, directly or embedded in an IPv6 address; with the opt-in, cloud metadata stays
// refused.
func FuzzGuardCheckURL(f *testing.F) {
	for _, s := range []struct {
		url  string
		addr []byte
	}{
		{"https://hooks.example.com/x", []byte{93, 184, 216, 34}},
		{"https://hooks.example.com/x", []byte{10, 0, 0, 1}},
		{"http://hooks.example.com/x", []byte{93, 184, 216, 34}},
		{"https://127.0.0.1/", nil},
		{"https://[::ffff:127.0.0.1]:8443/", nil},
		{"https://[64:ff9b::a00:1]/", nil},
		{"https://[2002:a9fe:a9fe::1]/", nil},
		{"https://[fe80::1%25eth0]/", nil},
		{"https://localhost./", nil},
		{"https://user:pw@hooks.example.com/", []byte{93, 184, 216, 34}},
		{"https://169.254.169.254/latest/meta-data", nil},
		{"https://metadata.google.internal/", []byte{169, 254, 169, 254}},
		{"https://hooks.example.com/", []byte{0x20, 0x01, 0x48, 0x60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x88, 0x88}},
		{"https://x/", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1}},
	} {
		f.Add(s.url, s.addr)
	}
	f.Fuzz(func(t *testing.T, raw string, addr []byte) {
		var resolved netip.Addr
		switch len(addr) {
		case 4:
			resolved = netip.AddrFrom4([4]byte(addr))
		case 16:
			resolved = netip.AddrFrom16([16]byte(addr))
		}
		res := ResolverFunc(func(context.Context, string, string) ([]netip.Addr, error) {
			if !resolved.IsValid() {
				return nil, errors.New("no such host (fuzz resolver)")
			}
			return []netip.Addr{resolved}, nil
		})
		for _, private := range []bool{false, true} {
			g := &Guard{AllowPrivateNetworks: private, Resolver: res}
			err := g.CheckURL(context.Background(), raw)
			if err != nil {
				// A name that does not resolve is refused with its resolver's error as the cause, not
				// ErrForbidden; what the client is told names the refusal all the same.
				var unresolved *resolveError
				if !errors.Is(err, ErrForbidden) && !errors.As(err, &unresolved) || !strings.HasPrefix(err.Error(), ErrForbidden.Error()) {
					t.Fatalf("CheckURL(%q): refusal is neither forbidden nor unresolved: %v", raw, err)
				}
				continue
			}
			u, perr := url.Parse(raw)
			if perr != nil || u.User != nil || (u.Scheme != "https" && !(private && u.Scheme == "http")) {
				t.Fatalf("CheckURL(%q) accepted (private networks %v)", raw, private)
			}
			host := strings.TrimSuffix(u.Hostname(), ".")
			a, lerr := netip.ParseAddr(strings.Trim(host, "[]"))
			if lerr != nil {
				a = resolved // a name: its resolved address, if any
			}
			if !a.IsValid() {
				if !private {
					t.Fatalf("CheckURL(%q) accepted a name that does not resolve", raw)
				}
				continue
			}
			if metadata(a) || (!private && notPublic(a)) {
				t.Fatalf("CheckURL(%q) accepted address %s (private networks %v)", raw, a, private)
			}
		}
	})
}
