package delivery_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// One thread is one lane, and a lane sends its rows oldest first: a question rate limited for
// 30 s (429) is not overtaken by the cancel notice prepared 5 s later in the same thread.
func TestALaterDeliveryNeverOvertakesAnEarlierOneInItsLane(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		s := open(t)
		c := newClock()
		p := newProvider(c)
		e := newEngine(t, s, delivery.Route{Sender: p, Recovery: delivery.Lookup, Lane: laneOf, LaneInterval: time.Second}, c)
		p.behave = func(call int, d delivery.Delivery) (bool, error) {
			if call == 1 && d.Operation == delivery.OpQuestion {
				return false, delivery.RetryAfter(30*time.Second, errors.New("ratelimited"))
			}
			return true, nil
		}
		q := request("t-1", "Q: for how many?")
		q.Operation = delivery.OpQuestion
		qr := mustDeliver(t, e, q)
		wantState(t, qr, delivery.StatePrepared)
		c.Advance(5 * time.Second)
		n := request("t-1", "The task was canceled.")
		if _, err := e.Prepare(context.Background(), n); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 40; i++ {
			c.Advance(time.Second)
			if _, err := e.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		posts := p.allPosts()
		if len(posts) != 2 {
			t.Fatalf("%d posts", len(posts))
		}
		if posts[0].DeliveryID != qr.ID {
			t.Fatalf("the later notice (posted %v) overtook the earlier question (posted %v) in the same thread",
				posts[0].At.Sub(newClock().Now()), posts[1].At.Sub(newClock().Now()))
		}
	})
}
