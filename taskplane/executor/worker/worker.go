// Package worker is the executor for resident agents: an HTTP API through which a long-running
// agent process claims wakes and works the tasks they name, instead of Channels calling it.
//
// A worker authenticates with a worker token (Authorization: Bearer). It long-polls for the next
// wake and receives the task and a turn lease; every later call names the task and presents the
// lease (header Channels-Lease), and is allowed only while that lease is the task's active turn:
// another task's ID, a finished task and a stale lease are refused with 409 and code "no-turn".
// A settling call (complete, reject, require-input) made after a message was accepted for the task
// during the turn is refused with 409 and code "unseen-message": the turn is over, uncounted, and
// the next claim of the task carries the message.
//
//	POST /worker/v1/claim?wait=25s            → 200 {taskId, principal, lease, leaseUntil, leaseMs, offer, task} | 204
//	GET  /worker/v1/tasks/{id}                → the task (history in untrusted-content markers)
//	POST /worker/v1/tasks/{id}/heartbeat      → extends the lease
//	POST /worker/v1/tasks/{id}/outputs        {name, value}                 records a declared output
//	POST /worker/v1/tasks/{id}/complete       {response, outputs}           COMPLETED, turn ends
//	POST /worker/v1/tasks/{id}/reject         {reason}                      REJECTED, turn ends
//	POST /worker/v1/tasks/{id}/require-input  {question, requestedSchema, auth}  INPUT_REQUIRED, turn ends
//	POST /worker/v1/tasks/{id}/release        gives the turn back unsettled (it is offered again)
//	POST /worker/v1/tasks/{id}/settle?principal=…  {outcome, feedback}      on a finished task; no lease
//	                                          (principal may be left out when the token serves one)
//
// docs/executors.md describes the API with examples.
package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/channels-dev/channels/internal/bearer"
	"github.com/channels-dev/channels/internal/boundedwrite"
	"github.com/channels-dev/channels/internal/exactjson"
	"github.com/channels-dev/channels/taskplane"
)

// Prefix is where the API is mounted.
const Prefix = "/worker/v1/"

// LeaseHeader carries the turn lease on every task call.
const LeaseHeader = "Channels-Lease"

// Defaults.
const (
	DefaultLease   = 2 * time.Minute
	DefaultMaxWait = 30 * time.Second
	maxBody        = 1 << 20
)

// Token is one worker credential.
type Token struct {
	// Name identifies the worker in leases and evidence (never the token itself).
	Name  string `json:"name"`
	Token string `json:"token"`
	// Principals are the principals whose tasks the worker may claim; empty means all. (A tokens
	// file says all with "principals": ["*"], which LoadTokens turns into empty.)
	Principals []string `json:"principals,omitempty"`
}

// AllPrincipals, as a tokens file entry's only principal, lets the worker claim every
// principal's tasks.
const AllPrincipals = "*"

// LoadTokens reads {"workers":[{"name":"…","token":"…","principals":["…"]}]} from path. A file
// that lists no worker is refused, as New refuses no tokens; so is an unknown key (a misspelt
// "principals" must not load as a worker of every principal), an entry without "principals"
// (write ["*"] for all), and two entries with one name or one token. No error carries a token.
func LoadTokens(path string) ([]Token, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read worker tokens: %w", err)
	}
	var doc struct {
		Workers []json.RawMessage `json:"workers"`
	}
	if err := decodeStrict(b, &doc); err != nil {
		return nil, fmt.Errorf("parse worker tokens %s: %w", path, err)
	}
	if len(doc.Workers) == 0 {
		return nil, fmt.Errorf("worker tokens %s: no workers listed (want {\"workers\":[{\"name\":…,\"token\":…,\"principals\":[…]}]})", path)
	}
	toks := make([]Token, 0, len(doc.Workers))
	for i, raw := range doc.Workers {
		var e struct {
			Name       string    `json:"name"`
			Token      string    `json:"token"`
			Principals *[]string `json:"principals"`
		}
		if err := decodeStrict(raw, &e); err != nil {
			return nil, fmt.Errorf("parse worker tokens %s: entry %d: %w", path, i, err)
		}
		if e.Name == "" || len(e.Token) < 16 {
			return nil, fmt.Errorf("worker tokens %s: entry %d needs a name and a token of at least 16 characters", path, i)
		}
		t := Token{Name: e.Name, Token: e.Token}
		switch {
		case e.Principals == nil || len(*e.Principals) == 0:
			return nil, fmt.Errorf("worker tokens %s: worker %q lists no principals: name the principals whose tasks it may claim, or write \"principals\": [%q] for all", path, e.Name, AllPrincipals)
		case slices.Contains(*e.Principals, AllPrincipals):
			if len(*e.Principals) != 1 {
				return nil, fmt.Errorf("worker tokens %s: worker %q: %q (all principals) must be the only principal listed", path, e.Name, AllPrincipals)
			}
		case slices.Contains(*e.Principals, ""):
			return nil, fmt.Errorf("worker tokens %s: worker %q lists an empty principal", path, e.Name)
		default:
			t.Principals = *e.Principals
		}
		toks = append(toks, t)
	}
	if err := checkUnique(toks); err != nil {
		return nil, fmt.Errorf("worker tokens %s: %w", path, err)
	}
	return toks, nil
}

