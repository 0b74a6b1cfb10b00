package command_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/executor/command"
	"github.com/channels-dev/channels/taskplane/executor/executortest"
)

// shell returns an exec executor running script with sh; $1 is a scratch file path.
func shell(t *testing.T, script string, timeout time.Duration) (*command.Executor, string) {
	t.Helper()
	scratch := filepath.Join(t.TempDir(), "scratch")
	e, err := command.New(command.Config{Command: []string{"sh", "-c", script, "sh", scratch}, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return e, scratch
}

// run sends one message through an executortest harness and returns the settled task.
func run(t *testing.T, e *command.Executor) *taskplane.Task {
	t.Helper()
	h := executortest.New(t, e)
	acc := h.Send(t, executortest.UserEvent("m-1", "summarize this"))
	h.Settle(t, acc.Task.ID, 0)
	return h.Task(t, acc.Task.ID)
}

func statusText(task *taskplane.Task) string {
	if task.Status.Message == nil || len(task.Status.Message.Parts) == 0 {
		return ""
	}
	return task.Status.Message.Parts[0].Text
}

func TestExecCompletesWithOutputs(t *testing.T) {
	e, scratch := shell(t, `cat > "$1"; echo "$CHANNELS_TASK_ID" >> "$1"; echo progress >&2
printf '%s' '{"result":"complete","response":"all done","outputs":[{"name":"summary","value":{"words":3}}]}'`, 10*time.Second)
	task := run(t, e)
	if task.Status.State != taskplane.StateCompleted || statusText(task) != "all done" {
		t.Fatalf("task %s %q", task.Status.State, statusText(task))
	}
	if len(task.Artifacts) != 1 || task.Artifacts[0].Name != "summary" || string(task.Artifacts[0].Parts[0].Data) != `{"words":3}` {
		t.Fatalf("artifacts %+v", task.Artifacts)
	}
	stdin, err := os.ReadFile(scratch)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(stdin), `"state":"working"`) || !strings.Contains(string(stdin), `\u003cuntrusted-content id=`) ||
		!strings.Contains(string(stdin), task.ID) {
		t.Fatalf("stdin the command saw: %s", stdin)
	}
}

// The command receives the base variables, the task's, and those it was allowed: never the rest
// of Channels' environment, where its secrets are.
func TestExecEnvironmentHoldsOnlyWhatIsAllowed(t *testing.T) {
	t.Setenv("CHANNELS_ADMIN_TOKEN", "s3cr3t-admin")
	t.Setenv("SLACK_BOT_TOKEN", "s3cr3t-slack")
	t.Setenv("AGENT_API_KEY", "allowed-key")
	scratch := filepath.Join(t.TempDir(), "env")
	e, err := command.New(command.Config{Command: []string{"sh", "-c", `env > "$1"; printf '%s' '{"result":"complete","response":"ok"}'`, "sh", scratch},
		Timeout: 10 * time.Second, Env: []string{"AGENT_API_KEY", "NOT_SET_ANYWHERE"}})
	if err != nil {
		t.Fatal(err)
	}
	task := run(t, e)
	if task.Status.State != taskplane.StateCompleted {
		t.Fatalf("task %s %q", task.Status.State, statusText(task))
	}
	b, err := os.ReadFile(scratch)
	if err != nil {
		t.Fatal(err)
	}
	env := string(b)
	if strings.Contains(env, "s3cr3t") {
		t.Errorf("the command saw a secret of Channels' environment:\n%s", env)
	}
	for _, want := range []string{"AGENT_API_KEY=allowed-key", "CHANNELS_TASK_ID=" + task.ID, "PATH="} {
		if !strings.Contains(env, want) {
			t.Errorf("the command's environment lacks %s:\n%s", want, env)
		}
	}
}

func TestExecRejectAndRequireInput(t *testing.T) {
	e, _ := shell(t, `cat >/dev/null; echo '{"result":"reject","reason":"not mine"}'`, 10*time.Second)
	if task := run(t, e); task.Status.State != taskplane.StateRejected || statusText(task) != "not mine" {
		t.Fatalf("reject: %s %q", task.Status.State, statusText(task))
	}
	e, _ = shell(t, `cat >/dev/null; echo '{"result":"require_input","question":"which file?","requestedSchema":{"type":"object"}}'`, 10*time.Second)
	task := run(t, e)
	if task.Status.State != taskplane.StateInputRequired || statusText(task) != "which file?" {
		t.Fatalf("require_input: %s %q", task.Status.State, statusText(task))
	}
	if _, ok := task.Status.Message.Metadata[taskplane.ExtElicitation]; !ok {
		t.Fatal("the question lost its requestedSchema")
	}
}

func TestExecTimeout(t *testing.T) {
	e, _ := shell(t, `cat >/dev/null; sleep 30; echo '{"result":"complete"}'`, 300*time.Millisecond)
	start := time.Now()
	task := run(t, e)
	if task.Status.State != taskplane.StateFailed || !strings.Contains(statusText(task), "timed out") {
		t.Fatalf("task %s %q, want FAILED timed out", task.Status.State, statusText(task))
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the timeout took %s to fail the task", took)
	}
}

func TestExecBadOutput(t *testing.T) {
	for name, c := range map[string]struct{ script, want string }{
		"not json":          {`echo 'all good!'`, "bad output"},
		"unknown result":    {`echo '{"result":"dance"}'`, "bad output"},
		"two values":        {`echo '{"result":"complete"} {"result":"complete"}'`, "bad output"},
		"unknown field":     {`echo '{"result":"complete","mood":"happy"}'`, "bad output"},
		"invalid output":    {`echo '{"result":"complete","outputs":[{"name":"Bad Name","value":{}}]}'`, "bad output"},
		"non-object output": {`echo '{"result":"reject","reason":"x","outputs":[{"name":"ok","value":[1]}]}'`, "bad output"},
		"empty stdout":      {`true`, "bad output"},
		"reject no reason":  {`echo '{"result":"reject"}'`, "bad output"},
		"exit status":       {`echo oops >&2; exit 3`, "exit status 3"},
		// A valid result followed by more than MaxOutput (4 MiB) of padding: stdout is bounded.
		"stdout past the bound":                   {`echo '{"result":"complete"}'; head -c 5000000 /dev/zero | tr '\0' ' '`, "stdout longer than"},
		"exit status after stdout past the bound": {`head -c 5000000 /dev/zero | tr '\0' ' '; exit 3`, "exit status 3"},
	} {
		t.Run(name, func(t *testing.T) {
			e, _ := shell(t, "cat >/dev/null; "+c.script, 10*time.Second)
			task := run(t, e)
			if task.Status.State != taskplane.StateFailed || !strings.Contains(statusText(task), c.want) {
				t.Fatalf("task %s %q, want FAILED with %q", task.Status.State, statusText(task), c.want)
			}
		})
	}
}

// A number in the command's output, such as an id past 2^53 in a part's metadata, is recorded as
// the command wrote it.
func TestExecOutputNumbersAreRecordedExactly(t *testing.T) {
	e, _ := shell(t, `cat > /dev/null
printf '%s' '{"result":"complete","response":{"parts":[{"text":"done","metadata":{"id":9007199254740993,"price":1.10}}]}}'`, 10*time.Second)
	task := run(t, e)
	if task.Status.State != taskplane.StateCompleted || task.Status.Message == nil {
		t.Fatalf("task %s %+v", task.Status.State, task.Status.Message)
	}
	md := task.Status.Message.Parts[0].Metadata
	if fmt.Sprint(md["id"]) != "9007199254740993" || fmt.Sprint(md["price"]) != "1.10" {
		t.Fatalf("metadata recorded as %v", md)
	}
}
