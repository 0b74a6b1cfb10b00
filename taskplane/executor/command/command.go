// Package command is the exec executor: it runs a configured command once per wake, writes the
// task as JSON to its stdin (taskplane.AgentView: history wrapped in untrusted-content markers),
// and reads one result object from its stdout:
//
//	{"result": "complete", "response": "text" | {"text": "…", "parts": […]}, "outputs": [{"name": "…", "value": {…}}]}
//	{"result": "reject", "reason": "…"}
//	{"result": "require_input", "question": "…", "requestedSchema": {…}, "auth": false}
//
// "outputs" may accompany any result; they are recorded first. A command that runs past its
// timeout is killed and its task fails; so does one that exits non-zero or prints anything but
// one such object. The command runs in a process group of its own, killed whole when the turn
// ends (timeout, cancel, lost lease, shutdown, or the command's own exit), so the children it
// starts end with it; a child that leaves the group itself (setsid, setpgid) is beyond reach, and
// the command, a group leader, cannot call setsid (setsid(1) forks and detaches). Its stderr goes
// to the log, a line per record. It gets a minimal environment
// (BaseEnv, plus the variables Config.Env names) and CHANNELS_TASK_ID, CHANNELS_CONTEXT_ID,
// CHANNELS_PRINCIPAL and CHANNELS_SOURCE.
package command

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/channels-dev/channels/internal/exactjson"
	"github.com/channels-dev/channels/taskplane"
)

// Defaults.
const (
	DefaultTimeout = 10 * time.Minute
	// MaxOutput bounds what is read from stdout.
	MaxOutput = 4 << 20
	// maxStderrLine bounds one logged stderr line.
	maxStderrLine = 4 << 10
)

// Results a command may print.
const (
	ResultComplete     = "complete"
	ResultReject       = "reject"
	ResultRequireInput = "require_input"
)

// Config configures the executor.
type Config struct {
	// Command is the program and its arguments (no shell is involved).
	Command []string
	// Timeout bounds one run (default DefaultTimeout).
	Timeout time.Duration
	// Dir is the working directory ("" = the current one).
	Dir string
	// Env names the environment variables of this process the command also receives, besides
	// BaseEnv and the task's CHANNELS_* variables. Nothing else passes: Channels' environment
	// holds its own secrets (the admin token, provider tokens, the store URL), and the command
	// handles untrusted text.
	Env    []string
	Logger *slog.Logger
}

// BaseEnv are the environment variables every command receives (when set here).
var BaseEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"}

// Executor runs Config.Command per wake.
type Executor struct {
	cfg Config
}

// New returns the executor.
func New(cfg Config) (*Executor, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("exec executor: no command configured")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Executor{cfg: cfg}, nil
}

// Result is what the command prints on stdout.
type Result struct {
	Result          string             `json:"result"`
	Response        *Response          `json:"response,omitempty"`
	Outputs         []taskplane.Output `json:"outputs,omitempty"`
	Reason          string             `json:"reason,omitempty"`
	Question        string             `json:"question,omitempty"`
	Parts           []taskplane.Part   `json:"parts,omitempty"`
	RequestedSchema json.RawMessage    `json:"requestedSchema,omitempty"`
	Auth            bool               `json:"auth,omitempty"`
}

// Response is the text, or the parts, of a completion's agent message.
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

