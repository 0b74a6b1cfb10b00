// Package a2aagent is the `a2a` executor: it works each task by delegating it to a remote A2A
// agent, with Channels as the A2A client (the official a2aclient of a2a-go v2.4.0).
//
// On the first turn it resolves the agent's card (/.well-known/agent-card.json under the agent
// URL) and connects over what the card offers, JSON-RPC or HTTP+JSON, streaming when the card
// declares it. Each turn sends the task's new user messages: the first creates a downstream task,
// later ones (a continuation of ours) are follow-ups on that downstream task. Everything the agent
// streams back maps onto our task: WORKING with its progress messages, artifacts (appended chunks
// included), INPUT_REQUIRED / AUTH_REQUIRED with its question (so the person's answer comes back
// as our continuation), and the terminal states with its message; a downstream FAILED carries the
// agent's reason. A cancel of our task cancels the downstream one.
//
// The downstream task's id is kept in our task's metadata under MetaRemote, so a turn re-offered
// after a crash picks the downstream task up again instead of starting a second one.
//
// Every downstream URL (the agent URL, the interfaces of its card, redirects, and the address each
// name resolves to) passes an SSRF check: https and public addresses only, unless the operator
// allows private agents. The bearer token is sent only to the agent URL's host and its card's
// interface hosts. A failure to reach the agent is a transport failure (the dispatcher retries it
// with backoff); an error the agent answers with fails the task with that reason.
package a2aagent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/channels-dev/channels/internal/redact"
	"github.com/channels-dev/channels/taskplane"
)

// MetaRemote is the metadata key of our task's link to the downstream task ({"agentUrl", "taskId",
// "contextId", "sent"}), and of the same link on every message copied from the agent. Only the
// executor writes it: the task plane refuses an event that carries it.
const MetaRemote = taskplane.MetaRemoteAgent

// Defaults.
const (
	// DefaultPollInterval is how often a turn polls the downstream task when the agent does not
	// stream, or its stream ended before the task settled.
	DefaultPollInterval = time.Second
)

// Config configures the executor.
type Config struct {
	// AgentURL is the agent's base URL; its card is read from AgentURL/.well-known/agent-card.json.
	AgentURL string
	// Token, if set, is sent as "Authorization: Bearer <Token>" to the agent's hosts.
	Token string
	// AllowPrivate allows http and private, loopback and link-local addresses (an agent on your
	// own network). Without it every downstream URL must be https on a public address.
	AllowPrivate bool
	// PollInterval: see DefaultPollInterval.
	PollInterval time.Duration
	Logger       *slog.Logger
}

// Executor is the remote A2A agent executor. It is safe for concurrent turns.
type Executor struct {
	cfg  Config
	host string          // the agent URL's host, which the token is always sent to
	tr   *http.Transport // every client's connections
	hc   *http.Client    // reads the card
	// name is the agent URL's origin, what errors, logs and metadata name the agent by: the
	// URL's path and query may hold a key.
	name string

	mu     sync.Mutex
	client *a2aclient.Client
	card   *a2a.AgentCard
}

