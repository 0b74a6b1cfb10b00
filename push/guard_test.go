package push

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// staticResolver maps names to addresses, so no test asks real DNS.
func staticResolver(m map[string][]string) Resolver {
	return ResolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		var out []netip.Addr
		for _, s := range m[host] {
			out = append(out, netip.MustParseAddr(s))
		}
		if len(out) == 0 {
			return nil, errors.New("no such host (test resolver)")
		}
		return out, nil
	})
}

func TestGuardSchemeArmRefusesHTTPToAPublicName(t *testing.T) {
	g := &Guard{Resolver: staticResolver(map[string][]string{"hooks.example.com": {"93.184.216.34"}})}
	err := g.CheckURL(context.Background(), "http://hooks.example.com/a2a")
	var fe *ForbiddenError
	if !errors.As(err, &fe) || !strings.Contains(fe.Reason, "https") {
		t.Fatalf("http to a public name: err = %v, want the scheme arm's refusal", err)
	}
	if err := g.CheckURL(context.Background(), "https://hooks.example.com/a2a"); err != nil {
		t.Fatalf("https to a public name: %v", err)
	}
	for _, u := range []string{"ftp://hooks.example.com/", "https://user:pw@hooks.example.com/", "/relative"} {
		if err := g.CheckURL(context.Background(), u); !errors.Is(err, ErrForbidden) {
			t.Errorf("%s: err = %v, want ErrForbidden", u, err)
		}
	}
}

func TestGuardAddressArmRefusesHTTPSToPrivateAddresses(t *testing.T) {
	g := &Guard{Resolver: staticResolver(map[string][]string{
		"internal.example.com": {"10.0.0.7"},
		"mixed.example.com":    {"93.184.216.34", "192.168.0.1"},
		"meta.example.com":     {"169.254.169.254"},
	})}
	for _, u := range []string{
		"https://10.0.0.7/hook", "https://127.0.0.1:8443/hook", "https://[::1]/hook", "https://[fd00::1]/hook",
		"https://169.254.169.254/latest/meta-data", "https://100.64.1.1/hook", "https://localhost/hook",
		"https://internal.example.com/hook", "https://mixed.example.com/hook", "https://meta.example.com/",
	} {
		if err := g.CheckURL(context.Background(), u); !errors.Is(err, ErrForbidden) {
			t.Errorf("%s: err = %v, want ErrForbidden", u, err)
		}
	}
	if err := g.CheckURL(context.Background(), "https://unknown.example.com/"); err == nil {
		t.Error("a name that does not resolve was admitted")
	}
}

func TestGuardOptInAdmitsPrivateNetworksButNotMetadata(t *testing.T) {
	g := &Guard{AllowPrivateNetworks: true, Resolver: staticResolver(map[string][]string{
		"hook.test": {"127.0.0.1"},
		"meta.test": {"169.254.169.254"},
	})}
	for _, u := range []string{"http://127.0.0.1:9/hook", "https://10.0.0.7/", "http://[::1]:9/", "http://hook.test/"} {
		if err := g.CheckURL(context.Background(), u); err != nil {
			t.Errorf("%s with the opt-in: %v", u, err)
		}
	}
	for _, u := range []string{"http://169.254.169.254/", "http://meta.test/", "http://0.0.0.0:80/", "ftp://hook.test/"} {
		if err := g.CheckURL(context.Background(), u); !errors.Is(err, ErrForbidden) {
			t.Errorf("%s with the opt-in: err = %v, want ErrForbidden", u, err)
		}
	}
	// A test network often has no DNS for public names: with the opt-in a name that does not
	// resolve is registered, and the dial decides at delivery.
	if err := g.CheckURL(context.Background(), "https://example.com/tck-push-webhook"); err != nil {
		t.Errorf("a name that does not resolve, with the opt-in: %v", err)
	}
	if _, err := g.DialContext(context.Background(), "tcp", "example.com:443"); err == nil {
		t.Error("the dial connected to a name that does not resolve")
	}
}

func TestGuardDialChecksTheResolvedAddressAtConnectTime(t *testing.T) {
	answer := "93.184.216.34"
	g := &Guard{Resolver: ResolverFunc(func(context.Context, string, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr(answer)}, nil
	})}
	if err := g.CheckURL(context.Background(), "https://rebind.example.com/hook"); err != nil {
		t.Fatalf("registration: %v", err)
	}
	// The name now points inside: the dial is refused before any connection.
	answer = "10.9.8.7"
	_, err := g.DialContext(context.Background(), "tcp", "rebind.example.com:443")
	var fe *ForbiddenError
	if !errors.As(err, &fe) || fe.Addr.String() != "10.9.8.7" || fe.Reason != "private" {
		t.Fatalf("dial after rebinding: err = %v, want a refusal naming 10.9.8.7", err)
	}
}