// environ is the part of this process's environment the command receives: BaseEnv and Env.
func (e *Executor) environ() []string {
	var env []string
	for _, name := range slices.Concat(BaseEnv, e.cfg.Env) {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// ErrBadOutput is the error of a command whose stdout is not one result object.
var ErrBadOutput = errors.New("exec: bad output")

// Execute runs the command for the turn's task and applies its result.
func (e *Executor) Execute(ctx context.Context, turn *taskplane.Turn) error {
	t := turn.Task
	log := e.cfg.Logger.With("executor", "exec", "task", t.ID, "command", e.cfg.Command[0])
	in, err := json.Marshal(turn.Plane().View(t))
	if err != nil {
		return fmt.Errorf("exec: encode task: %w", err)
	}
	runCtx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, e.cfg.Command[0], e.cfg.Command[1:]...)
	cmd.Dir = e.cfg.Dir
	cmd.Env = append(e.environ(), "CHANNELS_TASK_ID="+t.ID, "CHANNELS_CONTEXT_ID="+t.ContextID,
		"CHANNELS_PRINCIPAL="+t.Origin.Principal, "CHANNELS_SOURCE="+t.Origin.Source)
	cmd.Stdin = bytes.NewReader(in)
	var out limitedBuffer
	out.max = MaxOutput
	cmd.Stdout = &out
	stderr := &lineLogger{log: log}
	cmd.Stderr = stderr
	cmd.WaitDelay = 2 * time.Second // a child that keeps the pipes open cannot hold the turn
	ownGroup(cmd)
	start := time.Now()
	err = cmd.Run()
	killGroup(cmd)
	stderr.flush()
	exitedOK := cmd.ProcessState != nil && cmd.ProcessState.Success()
	if exitedOK && errors.Is(err, exec.ErrWaitDelay) {
		// The command exited 0; something it left in the background held its output open past
		// WaitDelay (and is killed with the group). What it printed before exiting is its result.
		log.Debug("command left a process holding its output; it was ended", "wait_delay", cmd.WaitDelay.String())
		err = nil
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err() // canceled or shutting down: not the command's fault
	case err == nil && exitedOK:
		// Done in time, even if the timeout passed while its output was being closed.
		if out.over {
			return fmt.Errorf("%w: stdout longer than %d bytes", ErrBadOutput, MaxOutput)
		}
	case errors.Is(runCtx.Err(), context.DeadlineExceeded):
		log.Warn("command timed out", "timeout", e.cfg.Timeout.String())
		return fmt.Errorf("exec: %s timed out after %s", e.cfg.Command[0], e.cfg.Timeout)
	case err != nil:
		return fmt.Errorf("exec: %s: %w", e.cfg.Command[0], err)
	}
	log.Debug("command finished", "took", time.Since(start).String())
	var res Result
	if err := exactjson.UnmarshalStrict(out.Bytes(), &res); err != nil {
		return fmt.Errorf("%w: %v (want one JSON object on stdout)", ErrBadOutput, err)
	}
	return apply(ctx, turn, res)
}

// apply turns a result into task changes.
func apply(ctx context.Context, turn *taskplane.Turn, res Result) error {
	if res.Result != ResultComplete {
		for _, o := range res.Outputs {
			if err := turn.RecordOutput(ctx, o); errors.Is(err, taskplane.ErrInvalid) {
				return fmt.Errorf("%w: output %q: %v", ErrBadOutput, o.Name, err)
			} else if err != nil {
				return err // not the command's: the store's failure, say, which offers the turn again
			}
		}
	}
	var err error
	switch res.Result {
	case ResultComplete:
		var msg *taskplane.Message
		if r := res.Response; r != nil && (r.Text != "" || len(r.Parts) > 0) {
			msg = &taskplane.Message{Role: taskplane.RoleAgent}
			if r.Text != "" {
				msg.Parts = append(msg.Parts, taskplane.TextPart(r.Text))
			}
			msg.Parts = append(msg.Parts, r.Parts...)
		}
		err = turn.Complete(ctx, msg, res.Outputs...)
	case ResultReject:
		err = turn.Reject(ctx, res.Reason)
	case ResultRequireInput:
		err = turn.RequireInput(ctx, taskplane.Question{Text: res.Question, Parts: res.Parts,
			RequestedSchema: res.RequestedSchema, Auth: res.Auth})
	default:
		return fmt.Errorf("%w: result %q is not complete, reject or require_input", ErrBadOutput, res.Result)
	}
	if errors.Is(err, taskplane.ErrInvalid) {
		return fmt.Errorf("%w: %v", ErrBadOutput, err)
	}
	return err
}

// limitedBuffer keeps at most max bytes and notes whether more came.
// (It holds its bytes.Buffer as a field, not embedded: an embedded one's ReadFrom would let
// io.Copy fill it past max.)
type limitedBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); len(p) > room {
		b.over = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return b.buf.Write(p)
}

// Bytes returns what was kept.
func (b *limitedBuffer) Bytes() []byte { return b.buf.Bytes() }

// lineLogger logs a command's stderr, one record per line (long lines cut).
type lineLogger struct {
	log     *slog.Logger
	pending []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.pending = append(l.pending, p...)
	consumed := 0
	for {
		i := bytes.IndexByte(l.pending[consumed:], '\n')
		if i < 0 {
			break
		}
		l.emit(l.pending[consumed : consumed+i])
		consumed += i + 1
	}
	l.pending = append(l.pending[:0], l.pending[consumed:]...)
	if len(l.pending) > maxStderrLine {
		l.emit(l.pending)
		l.pending = l.pending[:0]
	}
	return len(p), nil
}

func (l *lineLogger) flush() {
	if len(l.pending) > 0 {
		l.emit(l.pending)
		l.pending = nil
	}
}

func (l *lineLogger) emit(line []byte) {
	s := strings.TrimRight(string(line), "\r")
	if len(s) > maxStderrLine {
		s = s[:maxStderrLine] + "…"
	}
	if s != "" {
		l.log.Info("command stderr", "line", s)
	}
}

var _ io.Writer = (*lineLogger)(nil)