// New returns the executor after checking the agent URL.
func New(cfg Config) (*Executor, error) {
	u, err := checkURL(cfg.AgentURL, cfg.AllowPrivate)
	if err != nil {
		return nil, fmt.Errorf("a2a executor: %w", err)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// The card is read with the token for the agent URL's host alone.
	auth := &bearer{token: cfg.Token, hosts: hostSet([]string{u.Host})}
	tr := newTransport(cfg.AllowPrivate)
	return &Executor{cfg: cfg, host: u.Host, tr: tr, hc: newHTTPClient(tr, cfg.AllowPrivate, auth), name: redact.Origin(cfg.AgentURL)}, nil
}

// connect returns the client, resolving the card on first use (and again after a failure). The
// card is fetched outside the lock, on the caller's context: a fetch that hangs holds up no other
// turn and no cancel, each of which gives up on its own context (two first uses may both fetch;
// the first to finish is kept).
func (e *Executor) connect(ctx context.Context) (*a2aclient.Client, *a2a.AgentCard, error) {
	e.mu.Lock()
	client, card := e.client, e.card
	e.mu.Unlock()
	if client != nil {
		return client, card, nil
	}
	card, err := agentcard.NewResolver(e.hc).Resolve(ctx, e.cfg.AgentURL)
	if err != nil {
		return nil, nil, transportOr(fmt.Errorf("resolve the agent card of %s: %w", e.name, redact.Error(err)))
	}
	// The client of this card sends the token to the card's hosts: a client of an earlier card,
	// still in use by a turn that started with it, keeps its own.
	auth, err := e.bearerFor(card)
	if err != nil {
		return nil, nil, err
	}
	hc := newHTTPClient(e.tr, e.cfg.AllowPrivate, auth)
	client, err = a2aclient.NewFromCard(ctx, card, a2aclient.WithDefaultsDisabled(),
		a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc))
	if err != nil {
		return nil, nil, transportOr(fmt.Errorf("connect to the agent %s: %w", e.name, redact.Error(err)))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.client == nil {
		e.client, e.card = client, card
	}
	return e.client, e.card, nil
}

// bearerFor returns the token's bearer for a client of card: the agent URL's host and the hosts
// of the card's interfaces, each checked as the agent URL is.
func (e *Executor) bearerFor(card *a2a.AgentCard) (*bearer, error) {
	hosts := []string{e.host}
	for _, iface := range card.SupportedInterfaces {
		if iface == nil {
			continue
		}
		u, err := checkURL(iface.URL, e.cfg.AllowPrivate)
		if err != nil {
			return nil, fmt.Errorf("agent card interface: %w", err)
		}
		hosts = append(hosts, u.Host)
	}
	return &bearer{token: e.cfg.Token, hosts: hostSet(hosts)}, nil
}

// reset drops the client after a transport failure, so the next turn reads the card again (the
// agent may have moved).
func (e *Executor) reset() {
	e.mu.Lock()
	e.client, e.card = nil, nil
	e.mu.Unlock()
}

// classify marks a transport failure (retried by the dispatcher, after the client is dropped);
// any other error fails the task.
func (e *Executor) classify(err error) error {
	if transient(err) {
		e.reset()
	}
	return transportOr(err)
}

// transportOr marks err as a transport failure when it is one.
func transportOr(err error) error {
	if transient(err) {
		return taskplane.Transport(err)
	}
	return err
}

// link is our task's record of its downstream task.
type link struct {
	TaskID    string
	ContextID string
	// Sent is the id of our last user message the agent has received.
	Sent string
}

func readLink(t *taskplane.Task) *link {
	m, ok := t.Metadata[MetaRemote].(map[string]any)
	if !ok {
		return nil
	}
	l := &link{}
	l.TaskID, _ = m["taskId"].(string)
	l.ContextID, _ = m["contextId"].(string)
	l.Sent, _ = m["sent"].(string)
	if l.TaskID == "" {
		return nil
	}
	return l
}

func (e *Executor) linkValue(l *link) map[string]any {
	return map[string]any{"agentUrl": e.name, "taskId": l.TaskID, "contextId": l.ContextID, "sent": l.Sent}
}

// pending returns our user messages the agent has not received yet: after link.Sent, or, with
// no downstream task, after the agent's last direct answer kept in history (see keep).
func pending(t *taskplane.Task, l *link) []taskplane.Message {
	start := 0
	if l != nil && l.Sent != "" {
		for i, m := range t.History {
			if m.ID == l.Sent {
				start = i + 1
			}
		}
	}
	if l == nil {
		for i, m := range t.History {
			if _, ok := m.Metadata[MetaRemote]; ok && m.Role == taskplane.RoleAgent {
				start = i + 1
			}
		}
	}
	var out []taskplane.Message
	for _, m := range t.History[start:] {
		if m.Role == taskplane.RoleUser {
			out = append(out, m)
		}
	}
	return out
}

// turnState is one turn's progress.
type turnState struct {
	e    *Executor
	turn *taskplane.Turn
	// link is the downstream task our task records: set only once the update recording it
	// committed.
	link *link
	// principal and taskID name our task; unlike turn.Task they never change, so they may be
	// read off the turn's goroutine.
	principal, taskID string
	sent              string // our message this turn sent, recorded with the link
	settled           bool
	// answering is the downstream task's INPUT_REQUIRED / AUTH_REQUIRED status this turn's send
	// answers: a snapshot still showing it (the agent has not taken the answer up yet) is not the
	// agent asking again.
	answering *a2a.TaskStatus
}

// Execute runs one turn: send what is new (or pick the downstream task up again), then map the
// agent's events onto our task until it settles.
func (e *Executor) Execute(ctx context.Context, turn *taskplane.Turn) error {
	client, card, err := e.connect(ctx)
	if err != nil {
		return err
	}
	st := &turnState{e: e, turn: turn, link: readLink(turn.Task), principal: turn.Task.Origin.Principal, taskID: turn.Task.ID}
	msgs := pending(turn.Task, st.link)
	if len(msgs) == 0 && st.link != nil {
		// Re-offered after a crash: the agent has everything; follow its task.
		return st.follow(ctx, client)
	}
	if len(msgs) == 0 {
		return fmt.Errorf("a2a executor: task %s has no user message to send", turn.Task.ID)
	}
	out := &a2a.Message{ID: downstreamMessageID(st.principal, st.taskID, msgs[len(msgs)-1].ID), Role: a2a.MessageRoleUser}
	for _, m := range msgs {
		for _, p := range m.Parts {
			out.Parts = append(out.Parts, toPart(p))
		}
	}
	st.sent = msgs[len(msgs)-1].ID
	resume := false // this send goes to the task our task records
	if st.link != nil {
		cont, err := st.continuable(ctx, client)
		if err != nil {
			return err
		}
		out.ContextID = st.link.ContextID
		if cont {
			out.TaskID = a2a.TaskID(st.link.TaskID)
			resume = true
		}
	}
	req := &a2a.SendMessageRequest{Message: out}
	if !card.Capabilities.Streaming {
		// Without a stream, a blocking send would hide the downstream task until it settles (and
		// a cancel could not reach it): take the task at once and poll it.
		req.Config = &a2a.SendMessageConfig{ReturnImmediately: true}
	}
	// When the turn ends before the agent has named the task this send made, that task must not
	// run on unwatched: the send outlives the turn a moment, for its first event to say which
	// task it is (settleUnrecorded). Our task finished (a cancel, a timeout): that task is
	// canceled. Our task goes on (a shutdown gives the turn back): it is recorded, so the resumed
	// turn follows it rather than sending again, and canceled if it cannot be.
	if err := ctx.Err(); err != nil {
		return err // the turn ended before the send (a cancel, a shutdown): nothing went out
	}
	sendCtx, stopSend := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSend()
	var named atomic.Bool // the downstream task of this send is recorded on ours
	named.Store(resume)
	stopWatch := context.AfterFunc(ctx, func() {
		switch {
		case named.Load():
			stopSend()
		case st.ended(ctx):
			time.AfterFunc(taskplane.CancelTimeout, stopSend)
		default:
			time.AfterFunc(resumeWait, stopSend)
		}
	})
	defer stopWatch()
	for ev, err := range client.SendStreamingMessage(sendCtx, req) {
		if ctx.Err() != nil {
			if err == nil {
				st.settleUnrecorded(ctx, ev)
			}
			return ctx.Err()
		}
		if err != nil {
			return st.fail(ctx, err)
		}
		if err := st.apply(ctx, ev); err != nil || st.settled {
			if ctx.Err() != nil || errors.Is(err, taskplane.ErrTaskTerminal) || errors.Is(err, taskplane.ErrNoTurn) ||
				errors.Is(err, taskplane.ErrStore) {
				// Our task could not record this one (the turn ended while the link was being
				// written, or the task finished, or the authority was lost, or the store failed
				// and the turn will be offered again: it must find the link, or no task left).
				st.settleUnrecorded(ctx, ev)
			}
			return err
		}
		named.Store(st.link != nil)
	}
	if st.link == nil {
		return fmt.Errorf("a2a executor: the agent answered without a task or a message")
	}
	return st.follow(ctx, client)
}

// continuable reports whether the linked downstream task takes follow-ups (it is not terminal);
// a terminal one gets a new downstream task in the same downstream context.
func (st *turnState) continuable(ctx context.Context, client *a2aclient.Client) (bool, error) {
	t, err := client.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(st.link.TaskID)})
	if errors.Is(err, a2a.ErrTaskNotFound) {
		return false, nil
	}
	if err != nil {
		return false, st.fail(ctx, err)
	}
	if t.Status.State == a2a.TaskStateInputRequired || t.Status.State == a2a.TaskStateAuthRequired {
		st.answering = &t.Status
	}
	return !t.Status.State.Terminal(), nil
}

