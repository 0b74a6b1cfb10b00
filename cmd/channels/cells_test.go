package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
)

func TestCellEscapesControlCharactersAndBytesThatAreNotUTF8(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcode ✓ and U+FFFD \ufffd": "plain text, ünïcode ✓ and U+FFFD \ufffd",
		"\x1b]0;owned\x07":                        `\x1b]0;owned\x07`,
		"a\tb\nc\rd\x00e\x7f":                     `a\tb\nc\rd\x00e\x7f`,
		"csi\u009b2J nel\u0085 \u00a0nbsp":        `csi\u009b2J nel\u0085 ` + "\u00a0nbsp",
		"raw \x9b and \xff":                       `raw \x9b and \xff`,
	} {
		if got := cell(in); got != want {
			t.Errorf("cell(%q) = %q, want %q", in, got, want)
		}
	}
	if got := cellShort("x\x1b[2J  y\n\tz", 100); got != `x\x1b[2J y z` {
		t.Errorf("cellShort = %q", got)
	}
}

// terminalUnsafe returns the control characters (other than the newlines ending lines), DEL, C1
// control characters and bytes that are not UTF-8 in s.
func terminalUnsafe(s string) []string {
	var out []string
	for i, r := range s {
		if r == '\n' {
			continue
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || (r == '\ufffd' && !strings.HasPrefix(s[i:], "\ufffd")) {
			out = append(out, strings.ToValidUTF8(s[max(0, i-12):min(len(s), i+12)], "?"))
		}
	}
	return out
}

// Provider text with terminal control sequences in it (a webhook identity, a message, a delivery's
// error) reaches every table a command prints as visible escapes, never as the sequences; --json
// keeps the text as it is.
func TestTablesPrintProviderControlCharactersAsEscapes(t *testing.T) {
	const (
		identity = "ev-1"
		text     = "hi \x1b[2J\u009b31m there \xff"
		lastErr  = "550 \x1b]2;pwned\x07 no\u0085such\u009b2J mailbox"
	)
	url := "sqlite://" + filepath.Join(t.TempDir(), "d.db")
	rec := ambiguousDelivery(t, url)
	ctx := context.Background()
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := taskplane.New(st).Accept(ctx, taskplane.Event{Principal: "alice", Source: "webhook", Identity: identity,
		ConversationKey: "thread-1", Message: taskplane.Message{ID: "m-1", Role: taskplane.RoleUser,
			Parts: []taskplane.Part{taskplane.TextPart(text)}}})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	if err := st.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		d, err := tx.GetDelivery(ctx, "alice", rec.ID)
		if err != nil {
			return err
		}
		d.LastError, d.ProviderID = lastErr, "msg-\x1b[8m"
		if err := tx.UpdateDelivery(ctx, d); err != nil {
			return err
		}
		return tx.InsertEvidence(ctx, store.Evidence{Principal: "alice", Source: "webhook\x1b[2J", Kind: "kind\u009b",
			TaskID: acc.Task.ID, Detail: json.RawMessage(`{"identity":"ev-\u001b]0;owned\u0007"}`), CreatedAt: time.Now().UTC()})
	}); err != nil {
		st.Close()
		t.Fatal(err)
	}
	st.Close()

	for _, args := range [][]string{
		{"tasks", "list"},
		{"tasks", "get", acc.Task.ID, "--principal", "alice"},
		{"evidence"},
		{"evidence", "--summary"},
		{"deliveries", "list"},
	} {
		c := newCLI(t, nil)
		if code := c.run(ctx, append(args, "--store", url)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, c.stderr.String())
		}
		out := c.stdout.String()
		if bad := terminalUnsafe(out); len(bad) > 0 {
			t.Errorf("%v prints control characters to the terminal, around %q:\n%s", args, bad, out)
		}
		if strings.Join(args, " ") != "tasks list" && !strings.Contains(out, `\x1b`) { // tasks list shows no provider text here
			t.Errorf("%v: no visible escape in\n%s", args, out)
		}
	}

	// An error naming what the operator typed (or a server answered) goes to the terminal too.
	c := newCLI(t, nil)
	if code := c.run(ctx, "tasks", "get", "abc\x1b[2Jdef", "--store", url); code == 0 {
		t.Fatal("tasks get of a missing task: exit 0")
	}
	if errOut := c.stderr.String(); len(terminalUnsafe(strings.TrimSuffix(errOut, "\n"))) > 0 || !strings.Contains(errOut, `abc\x1b[2Jdef`) {
		t.Errorf("the error line prints control characters to the terminal: %q", errOut)
	}

	c = newCLI(t, nil)
	if code := c.run(ctx, "deliveries", "list", "--store", url, "--json"); code != 0 {
		t.Fatalf("deliveries list --json: exit %d: %s", code, c.stderr.String())
	}
	var listed struct{ LastError string }
	if err := json.Unmarshal([]byte(c.stdout.String()), &listed); err != nil || listed.LastError != lastErr {
		t.Errorf("--json last error = %q (%v), want it as it is", listed.LastError, err)
	}
}

// TestErrorsReadNaturallyOnTheTerminal: an error's tabs and newlines (a Postgres driver indents
// each connection attempt on a line of its own) print as the indent and lines they are, not as
// \t; every other control character in it is still escaped.
func TestErrorsReadNaturallyOnTheTerminal(t *testing.T) {
	if got, want := terminalLines("connect:\n\t127.0.0.1:1: refused \x1b[2J\r"), "connect:\n 127.0.0.1:1: refused \\x1b[2J\\r"; got != want {
		t.Errorf("terminalLines = %q, want %q", got, want)
	}
	c := newCLI(t, nil)
	if code := c.run(context.Background(), "tasks", "list", "--store", "postgres://u@127.0.0.1:1/db?connect_timeout=5"); code != 1 {
		t.Fatalf("exit %d: %s", code, c.stderr.String())
	}
	if msg := c.stderr.String(); strings.Contains(msg, `\t`) || !strings.Contains(msg, "\n 127.0.0.1:1") {
		t.Errorf("stderr %q: want each attempt on a line of its own, indented by a space, without \\t", msg)
	}
}

// TestTaskMessagesPrintOnOneLine pins what docs/operations.md says of a message in "tasks get": a
// preview on one line, its runs of white space (newline and tab among them) one space, and every
// other control character a visible escape.
func TestTaskMessagesPrintOnOneLine(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "t.db")
	ctx := context.Background()
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := taskplane.New(st).Accept(ctx, taskplane.Event{Principal: "alice", Source: "webhook", Identity: "ev-1",
		ConversationKey: "thread-1", Message: taskplane.Message{ID: "m-1", Role: taskplane.RoleUser,
			Parts: []taskplane.Part{taskplane.TextPart("first line\nsecond\tline\r\n\x1b[2Jend")}}})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := newCLI(t, nil)
	if code := c.run(ctx, "tasks", "get", acc.Task.ID, "--principal", "alice", "--store", url); code != 0 {
		t.Fatalf("exit %d: %s", code, c.stderr.String())
	}
	if out := c.stdout.String(); !strings.Contains(out, `first line second line \x1b[2Jend`+"\n") {
		t.Errorf("tasks get:\n%s\nwant the message on one line: first line second line \\x1b[2Jend", out)
	}
}
