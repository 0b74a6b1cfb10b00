package delivery_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane"
)

// fromSources adapts a sources.Sender (and Reconciler) to a delivery Route: the two packages'
// Delivery and Receipt have one shape, so the adapter is a pair of conversions. If package sources
// declares its types as aliases of delivery's, the conversions become no-ops and still compile.
type fromSources struct{ s sources.Sender }

func (a fromSources) Send(ctx context.Context, d delivery.Delivery) (delivery.Receipt, error) {
	r, err := a.s.Send(ctx, sources.Delivery(d))
	return delivery.Receipt(r), err
}

func (a fromSources) Lookup(ctx context.Context, d delivery.Delivery) (delivery.Receipt, bool, error) {
	r, found, err := a.s.(sources.Reconciler).Lookup(ctx, sources.Delivery(d))
	return delivery.Receipt(r), found, err
}

type echoSource struct{ got sources.Delivery }

func (e *echoSource) Send(_ context.Context, d sources.Delivery) (sources.Receipt, error) {
	e.got = d
	return sources.Receipt{ProviderID: "p-" + d.ID}, nil
}

func (e *echoSource) Lookup(_ context.Context, d sources.Delivery) (sources.Receipt, bool, error) {
	return sources.Receipt{}, false, nil
}

func TestSourcesSenderPlugsInByConversion(t *testing.T) {
	src := &echoSource{}
	var s delivery.Sender = fromSources{src}
	d := delivery.Delivery{ID: "dlv_1", Principal: "alice", TaskID: "t", ContextID: "c", Operation: delivery.OpQuestion,
		State: taskplane.StateInputRequired, Locator: json.RawMessage(`{"channel":"C1"}`),
		Message: taskplane.Message{ID: "m", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("?")}}}
	r, err := s.Send(context.Background(), d)
	if err != nil || r.ProviderID != "p-dlv_1" {
		t.Fatalf("Send = %+v, %v", r, err)
	}
	if diff := cmp.Diff(sources.Delivery(d), src.got); diff != "" {
		t.Errorf("the source saw (-sent +got):\n%s", diff)
	}
	if _, ok := s.(delivery.Reconciler); !ok {
		t.Error("the adapter lost the Reconciler")
	}
}
