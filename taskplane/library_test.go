package taskplane_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// What a program embedding the task plane may naturally pass — a nil logger, no interval, no
// executor, the same Dispatcher run twice — is taken or refused, never a panic or a race.
func TestTheLibraryTakesZeroValuesWithoutAPanic(t *testing.T) {
	st := storetest.OpenSQLite(t)
	p := taskplane.New(st, taskplane.WithLogger(nil), taskplane.WithRetention(0))

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// Both loops run their first pass at once (logging through the default logger), then wait
	// for their default interval until ctx ends.
	p.RunRetention(ctx, 0)
	p.RunTimeouts(ctx, time.Hour, 0)

	if err := (&taskplane.Dispatcher{Plane: p}).Run(ctx); err == nil {
		t.Error("a Dispatcher without an Executor ran")
	}
	if err := (&taskplane.Dispatcher{Executor: taskplane.ExecutorFunc(nil)}).Run(ctx); err == nil {
		t.Error("a Dispatcher without a Plane ran")
	}

	// Two Runs of one Dispatcher at once: one runs, the other is refused at once. The one that
	// runs works a task (logging through the default logger).
	acc := acceptHi(t, p)
	run, stop := context.WithCancel(context.Background())
	worked := make(chan struct{})
	d := &taskplane.Dispatcher{Plane: p, Poll: 10 * time.Millisecond,
		Executor: taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
			defer close(worked)
			return turn.Complete(ctx, &taskplane.Message{Parts: []taskplane.Part{taskplane.TextPart("done")}})
		})}
	runs := make(chan error, 2)
	for range 2 {
		go func() { runs <- d.Run(run) }()
	}
	select {
	case err := <-runs:
		if !errors.Is(err, taskplane.ErrDispatcherRunning) {
			t.Fatalf("a second Run of a running Dispatcher: %v, want ErrDispatcherRunning", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("two Runs of one Dispatcher both run")
	}
	select {
	case <-worked:
	case <-time.After(10 * time.Second):
		t.Fatalf("task %s was not worked", acc.Task.ID)
	}
	stop()
	if err := <-runs; err != nil {
		t.Fatalf("the Run that ran: %v", err)
	}
	// Once stopped, it may run again.
	again, stopAgain := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer stopAgain()
	if err := d.Run(again); err != nil {
		t.Fatalf("Run after the first ended: %v", err)
	}
}

// A follower (a client's stream, a blocking send's wait) of a task whose store closes under it —
// a program that closed its store before its HTTP server — ends with store.ErrClosed instead of
// waiting for ever for an event no one can commit: on SQLite nothing else would wake it.
func TestAFollowerEndsWhenItsStoreCloses(t *testing.T) {
	st := storetest.OpenSQLite(t)
	p := taskplane.New(st)
	acc := acceptHi(t, p)
	read := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() {
		done <- p.FollowStream(context.Background(), "me", acc.Task.ID, 0, func(taskplane.TaskEvent) error {
			read <- struct{}{}
			return nil
		})
	}()
	select {
	case <-read:
	case <-time.After(10 * time.Second):
		t.Fatal("the follower read nothing")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, store.ErrClosed) {
			t.Fatalf("the follower ended with %v, want store.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follower still waits on a closed store")
	}
}

// failingListen is a store that listens for other processes' events (as Postgres does) and
// whose first Listen fails.
type failingListen struct {
	store.Store
	calls atomic.Int32
}

func (f *failingListen) Capabilities() store.Capabilities {
	c := f.Store.Capabilities()
	c.Listen = true
	return c
}

func (f *failingListen) Listen(ctx context.Context, fn func(principal, taskID string), reconnected func()) error {
	if f.calls.Add(1) == 1 {
		return errors.New("connection refused")
	}
	<-ctx.Done()
	return ctx.Err()
}

// RunListener listens again after its listener fails, so that other processes' events keep
// reaching this one's followers without the embedding program restarting it, and stops when its
// context ends or its store closes.
func TestTheListenerListensAgainAfterAFailure(t *testing.T) {
	taskplane.ListenRestartAfter(t, 10*time.Millisecond)
	st := &failingListen{Store: storetest.OpenSQLite(t)}
	p := taskplane.New(st, taskplane.WithLogger(slog.New(slog.DiscardHandler)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.RunListener(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); st.calls.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Listen was called %d times: the failed listener was not restarted", st.calls.Load())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunListener after its context ended: %v", err)
	}
}

// With Drain, a turn running when the dispatcher stops goes on to finish (its context alive)
// while nothing more is claimed, and what it returns counts as at any other time (an error fails
// its task); one still running when Drain is over is interrupted and goes back to the queue.
func TestADrainingDispatcherLetsRunningTurnsFinish(t *testing.T) {
	for _, c := range []struct {
		name  string
		end   string // what the turn does once released: complete, fail, or nothing (outlasts the drain)
		drain time.Duration
		want  taskplane.State
	}{
		{"finishes within the drain", "complete", 10 * time.Second, taskplane.StateCompleted},
		{"fails within the drain", "fail", 10 * time.Second, taskplane.StateFailed},
		{"outlasts the drain", "", 300 * time.Millisecond, taskplane.StateWorking},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := taskplane.New(storetest.OpenSQLite(t), taskplane.WithLogger(slog.New(slog.DiscardHandler)))
			started, release := make(chan struct{}), make(chan struct{})
			var interrupted atomic.Bool
			d := &taskplane.Dispatcher{Plane: p, Poll: 10 * time.Millisecond, Drain: c.drain,
				Executor: taskplane.ExecutorFunc(func(ctx context.Context, turn *taskplane.Turn) error {
					close(started)
					select {
					case <-release:
						if c.end == "fail" {
							return errors.New("the agent broke")
						}
						return turn.Complete(ctx, &taskplane.Message{Parts: []taskplane.Part{taskplane.TextPart("done")}})
					case <-ctx.Done():
						interrupted.Store(true)
						return ctx.Err()
					}
				})}
			run, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- d.Run(run) }()
			acc := acceptHi(t, p)
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("the turn did not start")
			}
			stop()
			time.Sleep(100 * time.Millisecond) // well within the long drains
			if c.end != "" {
				if interrupted.Load() {
					t.Fatal("the turn was interrupted as soon as the dispatcher stopped")
				}
				close(release)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after the drain")
			}
			task, err := p.GetTask(context.Background(), "me", acc.Task.ID)
			if err != nil {
				t.Fatal(err)
			}
			if task.Status.State != c.want || interrupted.Load() != (c.end == "") {
				t.Fatalf("task %s, interrupted %v; want %s, interrupted %v", task.Status.State, interrupted.Load(), c.want, c.end == "")
			}
		})
	}
}

