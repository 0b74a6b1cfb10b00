package conformance_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/executor/conformance"
	"github.com/channels-dev/channels/taskplane/executor/executortest"
)

// id makes a kit-style message id: tck-<name>-<8 hex>[-<transport>].
func id(prefix string) string { return prefix + "-0123abcd-jsonrpc" }

func text(s string) taskplane.Part { return taskplane.TextPart(s) }

var (
	rawFile = taskplane.Part{Raw: []byte("tck"), Filename: "output.txt", MediaType: "text/plain"}
	urlFile = taskplane.Part{URL: "https://example.com/output.txt", Filename: "output.txt", MediaType: "text/plain"}
)

func TestConformancePrefixes(t *testing.T) {
	const (
		working   = "status:working"
		completed = "status:completed"
		artifact  = "artifact"
	)
	tests := []struct {
		prefix    string
		steps     []string           // events after the task event, in order (the turn begins WORKING)
		artifacts [][]taskplane.Part // parts of each artifact event, in order
		status    string             // text of the final status message ("" = none)
		final     taskplane.State
	}{
		{prefix: "tck-complete-task", steps: []string{working, completed}, status: "Hello from TCK", final: taskplane.StateCompleted},
		{prefix: "tck-artifact-text", steps: []string{working, artifact, completed},
			artifacts: [][]taskplane.Part{{text("Generated text content")}}, final: taskplane.StateCompleted},
		{prefix: "tck-artifact-file-url", steps: []string{working, artifact, completed},
			artifacts: [][]taskplane.Part{{urlFile}}, final: taskplane.StateCompleted},
		{prefix: "tck-artifact-file", steps: []string{working, artifact, completed},
			artifacts: [][]taskplane.Part{{rawFile}}, final: taskplane.StateCompleted},
		{prefix: "tck-artifact-data", steps: []string{working, artifact, completed},
			artifacts: [][]taskplane.Part{{{Data: json.RawMessage(`{"key":"value","count":42}`)}}}, final: taskplane.StateCompleted},
		{prefix: "tck-input-required", steps: []string{working, "status:input-required"}, final: taskplane.StateInputRequired},
		{prefix: "tck-auth-required", steps: []string{working, "status:auth-required"}, final: taskplane.StateAuthRequired},
		{prefix: "tck-reject-task", steps: []string{working, "status:failed"}, status: "rejected", final: taskplane.StateFailed},
		{prefix: "tck-stream-001", steps: []string{working, artifact, completed},
			artifacts: [][]taskplane.Part{{text("Stream hello from TCK")}}, final: taskplane.StateCompleted},
		{prefix: "tck-stream-002", steps: []string{working, completed}, final: taskplane.StateCompleted},
		{prefix: "tck-stream-003", steps: []string{working, artifact, completed},
			artifacts: [][]taskplane.Part{{text("Stream task lifecycle")}}, final: taskplane.StateCompleted},
		{prefix: "tck-stream-ordering-001", steps: []string{working, artifact, completed},
			artifacts: [][]taskplane.Part{{text("Ordered output")}}, final: taskplane.StateCompleted},
		{prefix: "tck-stream-artifact-text", steps: []string{working, artifact, completed},
			artifacts: [][]taskplane.Part{{text("Streamed text content")}}, final: taskplane.StateCompleted},
		{prefix: "tck-stream-artifact-file", steps: []string{working, artifact, completed},
			artifacts: [][]taskplane.Part{{rawFile}}, final: taskplane.StateCompleted},
		{prefix: "tck-stream-artifact-chunked", steps: []string{working, artifact, artifact, completed},
			artifacts: [][]taskplane.Part{{text("chunk-1 ")}, {text("chunk-2")}}, final: taskplane.StateCompleted},
		{prefix: "test-resubscribe-message-id", steps: []string{working, completed}, final: taskplane.StateCompleted},
		{prefix: "tck-delayed-complete", steps: []string{working, completed}, status: conformance.TextDelayed, final: taskplane.StateCompleted},
		{prefix: "tck-send-001", steps: []string{working, completed},
			status: "Unhandled messageId prefix: " + id("tck-send-001"), final: taskplane.StateCompleted},
		// Reached only when the binding did not take the direct answer (a source's event).
		{prefix: "tck-message-response", steps: []string{working, completed}, status: "Direct message response", final: taskplane.StateCompleted},
	}
	h := executortest.New(t, &conformance.Executor{Hold: 200 * time.Millisecond, Delay: 100 * time.Millisecond})
	for _, tc := range tests {
		t.Run(tc.prefix, func(t *testing.T) {
			acc := h.Send(t, executortest.UserEvent(id(tc.prefix), "hi"))
			if acc.Outcome != taskplane.Created || acc.Task == nil {
				t.Fatalf("acceptance %+v", acc)
			}
			evs := h.Settle(t, acc.Task.ID, 0)
			if evs[0].Kind != taskplane.EventTask || evs[0].Task.Status.State != taskplane.StateSubmitted {
				t.Fatalf("first event %s, want the SUBMITTED task", executortest.Step(evs[0]))
			}
			if diff := cmp.Diff(tc.steps, executortest.Steps(evs[1:])); diff != "" {
				t.Fatalf("events (-want +got):\n%s", diff)
			}
			var arts [][]taskplane.Part
			var artifactIDs []string
			for _, ev := range evs {
				if ev.Kind == taskplane.EventArtifact {
					arts = append(arts, ev.Artifact.Artifact.Parts)
					artifactIDs = append(artifactIDs, ev.Artifact.Artifact.ID)
				}
			}
			if diff := cmp.Diff(tc.artifacts, arts); diff != "" {
				t.Fatalf("artifacts (-want +got):\n%s", diff)
			}
			last := evs[len(evs)-1].Status.Status
			got := ""
			if last.Message != nil {
				if last.Message.Role != taskplane.RoleAgent || len(last.Message.Parts) != 1 {
					t.Fatalf("status message %+v", last.Message)
				}
				got = last.Message.Parts[0].Text
			}
			if got != tc.status {
				t.Fatalf("status message %q, want %q", got, tc.status)
			}
			task := h.Task(t, acc.Task.ID)
			if task.Status.State != tc.final {
				t.Fatalf("stored state %s, want %s", task.Status.State, tc.final)
			}
			if tc.prefix == "tck-stream-artifact-chunked" {
				if artifactIDs[0] != artifactIDs[1] || len(task.Artifacts) != 1 || len(task.Artifacts[0].Parts) != 2 {
					t.Fatalf("chunks not appended to one artifact: ids %v, artifacts %+v", artifactIDs, task.Artifacts)
				}
				c1, c2 := evs[2].Artifact, evs[3].Artifact
				if !c1.Append || c1.LastChunk || !c2.Append || !c2.LastChunk {
					t.Fatalf("chunk flags: first %+v, second %+v", c1, c2)
				}
			}
		})
	}
}

