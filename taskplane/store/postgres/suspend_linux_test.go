package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane/store/postgres"
)

// A suspend is counted once: a store opened (and so measuring the database's clock, which counted
// the suspend) before it sampled the suspend did not run ahead of the database by the suspend
// once it sampled it. And the store samples every second: a further suspend reaches its Now
// within a couple of seconds (here the database's clock does not see it, so Now runs ahead).
func TestASuspendIsCountedOnce(t *testing.T) {
	t.Parallel()
	_, suspend, ahead := openSuspended(t, 10*time.Minute)
	time.Sleep(1500 * time.Millisecond) // past the store's first sample
	if d := ahead(); d.Abs() > 2*time.Second {
		t.Fatalf("after a 10-minute suspend the store's Now is %v off the database's clock", d)
	}
	suspend(5 * time.Second)
	time.Sleep(2500 * time.Millisecond)
	if d := ahead(); d < 4*time.Second || d > 7*time.Second {
		t.Fatalf("2.5 s after a further 5 s suspend the store's Now is %v ahead of the database's clock, want about 5 s (sampled every second)", d)
	}
}

// Now never goes back. A suspend the database's clock did not see carried the store's Now ahead
// of the database; the next measurement of the database's clock would step it back by the
// suspend. Instead Now moves on from where it was by a microsecond a call until the database's
// time passes it, then follows the database again.
func TestNowNeverGoesBackWhenAMeasurementFindsTheDatabaseBehind(t *testing.T) {
	t.Parallel()
	s, suspend, ahead := openSuspended(t, 0)
	const lead = 2 * time.Second
	suspend(lead)
	time.Sleep(1500 * time.Millisecond) // past the store's next sample of the suspend
	if d := ahead(); d < lead/2 {
		t.Fatalf("after a %v suspend the database did not see, the store's Now is only %v ahead of it", lead, d)
	}
	before := s.Now()
	if err := s.MeasureClock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := s.Now(); after.Before(before) {
		t.Fatalf("a measurement of the database's clock stepped Now back by %v", before.Sub(after))
	}
	time.Sleep(lead + 500*time.Millisecond) // the database's time has passed where Now stood
	if d := ahead(); d.Abs() > 300*time.Millisecond {
		t.Fatalf("once the database's time passed it, the store's Now is %v off the database's clock", d)
	}
}

// openSuspended opens a store on a host just back from a suspend of lag (OpenOnSuspendedHost),
// and returns it, its suspend, and how far its Now is ahead of the database's clock.
func openSuspended(t *testing.T, lag time.Duration) (*postgres.Store, func(time.Duration), func() time.Duration) {
	t.Helper()
	ctx := context.Background()
	u := newSchema(t)
	s, suspend, err := postgres.OpenOnSuspendedHost(ctx, u, lag)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	conn := connect(t, u)
	return s, suspend, func() time.Duration {
		t.Helper()
		var db time.Time
		if err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
			t.Fatal(err)
		}
		return s.Now().Sub(db)
	}
}
