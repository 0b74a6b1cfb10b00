package postgres

import (
	"context"
	"fmt"
	"time"
)

// The database's clock. A lease, a due time or a lane slot that one process writes is compared by
// another: a claimer takes a delivery or a wake whose lease has run out by its own clock. With the
// processes' clocks apart by more than a lease's margin, a second process would take a delivery
// whose provider call is still in flight and call again. Now is the database's clock as measured
// at Open and every clockRefresh after, moved on by this process's monotonic clock since, so
// every process sharing the store reads one time, whatever the skew between their hosts — and
// whatever a host's wall clock does between measurements (an NTP step of it does not move Now).

// clockRefresh is how often the offset to the database's clock is measured again.
const clockRefresh = time.Minute

// sampleEvery is how often the time the host spent suspended is sampled (newElapsed).
const sampleEvery = time.Second

// clockSamples is how many round trips one measurement takes; the shortest one wins.
const clockSamples = 3

// clockWarn is the offset above which Open and the refresh log a warning: the hosts' clocks
// should be synchronized, and the operator should know when they are not.
const clockWarn = time.Second

// databaseClockAt is one measurement of the database's clock.
type databaseClockAt struct {
	db      time.Time     // the database's time
	elapsed time.Duration // the process's monotonic clock (Store.elapsed) at that time
	offset  time.Duration // the database's time minus this host's wall clock then
}

// Now returns the database's time as this process best knows it (store.Clock): the last
// measurement of the database's clock plus the monotonic time since. Its error is half the round
// trip of the measurement, and the drift of this host's clock over at most clockRefresh.
//
// Now never goes back, and no two calls return the same microsecond (the precision the store
// keeps). A measurement that finds the database behind where this process had carried it (this
// host's clock ran fast, or it counted a suspend the database did not) would step it back; Now
// instead moves on from the latest time it returned by a microsecond a call until the database's
// time passes it. So a lease or a due time it wrote is never followed by an earlier one, and two
// updates of a task never share a time (a stream tells a task's updates apart by their events'
// time, see a2aservice's Stream).
func (s *Store) Now() time.Time {
	m := s.clock.Load()
	t := m.db.Add(s.elapsed() - m.elapsed)
	n := t.UnixNano()
	for {
		latest := s.latest.Load()
		next := max(n, latest+int64(time.Microsecond))
		if s.latest.CompareAndSwap(latest, next) {
			return t.Add(time.Duration(next - n))
		}
	}
}

// ClockOffset returns how far the database's clock was ahead of this host's wall clock at the
// last measurement (negative: behind).
func (s *Store) ClockOffset() time.Duration { return s.clock.Load().offset }

// measureClock measures the offset to the database's clock and keeps it; on error it keeps the
// previous one.
func (s *Store) measureClock(ctx context.Context) error {
	// A suspend not yet sampled would be counted twice: once in the database's time measured
	// now, and again in the monotonic clock when it is sampled.
	s.sampleSuspend()
	// The samples time the query alone, on a connection taken beforehand: a wait for a
	// connection of a busy pool would count as round trip and move the estimate.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("read the database's clock: %w", err)
	}
	defer conn.Release()
	var (
		best time.Duration
		m    databaseClockAt
	)
	for i := range clockSamples {
		var db time.Time
		start, wall := s.elapsed(), s.local()
		if err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
			return fmt.Errorf("read the database's clock: %w", err)
		}
		rtt := s.elapsed() - start
		if i == 0 || rtt < best {
			best = rtt
			m = databaseClockAt{db: db, elapsed: start + rtt/2, offset: db.Sub(wall.Add(rtt / 2))}
		}
	}
	var prev time.Duration
	if p := s.clock.Swap(&m); p != nil {
		prev = p.offset
	}
	offset := m.offset
	if offset.Abs() > clockWarn && (prev-offset).Abs() > clockWarn/2 {
		s.logger().Warn("postgres store: this host's clock and the database's differ; leases and due times follow the database's",
			"database_ahead_by", offset.Round(time.Millisecond))
	}
	return nil
}

// keepClock measures the database's clock every clockRefresh, and samples the time the host
// spent suspended every sampleEvery, until the store closes.
func (s *Store) keepClock() {
	defer s.clockDone.Done()
	t := time.NewTicker(clockRefresh)
	defer t.Stop()
	suspend := time.NewTicker(sampleEvery)
	defer suspend.Stop()
	for {
		select {
		case <-s.closing.Done():
			return
		case <-suspend.C:
			s.sampleSuspend()
		case <-t.C:
			if err := s.measureClock(s.closing); err != nil && s.closing.Err() == nil {
				s.logger().Warn("postgres store: clock offset not refreshed", "error", err)
			}
		}
	}
}