// A stream opened on a store already closed ends at once with store.ErrClosed, rather than
// retrying its read for the follow outage (30 s).
func TestAFollowerOfAClosedStoreEndsAtOnce(t *testing.T) {
	st := storetest.OpenSQLite(t)
	p := taskplane.New(st)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	err := p.FollowStream(context.Background(), "me", "t1", 0, func(taskplane.TaskEvent) error { return nil })
	if !errors.Is(err, store.ErrClosed) || time.Since(began) > 5*time.Second {
		t.Fatalf("FollowStream on a closed store: %v after %s, want store.ErrClosed at once", err, time.Since(began))
	}
}

// WithRetention(0) keeps the default window: a finished task an hour old is not pruned.
func TestAZeroRetentionKeepsTheDefaultWindow(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	p := taskplane.New(storetest.OpenSQLite(t), taskplane.WithClock(clock), taskplane.WithRetention(0))
	acc := acceptHi(t, p)
	if _, _, err := p.Cancel(context.Background(), "me", acc.Task.ID, nil); err != nil {
		t.Fatal(err)
	}
	// A claim retires the finished task's wake (retention keeps a task with a pending wake).
	if g, err := p.ClaimTurn(context.Background(), taskplane.ClaimRequest{Owner: "t", Lease: time.Minute}); err != nil || g != nil {
		t.Fatalf("claim: %v %v", g, err)
	}
	now = now.Add(time.Hour)
	if _, err := p.Prune(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.GetTask(context.Background(), "me", acc.Task.ID); err != nil {
		t.Fatalf("a task finished an hour ago, with WithRetention(0): %v", err)
	}
}

// acceptHi accepts the message "hi" (messageId m1) of principal "me" as new work.
func acceptHi(t *testing.T, p *taskplane.Plane) taskplane.Acceptance {
	t.Helper()
	acc, err := p.Accept(context.Background(), taskplane.Event{Principal: "me", Source: taskplane.SourceA2A, Identity: "m1",
		Message: taskplane.Message{ID: "m1", Role: taskplane.RoleUser, Parts: []taskplane.Part{taskplane.TextPart("hi")}}})
	if err != nil {
		t.Fatal(err)
	}
	return acc
}