// sameStatus reports whether a and b are one status of the agent's: the same state and message
// id, or, without messages, the same timestamp.
func sameStatus(a, b a2a.TaskStatus) bool {
	switch {
	case a.State != b.State:
		return false
	case a.Message != nil && b.Message != nil && a.Message.ID != "":
		return a.Message.ID == b.Message.ID
	case a.Message == nil && b.Message == nil && a.Timestamp != nil && b.Timestamp != nil:
		return a.Timestamp.Equal(*b.Timestamp)
	}
	return false
}

// follow polls the downstream task until it settles (or ctx ends).
func (st *turnState) follow(ctx context.Context, client *a2aclient.Client) error {
	tick := time.NewTicker(st.e.cfg.PollInterval)
	defer tick.Stop()
	for {
		t, err := client.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(st.link.TaskID)})
		if err != nil {
			return st.fail(ctx, err)
		}
		if err := st.apply(ctx, t); err != nil || st.settled {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// ended reports whether our task has finished (read on a context of its own: the turn's may
// have ended).
func (st *turnState) ended(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), taskplane.CancelTimeout)
	defer cancel()
	t, err := st.turn.Plane().GetTask(rctx, st.principal, st.taskID)
	return err == nil && t.Status.State.Terminal()
}

// resumeWait bounds how long a turn stopped by a shutdown (or a lost lease) waits for the event
// naming the downstream task its send made, to record it.
const resumeWait = 2 * time.Second