func TestConformanceMessageResponseIsADirectMessage(t *testing.T) {
	h := executortest.New(t, conformance.New())
	e := conformance.New()
	ev := executortest.UserEvent(id("tck-message-response"), "hi")
	reply, ok := e.RespondDirectly(context.Background(), executortest.Principal, ev.Message)
	if !ok || reply.Role != taskplane.RoleAgent || reply.Parts[0].Text != "Direct message response" || reply.ID == "" {
		t.Fatalf("direct reply %+v, %v", reply, ok)
	}
	ev.Reply = reply
	acc := h.Send(t, ev)
	if acc.Task != nil || acc.Message == nil || acc.Message.Parts[0].Text != "Direct message response" {
		t.Fatalf("acceptance %+v", acc)
	}

	for _, m := range []taskplane.Message{
		{ID: id("tck-complete-task"), Role: taskplane.RoleUser},
		{ID: id("tck-message-response"), Role: taskplane.RoleUser, TaskID: "t-1"}, // to an existing task
	} {
		if r, ok := e.RespondDirectly(context.Background(), executortest.Principal, m); ok {
			t.Errorf("message %+v answered directly: %+v", m, r)
		}
	}
}

func TestConformanceFollowUpIsUnhandledWithTheLatestMessageID(t *testing.T) {
	h := executortest.New(t, conformance.New())
	acc := h.Send(t, executortest.UserEvent(id("tck-input-required"), "start"))
	evs := h.Settle(t, acc.Task.ID, 0)
	if s := executortest.Step(evs[len(evs)-1]); s != "status:input-required" {
		t.Fatalf("first turn ended with %s", s)
	}
	// The follow-up's own id carries a known prefix: a follow-up is still answered as unhandled.
	follow := executortest.UserEvent(id("tck-complete-task-followup"), "more")
	follow.TaskID = acc.Task.ID
	acc2 := h.Send(t, follow)
	if acc2.Outcome != taskplane.Continued || acc2.Task.ID != acc.Task.ID {
		t.Fatalf("follow-up acceptance %+v", acc2)
	}
	evs = h.Settle(t, acc.Task.ID, evs[len(evs)-1].Seq)
	last := evs[len(evs)-1].Status.Status
	want := "Unhandled messageId prefix: " + follow.Message.ID
	if last.State != taskplane.StateCompleted || last.Message == nil || last.Message.Parts[0].Text != want {
		t.Fatalf("follow-up settled as %+v, want COMPLETED %q", last, want)
	}
}

