package push_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/channels-dev/channels/push"
)

// A webhook refused at registration tells the client what it may know: the range of an address
// it wrote, but of a name only that it does not resolve to public addresses (or at all), never
// the internal addresses the name resolves to or the resolver's errors, which would let any
// client map the internal network. The cause keeps them for the operator's log.
func TestARefusedWebhookNameRevealsNoInternalAddress(t *testing.T) {
	internal := &push.Guard{Resolver: push.ResolverFunc(func(context.Context, string, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("10.20.30.40")}, nil
	})}
	err := internal.CheckURL(context.Background(), "https://payroll.corp.internal/x")
	if err == nil || strings.Contains(err.Error(), "10.20.30.40") || !strings.Contains(err.Error(), "public addresses") {
		t.Fatalf("a name resolving inside the network: %v", err)
	}
	if !errors.Is(err, push.ErrForbidden) || !strings.Contains(errors.Unwrap(err).Error(), "10.20.30.40") {
		t.Fatalf("the cause for the operator: %v", errors.Unwrap(err))
	}
	failing := &push.Guard{Resolver: push.ResolverFunc(func(context.Context, string, string) ([]netip.Addr, error) {
		return nil, errors.New("lookup nowhere.invalid on 10.255.255.53:53: no such host")
	})}
	err = failing.CheckURL(context.Background(), "https://nowhere.invalid/x")
	if err == nil || strings.Contains(err.Error(), "10.255.255.53") {
		t.Fatalf("a name that does not resolve: %v", err)
	}
	// An address the client wrote itself is named with its range: that tells it nothing new.
	if err := internal.CheckURL(context.Background(), "https://192.168.1.20/x"); err == nil || !strings.Contains(err.Error(), "(private)") {
		t.Fatalf("a private address literal: %v", err)
	}
}
