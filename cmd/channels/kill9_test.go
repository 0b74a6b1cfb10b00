package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// The kill -9 test re-executes this test binary as a child that accepts events in a loop. These
// variables carry its instructions; TestMain turns the binary into the child when they are set.
const (
	kill9StoreEnv   = "CHANNELS_KILL9_STORE"   // store URL
	kill9StartEnv   = "CHANNELS_KILL9_START"   // first event index of the loop
	kill9ResendEnv  = "CHANNELS_KILL9_RESEND"  // comma-separated indices to re-send first
	kill9WorkersEnv = "CHANNELS_KILL9_WORKERS" // goroutines accepting at once
)

const (
	kill9Principal = "kill9"
	kill9Source    = "kill9"
	kill9Rounds    = 24
)

func TestMain(m *testing.M) {
	if os.Getenv(kill9StoreEnv) != "" {
		os.Exit(kill9Child())
	}
	if args, ok := os.LookupEnv(mainArgsEnv); ok {
		// The test binary as the channels binary: main with these arguments (one per line).
		os.Args = append([]string{"channels"}, strings.Split(args, "\n")...)
		main()
	}
	os.Exit(m.Run())
}

// kill9Event is event i: the same identity always carries the same payload, so a re-send is a
// duplicate, never a conflict.
func kill9Event(i int) taskplane.Event {
	id := fmt.Sprintf("ev-%07d", i)
	return taskplane.Event{
		Principal:       kill9Principal,
		Source:          kill9Source,
		Identity:        id,
		ConversationKey: fmt.Sprintf("conversation-%d", i%7),
		Message: taskplane.Message{ID: "m-" + id, Role: taskplane.RoleUser,
			Parts: []taskplane.Part{taskplane.TextPart(fmt.Sprintf("event %d: please look at this", i))}},
	}
}

// kill9Child accepts events until it is killed. It prints "ok <identity> <taskID> <outcome>" for
// each, only after Accept returned nil. It first re-sends the indices in kill9ResendEnv, then
// accepts from kill9StartEnv on, with kill9WorkersEnv goroutines.
func kill9Child() int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "kill9 child: "+format+"\n", args...)
		return 3
	}
	start, err := strconv.Atoi(os.Getenv(kill9StartEnv))
	if err != nil {
		return fail("start: %v", err)
	}
	workers, err := strconv.Atoi(os.Getenv(kill9WorkersEnv))
	if err != nil || workers < 1 {
		return fail("workers: %v", err)
	}
	// A child whose parent vanished must not run for ever.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, os.Getenv(kill9StoreEnv))
	if err != nil {
		return fail("open store: %v", err)
	}
	plane := taskplane.New(st)
	var outMu sync.Mutex
	report := func(ev taskplane.Event, acc taskplane.Acceptance) {
		line := fmt.Sprintf("ok %s %s %s\n", ev.Identity, acc.Task.ID, acc.Outcome)
		outMu.Lock()
		_, _ = os.Stdout.WriteString(line) // one write: a kill never leaves half a line before a whole one
		outMu.Unlock()
	}
	if s := os.Getenv(kill9ResendEnv); s != "" {
		for _, f := range strings.Split(s, ",") {
			i, err := strconv.Atoi(f)
			if err != nil {
				return fail("resend: %v", err)
			}
			ev := kill9Event(i)
			acc, err := plane.Accept(ctx, ev)
			if err != nil {
				return fail("re-send %s: %v", ev.Identity, err)
			}
			report(ev, acc)
		}
	}
	var next atomic.Int64
	next.Store(int64(start))
	errs := make(chan error, workers)
	for range workers {
		go func() {
			for ctx.Err() == nil {
				ev := kill9Event(int(next.Add(1) - 1))
				acc, err := plane.Accept(ctx, ev)
				if err != nil {
					errs <- fmt.Errorf("accept %s: %w", ev.Identity, err)
					return
				}
				report(ev, acc)
			}
			errs <- ctx.Err()
		}()
	}
	return fail("%v", <-errs)
}

// kill9Report is one line of a child's output.
type kill9Report struct {
	index   int
	taskID  string
	outcome taskplane.Outcome
}

// TestKill9AcceptedEventsSurviveExactlyOnce kills a process that accepts events at random moments,
// at least 20 times, and after each kill opens the store afresh and checks that every event the
// process reported accepted exists exactly once (one claim, one task), that every task has a
// complete event log, and that no task exists without its claim. Restarts resume just before the
// last reported event and re-send a few reported ones, which must come back as duplicates of the
// same task.
func TestKill9AcceptedEventsSurviveExactlyOnce(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		runKill9(t, "sqlite://"+filepath.ToSlash(filepath.Join(t.TempDir(), "channels.db")))
	})
	t.Run("postgres", func(t *testing.T) {
		runKill9(t, storetest.PostgresURL(t))
	})
}