// decodeStrict decodes one JSON value into v, refusing keys v does not have and anything after
// the value.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

// checkUnique refuses two workers with one name (leases name the worker) or one token (the
// first would take every request, and the second's principals would be ignored). The error
// names the workers, never the token.
func checkUnique(toks []Token) error {
	names := map[string]bool{}
	byToken := map[string]string{}
	for _, t := range toks {
		if names[t.Name] {
			return fmt.Errorf("two workers are named %q: each needs a name of its own", t.Name)
		}
		names[t.Name] = true
		if other, ok := byToken[t.Token]; ok {
			return fmt.Errorf("workers %q and %q have the same token: each needs a token of its own", other, t.Name)
		}
		byToken[t.Token] = t.Name
	}
	return nil
}

// Config configures the API.
type Config struct {
	Tokens []Token
	// Lease is how long a turn lasts without a call or heartbeat (default DefaultLease).
	Lease time.Duration
	// MaxWait caps a claim's long poll (default DefaultMaxWait).
	MaxWait time.Duration
	// Poll is how often a waiting claim re-reads the store when nothing in this process pokes it
	// (wakes accepted by another process). Default 1s.
	Poll   time.Duration
	Logger *slog.Logger
	// TurnEnded, when set, is called when a worker ends a turn it claimed here (complete, reject,
	// require-input or release), with the time since the claim by this API's clock: the turn
	// durations of the worker executor (channels_executor_turn_duration_seconds). A turn whose
	// lease ran out, or claimed before an upgrade that added this, is not reported.
	TurnEnded func(elapsed time.Duration)
}

// API is the worker HTTP API. It is an http.Handler for Prefix.
type API struct {
	plane  *taskplane.Plane
	cfg    Config
	tokens []hashedToken
	mux    *http.ServeMux

	closing   chan struct{} // closed by CloseStreams
	closeOnce sync.Once
}

type hashedToken struct {
	sum [32]byte
	tok Token
}

// New returns the API over plane.
func New(plane *taskplane.Plane, cfg Config) (*API, error) {
	if len(cfg.Tokens) == 0 {
		return nil, errors.New("worker API: no worker tokens configured")
	}
	if err := checkUnique(cfg.Tokens); err != nil {
		return nil, fmt.Errorf("worker API: %w", err)
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &API{plane: plane, cfg: cfg, mux: http.NewServeMux(), closing: make(chan struct{})}
	for _, t := range cfg.Tokens {
		a.tokens = append(a.tokens, hashedToken{sum: sha256.Sum256([]byte(t.Token)), tok: t})
	}
	a.mux.HandleFunc("POST "+Prefix+"claim", a.auth(a.claim))
	a.mux.HandleFunc("GET "+Prefix+"tasks/{id}", a.turn(a.read))
	a.mux.HandleFunc("POST "+Prefix+"tasks/{id}/heartbeat", a.turn(a.heartbeat))
	a.mux.HandleFunc("POST "+Prefix+"tasks/{id}/outputs", a.turn(a.output))
	a.mux.HandleFunc("POST "+Prefix+"tasks/{id}/complete", a.turn(a.complete))
	a.mux.HandleFunc("POST "+Prefix+"tasks/{id}/reject", a.turn(a.reject))
	a.mux.HandleFunc("POST "+Prefix+"tasks/{id}/require-input", a.turn(a.requireInput))
	a.mux.HandleFunc("POST "+Prefix+"tasks/{id}/release", a.turn(a.release))
	a.mux.HandleFunc("POST "+Prefix+"tasks/{id}/settle", a.auth(a.settle))
	return a, nil
}

// CloseStreams ends the claims waiting for work, and refuses new ones, with 503 and Retry-After:
// the server is shutting down, and a worker should claim again (from this server once it is
// back, or from another). A claim that already holds a turn is answered as usual.
func (a *API) CloseStreams() { a.closeOnce.Do(func() { close(a.closing) }) }

// shuttingDown answers a claim the shutdown ended.
func shuttingDown(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, "shutting-down", "the server is shutting down; claim again")
}