func TestConformanceCancelStopsTheResubscribeHold(t *testing.T) {
	h := executortest.New(t, &conformance.Executor{Hold: time.Minute})
	acc := h.Send(t, executortest.UserEvent(id("test-resubscribe-message-id"), "hold"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Wait for WORKING, then cancel as a binding would: plane first, then the running turn.
	err := h.Plane.Follow(ctx, executortest.Principal, acc.Task.ID, 0, func(ev taskplane.TaskEvent) error {
		if ev.Kind == taskplane.EventStatus && ev.Status.Status.State == taskplane.StateWorking {
			return taskplane.ErrStopFollowing
		}
		return nil
	})
	if err != nil {
		t.Fatalf("wait for WORKING: %v", err)
	}
	if _, _, err := h.Plane.Cancel(ctx, executortest.Principal, acc.Task.ID, nil); err != nil {
		t.Fatal(err)
	}
	h.Dispatcher.CancelTurn(acc.Task.ID)
	// Give the turn time to return; the task must stay CANCELED (nothing completes or fails it).
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if st := h.Task(t, acc.Task.ID).Status.State; st != taskplane.StateCanceled {
			t.Fatalf("state after cancel %s", st)
		}
	}
}

func TestConformancePrefixesMostSpecificFirst(t *testing.T) {
	ps := conformance.Prefixes()
	for i, p := range ps {
		for _, later := range ps[i+1:] {
			if strings.HasPrefix(later, p) {
				t.Errorf("%s comes before the more specific %s", p, later)
			}
		}
	}
	if len(ps) != 18 {
		t.Errorf("%d prefixes, want the contract's 16, tck-auth-required and tck-delayed-complete", len(ps))
	}
}

func TestShutdownLeavesAnInterruptedTurnToRunAgain(t *testing.T) {
	h := executortest.New(t, &conformance.Executor{Hold: time.Minute})
	acc := h.Send(t, executortest.UserEvent(id("test-resubscribe-message-id"), "hold"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := h.Plane.Follow(ctx, executortest.Principal, acc.Task.ID, 0, func(ev taskplane.TaskEvent) error {
		if ev.Kind == taskplane.EventStatus && ev.Status.Status.State == taskplane.StateWorking {
			return taskplane.ErrStopFollowing
		}
		return nil
	})
	if err != nil {
		t.Fatalf("wait for WORKING: %v", err)
	}
	h.StopDispatcher() // a shutdown in the middle of the turn
	if st := h.Task(t, acc.Task.ID).Status.State; st != taskplane.StateWorking {
		t.Fatalf("after shutdown the task is %s, want it still WORKING", st)
	}
	h.StartDispatcher(t, &conformance.Executor{Hold: 50 * time.Millisecond}) // the restart
	evs := h.Settle(t, acc.Task.ID, 0)
	if last := evs[len(evs)-1].Status.Status.State; last != taskplane.StateCompleted {
		t.Fatalf("after restart the task settled as %s", last)
	}
}
