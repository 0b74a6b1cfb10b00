package delivery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	_ "github.com/channels-dev/channels/taskplane/store/sqlite"
)

// chatSender stands in for a provider without idempotency keys that rate-limits once.
type chatSender struct{ calls int }

func (c *chatSender) Send(ctx context.Context, d delivery.Delivery) (delivery.Receipt, error) {
	c.calls++
	if c.calls == 1 {
		return delivery.Receipt{}, delivery.RetryAfter(time.Second, fmt.Errorf("rate limited"))
	}
	return delivery.Receipt{ProviderID: "1700000000.000200"}, nil
}

// Lookup makes the sender a Reconciler: nothing was ever lost in this example.
func (c *chatSender) Lookup(ctx context.Context, d delivery.Delivery) (delivery.Receipt, bool, error) {
	return delivery.Receipt{}, false, nil
}

// A delivery that the provider asks to retry later is snoozed without spending an attempt, and
// the engine's loop sends it once the wait is over.
func Example() {
	dir, err := os.MkdirTemp("", "delivery-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(context.Background(), "sqlite://"+filepath.Join(dir, "channels.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	eng := delivery.New(st, delivery.Routes{"chat": {Sender: &chatSender{}, Recovery: delivery.Lookup}},
		delivery.WithLogger(quiet), delivery.WithPoll(50*time.Millisecond))
	defer eng.Close()

	req := delivery.Request{
		Principal: "alice", TaskID: "task-1", Source: "chat", Operation: delivery.OpReply,
		State: taskplane.StateCompleted, Locator: json.RawMessage(`{"channel":"C1"}`),
		Message: taskplane.Message{ID: "m-1", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("Done.")}},
	}
	rec, err := eng.Deliver(context.Background(), req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after the first call:", rec.State, "attempts", rec.Attempts)

	// The loop retries it when the snooze is over (and recovers, continuously, what crashed).
	go eng.Run(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err = eng.Wait(ctx, rec.Principal, rec.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("settled:", rec.State, rec.ProviderID, "attempts", rec.Attempts)
	// Output:
	// after the first call: prepared attempts 0
	// settled: delivered 1700000000.000200 attempts 1
}