// Pattern is the ServeMux pattern the API is mounted at.
func (a *API) Pattern() string { return Prefix }

// ServeHTTP serves the API.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// ---- authentication and authority ----

func (a *API) authenticate(r *http.Request) (Token, bool) {
	raw, ok := bearer.Token(r.Header.Get("Authorization"))
	if !ok {
		return Token{}, false
	}
	sum := sha256.Sum256([]byte(raw))
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
			return t.tok, true
		}
	}
	return Token{}, false
}

func (a *API) auth(h func(w http.ResponseWriter, r *http.Request, tok Token)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := a.authenticate(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="channels-worker"`)
			writeError(w, http.StatusUnauthorized, "unauthenticated", "a worker token is required")
			return
		}
		h(w, r, tok)
	}
}

// lease is what a worker presents: which wake it holds, and the secret that proves it.
type lease struct {
	Principal string `json:"p"`
	Wake      string `json:"w"`
	Secret    string `json:"s"`
	// Claimed is when the turn was claimed (Unix nanoseconds, the claiming process's clock), for
	// the turn's duration when it ends. It proves nothing: a worker that alters it skews its own
	// durations, within maxTimedTurn.
	Claimed int64 `json:"c,omitempty"`
}

func (l lease) encode() string {
	b, _ := json.Marshal(l)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeLease(s string) (lease, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	var l lease
	if err != nil || json.Unmarshal(b, &l) != nil || l.Principal == "" || l.Wake == "" || l.Secret == "" {
		return lease{}, false
	}
	return l, true
}

// owner is the lease owner stored for a worker's claim: the worker's name and a digest of the
// lease secret, so the store and the evidence never hold the secret itself.
func owner(tok Token, secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return "worker:" + tok.Name + ":" + hex.EncodeToString(sum[:8])
}

func (t Token) serves(principal string) bool {
	return len(t.Principals) == 0 || slices.Contains(t.Principals, principal)
}

// turn authenticates the worker and resumes the turn its lease names for the task in the path.
func (a *API) turn(h func(w http.ResponseWriter, r *http.Request, turn *taskplane.Turn)) http.HandlerFunc {
	return a.auth(func(w http.ResponseWriter, r *http.Request, tok Token) {
		l, ok := decodeLease(r.Header.Get(LeaseHeader))
		if !ok || !tok.serves(l.Principal) {
			writeError(w, http.StatusConflict, "no-turn", "a valid "+LeaseHeader+" for this task is required")
			return
		}
		g := &taskplane.Grant{Principal: l.Principal, TaskID: r.PathValue("id"), WakeID: l.Wake, Owner: owner(tok, l.Secret)}
		turn, err := a.plane.ResumeTurn(r.Context(), g)
		if errors.Is(err, taskplane.ErrTaskTerminal) {
			// Canceled or timed out under the worker: the turn is over.
			_ = a.plane.EndTurn(r.Context(), g, taskplane.TurnEnd{})
		}
		if err != nil {
			a.fail(w, err)
			return
		}
		// A settling call (complete, reject, require-input) ends the turn in its own transaction:
		// answered 503, it changed nothing and may be made again; committed, it left no turn.
		turn.EndWhenSettled()
		h(w, r, turn)
	})
}

// ---- handlers ----

// Claimed is the answer to a claim.
type Claimed struct {
	TaskID     string    `json:"taskId"`
	Principal  string    `json:"principal"`
	Lease      string    `json:"lease"`
	LeaseUntil time.Time `json:"leaseUntil"`
	// LeaseMs is how long the lease lasts from the answer, in milliseconds: a worker schedules
	// its heartbeats from it (leaseUntil is on the store's clock, which its own may differ from).
	LeaseMs int64               `json:"leaseMs"`
	Offer   int                 `json:"offer"`
	Task    taskplane.AgentView `json:"task"`
}

func (a *API) claim(w http.ResponseWriter, r *http.Request, tok Token) {
	if !drain(w, r) {
		return
	}
	wait := a.cfg.MaxWait
	if s := r.URL.Query().Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, "invalid", "wait must be a duration such as 25s")
			return
		}
		wait = min(d, a.cfg.MaxWait)
	}
	select {
	case <-a.closing:
		shuttingDown(w)
		return
	default:
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	secret := uuid.NewString()
	var claimed time.Time // when the claim that granted the turn was sent
	req := taskplane.ClaimRequest{Owner: owner(tok, secret), Lease: a.cfg.Lease, Principals: tok.Principals}
	tick := time.NewTicker(a.cfg.Poll)
	defer tick.Stop()
	for {
		changed := a.plane.WakesChanged()
		claimed = time.Now()
		g, err := a.plane.ClaimTurn(r.Context(), req)
		if err != nil {
			a.fail(w, err)
			return
		}
		if g != nil {
			if r.Context().Err() != nil {
				// The worker left as the claim committed: nobody holds the grant, so the task goes
				// back to the queue now rather than when the lease runs out.
				if err := a.plane.EndTurn(r.Context(), g, taskplane.TurnEnd{Shutdown: true}); err != nil {
					a.cfg.Logger.Warn("release a claim its worker left", "worker", tok.Name, "task", g.TaskID, "err", err)
				}
				// A worker still connected (the server is shutting down) gets an answer it can read.
				writeError(w, http.StatusServiceUnavailable, "released", "the claim was given back; claim again")
				return
			}
			a.cfg.Logger.Info("worker claimed a task", "worker", tok.Name, "task", g.TaskID, "offer", g.Offer)
			writeJSON(w, http.StatusOK, Claimed{TaskID: g.TaskID, Principal: g.Principal,
				Lease: lease{Principal: g.Principal, Wake: g.WakeID, Secret: secret, Claimed: claimed.UnixNano()}.encode(), LeaseUntil: g.LeaseUntil,
				LeaseMs: a.cfg.Lease.Milliseconds(), Offer: g.Offer, Task: a.plane.View(g.Task)})
			return
		}
		select {
		case <-ctx.Done():
			w.WriteHeader(http.StatusNoContent)
			return
		case <-a.closing:
			shuttingDown(w)
			return
		case <-changed:
		case <-tick.C:
		}
	}
}

func (a *API) read(w http.ResponseWriter, r *http.Request, turn *taskplane.Turn) {
	if !drain(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, a.plane.View(turn.Task))
}

func (a *API) heartbeat(w http.ResponseWriter, r *http.Request, turn *taskplane.Turn) {
	if !drain(w, r) {
		return
	}
	g := turn.Grant()
	if _, err := a.plane.RenewTurn(r.Context(), g, a.cfg.Lease); err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"leaseUntil": g.LeaseUntil, "leaseMs": a.cfg.Lease.Milliseconds()})
}

func (a *API) output(w http.ResponseWriter, r *http.Request, turn *taskplane.Turn) {
	var o taskplane.Output
	if !decode(w, r, &o) {
		return
	}
	if err := turn.RecordOutput(r.Context(), o); err != nil {
		a.fail(w, err)
		return
	}
	a.renew(r, turn)
	writeJSON(w, http.StatusOK, map[string]any{"artifactId": taskplane.OutputArtifact(o).ID})
}

// Response is an agent's answer: plain text, or message parts.
type Response struct {
	Text  string           `json:"text,omitempty"`
	Parts []taskplane.Part `json:"parts,omitempty"`
}

// UnmarshalJSON accepts a bare string as {"text": …}.
func (r *Response) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		r.Text = s
		return nil
	}
	type plain Response
	return exactjson.Unmarshal(b, (*plain)(r))
}

// Message returns the response as an agent message (nil when empty).
func (r *Response) Message() *taskplane.Message {
	if r == nil || (r.Text == "" && len(r.Parts) == 0) {
		return nil
	}
	var parts []taskplane.Part
	if r.Text != "" {
		parts = append(parts, taskplane.TextPart(r.Text))
	}
	return &taskplane.Message{Role: taskplane.RoleAgent, Parts: append(parts, r.Parts...)}
}

// Completion is the body of complete.
type Completion struct {
	Response *Response          `json:"response,omitempty"`
	Outputs  []taskplane.Output `json:"outputs,omitempty"`
}

func (a *API) complete(w http.ResponseWriter, r *http.Request, turn *taskplane.Turn) {
	var c Completion
	if !decode(w, r, &c) {
		return
	}
	a.finish(w, r, turn, turn.Complete(r.Context(), c.Response.Message(), c.Outputs...))
}

func (a *API) reject(w http.ResponseWriter, r *http.Request, turn *taskplane.Turn) {
	var body struct {
		Reason string `json:"reason"`
	}
	if !decode(w, r, &body) {
		return
	}
	a.finish(w, r, turn, turn.Reject(r.Context(), body.Reason))
}

// InputRequest is the body of require-input.
type InputRequest struct {
	Question        string           `json:"question"`
	Parts           []taskplane.Part `json:"parts,omitempty"`
	RequestedSchema json.RawMessage  `json:"requestedSchema,omitempty"`
	Auth            bool             `json:"auth,omitempty"`
}

func (a *API) requireInput(w http.ResponseWriter, r *http.Request, turn *taskplane.Turn) {
	var q InputRequest
	if !decode(w, r, &q) {
		return
	}
	a.finish(w, r, turn, turn.RequireInput(r.Context(), taskplane.Question{Text: q.Question, Parts: q.Parts,
		RequestedSchema: q.RequestedSchema, Auth: q.Auth}))
}

func (a *API) release(w http.ResponseWriter, r *http.Request, turn *taskplane.Turn) {
	if !drain(w, r) {
		return
	}
	a.finish(w, r, turn, nil)
}

// maxTimedTurn is the longest worker turn timed: a claim time further back than this is not
// believed (a worker presents it in its lease, which proves nothing about it).
const maxTimedTurn = 24 * time.Hour

// finish ends the turn after a settling call (or a release) and answers with the task's state.
func (a *API) finish(w http.ResponseWriter, r *http.Request, turn *taskplane.Turn, err error) {
	if errors.Is(err, taskplane.ErrUnseenMessage) {
		// A message came during the turn: the turn is over, uncounted, and the next claim of the
		// task reads it with the rest.
		if err := a.plane.EndTurn(r.Context(), turn.Grant(), taskplane.TurnEnd{Unseen: true}); err != nil &&
			!errors.Is(err, taskplane.ErrNoTurn) {
			a.fail(w, err)
			return
		}
		writeError(w, http.StatusConflict, "unseen-message",
			"a message arrived during this turn; the turn is over and the task is offered again with it")
		return
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	if !turn.Ended() { // an update that did not settle the task
		err = a.plane.EndTurn(r.Context(), turn.Grant(), taskplane.TurnEnd{})
	}
	if err != nil && !errors.Is(err, taskplane.ErrNoTurn) {
		a.fail(w, err)
		return
	}
	// Timed once, by the call that ended the turn (a retried release racing the first finds no
	// turn), and only within bounds: the claim time is the worker's to present, not proof.
	if l, ok := decodeLease(r.Header.Get(LeaseHeader)); ok && err == nil && l.Claimed > 0 && a.cfg.TurnEnded != nil {
		if d := time.Since(time.Unix(0, l.Claimed)); d >= 0 && d <= maxTimedTurn {
			a.cfg.TurnEnded(d)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"taskId": turn.Task.ID, "state": turn.Task.Status.State})
}

// renew extends the lease after a successful call: a working agent keeps its turn.
func (a *API) renew(r *http.Request, turn *taskplane.Turn) {
	if _, err := a.plane.RenewTurn(r.Context(), turn.Grant(), a.cfg.Lease); err != nil {
		a.cfg.Logger.Warn("renew worker lease", "task", turn.Task.ID, "err", err)
	}
}

func (a *API) settle(w http.ResponseWriter, r *http.Request, tok Token) {
	var s taskplane.Settlement
	if !decode(w, r, &s) {
		return
	}
	principal := r.URL.Query().Get("principal")
	if principal == "" && len(tok.Principals) == 1 {
		principal = tok.Principals[0]
	}
	if principal == "" || !tok.serves(principal) {
		writeError(w, http.StatusNotFound, "not-found", "task not found")
		return
	}
	t, err := a.plane.Settle(r.Context(), principal, r.PathValue("id"), s)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"taskId": t.ID, "state": t.Status.State,
		"metadata": t.Metadata[taskplane.ExtOutfitterTask]})
}

// ---- responses ----

// readBody copies the request body, of at most maxBody bytes, to dst. A larger body is answered
// 413 "too-large" naming the limit, one that cannot be read (the worker left mid-body) 400
// "invalid"; ok is false once an answer was written.
func readBody(w http.ResponseWriter, r *http.Request, dst io.Writer) bool {
	_, err := io.Copy(dst, http.MaxBytesReader(w, r.Body, maxBody))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		writeError(w, http.StatusRequestEntityTooLarge, "too-large",
			fmt.Sprintf("the body is larger than the limit of %d bytes (1 MiB)", tooLarge.Limit))
		return false
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "the body could not be read")
		return false
	}
	return true
}

// drain reads to its end the body of a call that takes none, and ignores it. net/http notices a
// client that went away (and cancels the request's context) only once the body was read to its
// end: a claim sent with a body ("{}") whose worker left would otherwise go on waiting, claim the
// next task and hold it for a whole lease instead of giving it back at once.
func drain(w http.ResponseWriter, r *http.Request) bool {
	return readBody(w, r, io.Discard)
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	var b bytes.Buffer
	if !readBody(w, r, &b) {
		return false
	}
	body := b.Bytes()
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if exactjson.Unmarshal(body, v) != nil {
		writeError(w, http.StatusBadRequest, "invalid", "the body must be a JSON object of the documented shape")
		return false
	}
	return true
}

// storeRetryAfter is the Retry-After, in seconds, of an answer the store could not give (a
// database restart or failover takes seconds).
const storeRetryAfter = 5

// fail maps an error to a status and a stable code.
func (a *API) fail(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, taskplane.ErrNoTurn):
		writeError(w, http.StatusConflict, "no-turn", "this lease does not hold the task's active turn")
	case errors.Is(err, taskplane.ErrTaskTerminal):
		writeError(w, http.StatusConflict, "no-turn", "the task is finished")
	case errors.Is(err, taskplane.ErrTaskNotFound):
		writeError(w, http.StatusNotFound, "not-found", "task not found")
	case errors.Is(err, taskplane.ErrContinuationNotAllowed):
		writeError(w, http.StatusUnprocessableEntity, "continuation-not-allowed",
			"the task's source declares no continuation method: a question could not be answered")
	case errors.Is(err, taskplane.ErrNotFinished):
		writeError(w, http.StatusConflict, "not-finished", "only a finished task can be settled")
	case errors.Is(err, taskplane.ErrInvalid), errors.Is(err, taskplane.ErrIllegalTransition):
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the request ended")
	case taskplane.StoreUnavailable(err):
		// Never the store's text: it may name the database's host, user and database.
		a.cfg.Logger.Warn("worker API: store unavailable", "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(storeRetryAfter))
		writeError(w, http.StatusServiceUnavailable, "store-unavailable", "the task store is unavailable; retry later")
	default:
		a.cfg.Logger.Error("worker API", "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "internal error")
	}
}

// writeJSON answers with v, each 64 KiB of it to be taken within 30 s and the whole at boundedwrite.MinRate: a
// worker that stops reading a task of up to 8 MiB does not hold it in memory.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = boundedwrite.Write(w, append(b, '\n'), 0)
}

func writeError(w http.ResponseWriter, code int, reason, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]string{"code": reason, "message": msg}})
}