// settleUnrecorded takes care of the downstream task ev names when our task does not record it
// yet: nobody else knows of that task, so it would run on unwatched. If our task finished, the
// task is canceled. If it goes on, the task is recorded (the turn's authority lasts until it is
// given back), so the resumed turn follows it; if that fails (the authority is lost), it is
// canceled, and the next turn sends again.
func (st *turnState) settleUnrecorded(ctx context.Context, ev a2a.Event) {
	named, ok := ev.(interface{ TaskInfo() a2a.TaskInfo })
	if !ok || named.TaskInfo().TaskID == "" || (st.link != nil && string(named.TaskInfo().TaskID) == st.link.TaskID) {
		return
	}
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), taskplane.CancelTimeout)
	defer cancel()
	if !st.ended(ctx) && st.see(bg, named.TaskInfo()) == nil {
		return
	}
	_ = st.e.cancelRemote(bg, &link{TaskID: string(named.TaskInfo().TaskID)}) // logged there
}

// fail turns a client error into the turn's result.
func (st *turnState) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return st.e.classify(fmt.Errorf("agent %s: %w", st.e.name, redact.Error(err)))
}

// remote is the link recorded on each message copied from the agent.
func (st *turnState) remote() map[string]any {
	if st.link == nil {
		return map[string]any{"agentUrl": st.e.name}
	}
	return map[string]any{"agentUrl": st.e.name, "taskId": st.link.TaskID}
}