func runKill9(t *testing.T, storeURL string) {
	const workers = 4
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	reported := map[int]string{}  // event index → task id
	verified := map[string]bool{} // task ids whose log was checked
	maxIndex, kills, duplicates := -1, 0, 0
	deadline := time.Now().Add(6 * time.Minute) // up to 3 × kill9Rounds rounds on a slow machine
	// kill9Rounds at least, and more (up to three times as many) until 100 events were reported
	// accepted: a slow machine accepts fewer in a round.
	for round := 0; ; round++ {
		if time.Now().After(deadline) {
			t.Fatalf("only %d rounds in the time bound", round)
		}
		start := max(0, maxIndex-workers-2) // re-covers reported and maybe-accepted events
		var resend []string
		if len(reported) > 0 {
			for range 3 {
				resend = append(resend, strconv.Itoa(rng.IntN(maxIndex+1)))
			}
		}
		alive := time.Duration(20+rng.IntN(400)) * time.Millisecond
		if round >= kill9Rounds {
			// Short of events after the first rounds: a slow machine spends most of a short
			// life opening the store. Later children live longer (still killed at random).
			alive = time.Duration(300+rng.IntN(1200)) * time.Millisecond
		}
		lines := runKill9Child(t, storeURL, start, resend, workers, alive)
		kills++
		for _, r := range lines {
			if prev, ok := reported[r.index]; ok {
				if r.outcome != taskplane.Duplicate || r.taskID != prev {
					t.Fatalf("round %d: event %d was reported as task %s, re-sent it gave %s %s",
						round, r.index, prev, r.outcome, r.taskID)
				}
				duplicates++
				continue
			}
			reported[r.index] = r.taskID
			maxIndex = max(maxIndex, r.index)
		}
		last := round >= kill9Rounds-1 && len(reported) >= 100 || round >= 3*kill9Rounds-1
		verifyKill9Store(t, storeURL, reported, verified, last)
		if last {
			break
		}
	}
	if kills < 20 || len(reported) < 100 || duplicates == 0 {
		t.Fatalf("weak run: %d kills, %d events reported, %d duplicates", kills, len(reported), duplicates)
	}
	t.Logf("%d kills, %d events reported accepted, %d re-sends deduplicated", kills, len(reported), duplicates)
}

// runKill9Child starts a child, lets it run for d, kills it with SIGKILL, and returns the complete
// lines it printed.
func runKill9Child(t *testing.T, storeURL string, start int, resend []string, workers int, d time.Duration) []kill9Report {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		kill9StoreEnv+"="+storeURL,
		kill9StartEnv+"="+strconv.Itoa(start),
		kill9ResendEnv+"="+strings.Join(resend, ","),
		kill9WorkersEnv+"="+strconv.Itoa(workers),
	)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	var (
		lines []kill9Report
		bad   []string
		read  = make(chan struct{})
	)
	go func() {
		defer close(read)
		br := bufio.NewReader(out)
		for {
			// A line the kill cut short has no newline: it is not a report, and ReadString
			// returns it with an error, so it is dropped.
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			f := strings.Fields(line)
			var idx int
			if len(f) != 4 || f[0] != "ok" {
				bad = append(bad, line)
				continue
			}
			if _, err := fmt.Sscanf(f[1], "ev-%d", &idx); err != nil {
				bad = append(bad, line)
				continue
			}
			lines = append(lines, kill9Report{index: idx, taskID: f[2], outcome: taskplane.Outcome(f[3])})
		}
	}()
	time.Sleep(d)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-read
	werr := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL (%v); stderr:\n%s", werr, stderr.String())
	}
	if len(bad) > 0 {
		t.Fatalf("child printed unparsable lines %q", bad)
	}
	return lines
}