// see records the downstream task, and what it has received, when an event shows something new.
func (st *turnState) see(ctx context.Context, info a2a.TaskInfo) error {
	if info.TaskID == "" {
		return nil
	}
	sent := st.sent
	if sent == "" && st.link != nil {
		sent = st.link.Sent
	}
	want := link{TaskID: string(info.TaskID), ContextID: info.ContextID, Sent: sent}
	if st.link != nil && *st.link == want {
		return nil
	}
	if err := st.turn.Update(ctx, taskplane.SetMetadata{Key: MetaRemote, Value: st.e.linkValue(&want)}); err != nil {
		return err
	}
	st.link = &want
	return nil
}

// apply maps one downstream event onto our task.
func (st *turnState) apply(ctx context.Context, ev a2a.Event) error {
	switch ev := ev.(type) {
	case *a2a.Message:
		// A direct answer, no downstream task: it completes ours.
		st.settled = true
		msg := fromMessage(ev, st.remote())
		return st.keep(ctx, msg, st.turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted, Message: msg}))
	case *a2a.Task:
		if err := st.see(ctx, ev.TaskInfo()); err != nil {
			return err
		}
		for _, a := range ev.Artifacts {
			if a != nil && !st.hasArtifact(a) {
				if err := st.turn.Update(ctx, taskplane.AddArtifact{Artifact: fromArtifact(a)}); err != nil {
					return err
				}
			}
		}
		return st.status(ctx, ev.Status, true)
	case *a2a.TaskStatusUpdateEvent:
		if err := st.see(ctx, ev.TaskInfo()); err != nil {
			return err
		}
		return st.status(ctx, ev.Status, false)
	case *a2a.TaskArtifactUpdateEvent:
		if err := st.see(ctx, ev.TaskInfo()); err != nil {
			return err
		}
		if ev.Artifact == nil {
			return nil
		}
		return st.turn.Update(ctx, taskplane.AddArtifact{Artifact: fromArtifact(ev.Artifact), Append: ev.Append, LastChunk: ev.LastChunk})
	}
	return nil
}

// hasArtifact reports whether our task already holds a downstream artifact as it is now (a Task
// snapshot repeats what the stream already delivered). One with the same id but other content
// (the agent replaced or extended it) is not held: it replaces ours.
func (st *turnState) hasArtifact(a *a2a.Artifact) bool {
	theirs := fromArtifact(a)
	for _, ours := range st.turn.Task.Artifacts {
		if ours.ID == theirs.ID {
			return sameJSON(ours, theirs)
		}
	}
	return false
}

// sameJSON reports whether a and b encode alike, numbers compared by value (ours come back from
// the store as written, 1.10; the agent's as decoded, 1.1), so an artifact held as it is never
// reads as changed.
func sameJSON(a, b any) bool {
	ja, err1 := plainJSON(a)
	jb, err2 := plainJSON(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// plainJSON encodes v with every number as a float64 would print it.
func plainJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		return nil, err
	}
	return json.Marshal(x)
}

// downstreamMessageID is the messageId a send to the agent carries for our message msgID of
// task taskID: the same for every retry and re-offer of that send (so an agent that
// deduplicates by messageId takes it once), and Channels' own, never a caller's, so the messages
// of two principals that chose the same messageId never meet at the agent, which sees them all
// from one client.
func downstreamMessageID(principal, taskID, msgID string) string {
	sum := sha256.Sum256([]byte(principal + "\x00" + taskID + "\x00" + msgID))
	return "ch-" + hex.EncodeToString(sum[:16])
}

// status maps a downstream status onto ours. A snapshot's status that repeats the current one is
// not applied twice.
func (st *turnState) status(ctx context.Context, s a2a.TaskStatus, snapshot bool) error {
	cur := st.turn.Task.Status
	msg := fromMessage(s.Message, st.remote())
	switch s.State {
	case a2a.TaskStateSubmitted, a2a.TaskStateWorking:
		if msg == nil || (snapshot && cur.Message != nil && cur.Message.ID == msg.ID) {
			return nil
		}
		return st.turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateWorking, Message: msg})
	case a2a.TaskStateInputRequired, a2a.TaskStateAuthRequired:
		if snapshot && st.answering != nil && sameStatus(s, *st.answering) {
			return nil // the question this turn answered, not taken up yet: keep following
		}
		st.settled = true
		err := st.turn.RequireInput(ctx, question(s.Message, s.State == a2a.TaskStateAuthRequired))
		if errors.Is(err, taskplane.ErrContinuationNotAllowed) {
			// Our source cannot carry the answer back: stop the downstream task and say why.
			st.e.cancelRemote(ctx, st.link)
			return st.turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateFailed, Message: &taskplane.Message{
				Role: taskplane.RoleAgent, ID: "remote-question-" + st.turn.Task.ID,
				Parts:    []taskplane.Part{taskplane.TextPart("the agent asked a question, but this conversation cannot carry an answer back")},
				Metadata: map[string]any{taskplane.MetaReason: "question-not-deliverable"}}})
		}
		return st.keep(ctx, msg, err)
	case a2a.TaskStateCompleted:
		st.settled = true
		return st.keep(ctx, msg, st.turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCompleted, Message: msg}))
	case a2a.TaskStateFailed:
		st.settled = true
		if msg == nil {
			msg = &taskplane.Message{ID: "remote-failed-" + st.turn.Task.ID, Role: taskplane.RoleAgent,
				Parts: []taskplane.Part{taskplane.TextPart("the agent failed the task")}}
		}
		msg.Metadata = withReason(msg.Metadata, "agent-failed")
		return st.turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateFailed, Message: msg})
	case a2a.TaskStateRejected:
		st.settled = true
		return st.keep(ctx, msg, st.turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateRejected, Message: msg}))
	case a2a.TaskStateCanceled:
		st.settled = true
		if cur.State == taskplane.StateCanceled {
			return nil
		}
		return st.turn.Update(ctx, taskplane.SetStatus{State: taskplane.StateCanceled, Message: msg})
	}
	return nil
}

// keep records msg, the agent's answer or question, in our task's history when the update
// settling our task with it was refused for a message that came during the turn (err): the
// agent did answer, and the caller should see it; the next turn sends the agent only what came
// after (pending).
func (st *turnState) keep(ctx context.Context, msg *taskplane.Message, err error) error {
	if msg == nil || !errors.Is(err, taskplane.ErrUnseenMessage) {
		return err
	}
	if aerr := st.turn.Update(ctx, taskplane.AddMessage{Message: *msg}); aerr != nil {
		return aerr
	}
	return err
}

func withReason(md map[string]any, reason string) map[string]any {
	out := make(map[string]any, len(md)+1)
	for k, v := range md {
		out[k] = v
	}
	out[taskplane.MetaReason] = reason
	return out
}

// Cancel cancels the downstream task of a canceled (or timed-out) task of ours.
func (e *Executor) Cancel(ctx context.Context, t *taskplane.Task) error {
	l := readLink(t)
	if l == nil {
		return nil
	}
	return e.cancelRemote(ctx, l)
}

func (e *Executor) cancelRemote(ctx context.Context, l *link) error {
	if l == nil {
		return nil
	}
	client, _, err := e.connect(ctx)
	if err != nil {
		return err
	}
	_, err = client.CancelTask(ctx, &a2a.CancelTaskRequest{ID: a2a.TaskID(l.TaskID)})
	if err != nil && !errors.Is(err, a2a.ErrTaskNotCancelable) {
		err = redact.Error(err)
		e.cfg.Logger.Warn("cancel the downstream task", "agent", e.name, "task", l.TaskID, "err", err)
		return fmt.Errorf("cancel downstream task %s: %w", l.TaskID, err)
	}
	return nil
}