// verifyKill9Store opens the store as a fresh process would and checks the invariants. Tasks whose
// log was checked in an earlier round are not read again unless full is set.
func verifyKill9Store(t *testing.T, storeURL string, reported map[int]string, verified map[string]bool, full bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, storeURL)
	if err != nil {
		t.Fatalf("reopen store after kill: %v", err)
	}
	defer st.Close()
	plane := taskplane.New(st)

	// The accepted evidence, counted per task (read in one go: evidence has no index by task).
	// It is read again when a task is missing from it: on Postgres a killed client's last COMMIT
	// can still land after the kill, between this read and the task's.
	countAccepted := func() map[string]int {
		evs, err := st.ListEvidence(ctx, store.EvidenceFilter{Principal: kill9Principal, Kind: taskplane.EvidenceAccepted})
		if err != nil {
			t.Fatalf("list evidence: %v", err)
		}
		n := map[string]int{}
		for _, e := range evs {
			n[e.TaskID]++
		}
		return n
	}
	accepted := countAccepted()

	// Every task: its claim names it, its log starts with the task and has LastSeq gap-free events.
	perIdentity := map[string]int{}
	tasks := map[string]bool{}
	var tok string
	for {
		page, err := plane.ListTasks(ctx, kill9Principal, taskplane.ListQuery{PageSize: taskplane.MaxPageSize, PageToken: tok})
		if err != nil {
			t.Fatalf("list tasks: %v", err)
		}
		for _, task := range page.Tasks {
			perIdentity[task.Origin.Identity]++
			tasks[task.ID] = true
			if verified[task.ID] && !full {
				continue
			}
			c, err := st.GetClaim(ctx, kill9Principal, kill9Source, task.Origin.Identity)
			if err != nil {
				t.Fatalf("task %s (event %s) has no claim: %v", task.ID, task.Origin.Identity, err)
			}
			if c.State != store.ClaimDone || c.TaskID != task.ID {
				t.Fatalf("claim of %s: state %s task %s, want done and task %s", task.Origin.Identity, c.State, c.TaskID, task.ID)
			}
			evs, err := st.TaskEvents(ctx, kill9Principal, task.ID, 0, 0)
			if err != nil {
				t.Fatalf("events of task %s: %v", task.ID, err)
			}
			if int64(len(evs)) != task.LastSeq || len(evs) == 0 || evs[0].Kind != taskplane.EventTask {
				t.Fatalf("task %s: %d events, LastSeq %d, first kind %q: log incomplete", task.ID, len(evs), task.LastSeq, firstKind(evs))
			}
			for i, ev := range evs {
				if ev.Seq != int64(i+1) {
					t.Fatalf("task %s: event %d has seq %d", task.ID, i, ev.Seq)
				}
			}
			// The wake and the evidence are part of the same acceptance: exactly one of each.
			ws, err := st.ListTaskWakes(ctx, kill9Principal, task.ID)
			if err != nil || len(ws) != 1 {
				t.Fatalf("task %s has %d wakes (%v), want 1", task.ID, len(ws), err)
			}
			if accepted[task.ID] == 0 {
				accepted = countAccepted()
			}
			if n := accepted[task.ID]; n != 1 {
				t.Fatalf("task %s has %d accepted evidence records, want 1", task.ID, n)
			}
			verified[task.ID] = true
		}
		if page.NextPageToken == "" {
			break
		}
		tok = page.NextPageToken
	}
	for id, n := range perIdentity {
		if n != 1 {
			t.Fatalf("event %s has %d tasks", id, n)
		}
	}
	// No partial acceptance of an event that was accepted but never reported (killed between the
	// commit and the report, or mid-transaction): every claim of an event that may have been sent
	// names a task that exists, and so does every accepted evidence record. (A claim left without
	// its task would be taken for a pruned one at the next send, and quietly repaired.)
	maxIdx := 0
	for idx := range reported {
		maxIdx = max(maxIdx, idx)
	}
	// A task missing from the listing is read on its own: on Postgres the killed child's last
	// COMMIT can land after the listing and before the claim's read (the claim and its task commit
	// together, so a claim seen means its task is there to read).
	exists := func(taskID string) bool {
		if tasks[taskID] {
			return true
		}
		_, err := st.GetTask(ctx, kill9Principal, taskID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get task %s: %v", taskID, err)
		}
		return err == nil
	}
	lo := 0 // the last round checks every event; the others, those in flight when it was killed
	if !full {
		lo = max(0, maxIdx-256)
	}
	for idx := lo; idx <= maxIdx+64; idx++ {
		id := kill9Event(idx).Identity
		c, err := st.GetClaim(ctx, kill9Principal, kill9Source, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("claim of %s: %v", id, err)
		}
		if c.State != store.ClaimDone || !exists(c.TaskID) {
			t.Fatalf("event %s has a claim (state %s) naming task %q, which does not exist: a partial acceptance", id, c.State, c.TaskID)
		}
	}
	for taskID := range countAccepted() {
		if !exists(taskID) {
			t.Fatalf("accepted evidence names task %s, which does not exist: a partial acceptance", taskID)
		}
	}
	// Every reported event: its claim and its task exist, and they are the reported ones.
	for idx, taskID := range reported {
		id := kill9Event(idx).Identity
		c, err := st.GetClaim(ctx, kill9Principal, kill9Source, id)
		if err != nil {
			t.Fatalf("reported event %s has no claim: %v", id, err)
		}
		if c.State != store.ClaimDone || c.TaskID != taskID {
			t.Fatalf("reported event %s: claim state %s task %s, reported task %s", id, c.State, c.TaskID, taskID)
		}
		if perIdentity[id] != 1 || !verified[taskID] {
			t.Fatalf("reported event %s: task %s missing from the store", id, taskID)
		}
	}
}

func firstKind(evs []store.TaskEvent) string {
	if len(evs) == 0 {
		return ""
	}
	return evs[0].Kind
}
