package taskplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

func pushEvent(principal, msgID string, push ...taskplane.PushConfig) taskplane.Event {
	return taskplane.Event{Principal: principal, Source: taskplane.SourceA2A, Identity: msgID,
		Message: textMsg(msgID, "hello"), PushConfigs: push}
}

func hook(id string) taskplane.PushConfig {
	return taskplane.PushConfig{ID: id, URL: "https://hooks.example.com/" + id, Token: "secret-token-" + id,
		Auth: &taskplane.PushAuth{Scheme: "Bearer", Credentials: "secret-cred-" + id}}
}

func checkNoSecrets(t *testing.T, c taskplane.PushConfig) {
	t.Helper()
	if c.Token != "" || (c.Auth != nil && c.Auth.Credentials != "") {
		t.Fatalf("a read returned secrets: %+v", c)
	}
}

func TestPushConfigsAreScopedToTheTaskAndItsPrincipal(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		task := mustAccept(t, p, pushEvent("alice", "m1")).Task
		got, err := p.SetPushConfig(ctx, "alice", task.ID, hook("h1"))
		if err != nil {
			t.Fatal(err)
		}
		checkNoSecrets(t, got)
		if got.ID != "h1" || got.TaskID != task.ID || got.Auth == nil || got.Auth.Scheme != "Bearer" {
			t.Fatalf("SetPushConfig = %+v", got)
		}
		// Bob sees alice's task, and so its configs, exactly like a missing task.
		if _, err := p.SetPushConfig(ctx, "bob", task.ID, hook("h2")); !errors.Is(err, taskplane.ErrTaskNotFound) {
			t.Fatalf("bob's set: err = %v, want ErrTaskNotFound", err)
		}
		if _, err := p.GetPushConfig(ctx, "bob", task.ID, "h1"); !errors.Is(err, taskplane.ErrTaskNotFound) {
			t.Fatalf("bob's get: err = %v, want ErrTaskNotFound", err)
		}
		if _, err := p.ListPushConfigs(ctx, "bob", task.ID, 0, ""); !errors.Is(err, taskplane.ErrTaskNotFound) {
			t.Fatalf("bob's list: err = %v, want ErrTaskNotFound", err)
		}
		if err := p.DeletePushConfig(ctx, "bob", task.ID, "h1"); !errors.Is(err, taskplane.ErrTaskNotFound) {
			t.Fatalf("bob's delete: err = %v, want ErrTaskNotFound", err)
		}
		if _, err := p.GetPushConfig(ctx, "alice", task.ID, "nope"); !errors.Is(err, taskplane.ErrPushConfigNotFound) {
			t.Fatalf("missing config: err = %v, want ErrPushConfigNotFound", err)
		}
		if _, err := p.GetPushConfig(ctx, "alice", task.ID, "h1"); err != nil {
			t.Fatalf("alice's config after bob's attempts: %v", err)
		}
		// Delete is idempotent.
		for range 2 {
			if err := p.DeletePushConfig(ctx, "alice", task.ID, "h1"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.GetPushConfig(ctx, "alice", task.ID, "h1"); !errors.Is(err, taskplane.ErrPushConfigNotFound) {
			t.Fatalf("deleted config: err = %v, want ErrPushConfigNotFound", err)
		}
	})
}

func TestPushConfigReadsNeverReturnSecretsButTheStoreKeepsThem(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		task := mustAccept(t, p, pushEvent("alice", "m1", hook("sent"))).Task
		if _, err := p.SetPushConfig(ctx, "alice", task.ID, hook("set")); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"sent", "set"} {
			c, err := p.GetPushConfig(ctx, "alice", task.ID, id)
			if err != nil {
				t.Fatal(err)
			}
			checkNoSecrets(t, c)
			row, err := p.Store().GetPushConfig(ctx, "alice", task.ID, id)
			if err != nil {
				t.Fatal(err)
			}
			if row.Token != "secret-token-"+id || row.AuthCredentials != "secret-cred-"+id {
				t.Fatalf("stored secrets of %s = %q, %q", id, row.Token, row.AuthCredentials)
			}
		}
		page, err := p.ListPushConfigs(ctx, "alice", task.ID, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Configs) != 2 {
			t.Fatalf("list = %+v", page)
		}
		for _, c := range page.Configs {
			checkNoSecrets(t, c)
		}
		// Nor does the registration evidence hold them.
		ev, err := p.Store().ListEvidence(ctx, store.EvidenceFilter{Principal: "alice", Kind: taskplane.EvidencePushRegistered})
		if err != nil {
			t.Fatal(err)
		}
		if len(ev) != 2 {
			t.Fatalf("%d registration evidence records, want 2", len(ev))
		}
		for _, e := range ev {
			if s := string(e.Detail); strings.Contains(s, "secret-token") || strings.Contains(s, "secret-cred") {
				t.Fatalf("evidence holds a secret: %s", s)
			}
		}
	})
}

func TestPushConfigsAreBoundedPerTask(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		task := mustAccept(t, p, pushEvent("alice", "m1")).Task
		for i := range taskplane.MaxPushConfigs {
			if _, err := p.SetPushConfig(ctx, "alice", task.ID, hook(fmt.Sprintf("h%02d", i))); err != nil {
				t.Fatalf("config %d: %v", i, err)
			}
		}
		if _, err := p.SetPushConfig(ctx, "alice", task.ID, hook("one-too-many")); !errors.Is(err, taskplane.ErrPushConfigLimit) {
			t.Fatalf("config past the bound: err = %v, want ErrPushConfigLimit", err)
		}
		// Replacing one is not a new config.
		if _, err := p.SetPushConfig(ctx, "alice", task.ID, hook("h03")); err != nil {
			t.Fatalf("replace at the bound: %v", err)
		}
		// Nor may one send carry more than the bound.
		many := make([]taskplane.PushConfig, taskplane.MaxPushConfigs+1)
		for i := range many {
			many[i] = hook(fmt.Sprintf("s%02d", i))
		}
		if _, err := p.Accept(ctx, pushEvent("alice", "m2", many...)); !errors.Is(err, taskplane.ErrInvalid) {
			t.Fatalf("send with %d configs: err = %v, want ErrInvalid", len(many), err)
		}
	})
}

func TestAcceptRegistersPushConfigsInTheSameTransaction(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		acc := mustAccept(t, p, pushEvent("alice", "m1", hook("h1"), taskplane.PushConfig{URL: "https://hooks.example.com/anon"}))
		page, err := p.ListPushConfigs(ctx, "alice", acc.Task.ID, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Configs) != 2 {
			t.Fatalf("configs after accept: %+v", page.Configs)
		}
		row, err := p.Store().GetPushConfig(ctx, "alice", acc.Task.ID, "h1")
		if err != nil {
			t.Fatal(err)
		}
		// The cursor sits at the task's last event and the task as accepted is the snapshot sent
		// first, so the receiver hears of the task and then of every later change.
		if row.Cursor != acc.Task.LastSeq || len(row.Snapshot) == 0 {
			t.Fatalf("cursor %d (task at %d), snapshot %d bytes", row.Cursor, acc.Task.LastSeq, len(row.Snapshot))
		}
		var snap taskplane.Task
		if err := json.Unmarshal(row.Snapshot, &snap); err != nil || snap.ID != acc.Task.ID || snap.Status.State != taskplane.StateSubmitted {
			t.Fatalf("snapshot = %+v, %v", snap, err)
		}
		// A duplicate registers nothing more.
		dup := mustAccept(t, p, pushEvent("alice", "m1", hook("h1"), taskplane.PushConfig{URL: "https://hooks.example.com/anon"}))
		if dup.Outcome != taskplane.Duplicate {
			t.Fatalf("second accept: %s", dup.Outcome)
		}
		if page, _ := p.ListPushConfigs(ctx, "alice", acc.Task.ID, 0, ""); len(page.Configs) != 2 {
			t.Fatalf("configs after a duplicate: %d", len(page.Configs))
		}

		// A config the plane refuses refuses the whole acceptance: no task, no claim.
		bad := pushEvent("alice", "m2", hook("ok"), taskplane.PushConfig{URL: "ftp://hooks.example.com/"})
		if _, err := p.Accept(ctx, bad); !errors.Is(err, taskplane.ErrInvalid) {
			t.Fatalf("accept with a bad config: err = %v, want ErrInvalid", err)
		}
		if n := countTasks(t, p, "alice"); n != 1 {
			t.Fatalf("%d tasks after the refused acceptance, want 1", n)
		}
		if _, err := p.Store().GetClaim(ctx, "alice", taskplane.SourceA2A, "m2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("claim of the refused acceptance: err = %v, want ErrNotFound", err)
		}
		// The same message with a good config is then accepted normally.
		if acc := mustAccept(t, p, pushEvent("alice", "m2", hook("ok"))); acc.Outcome != taskplane.Created {
			t.Fatalf("retry: %s", acc.Outcome)
		}
	})
}

func TestListPushConfigsPagesByID(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		task := mustAccept(t, p, pushEvent("alice", "m1")).Task
		for _, id := range []string{"c", "a", "d", "b", "e"} {
			if _, err := p.SetPushConfig(ctx, "alice", task.ID, hook(id)); err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		token := ""
		for pages := 0; ; pages++ {
			page, err := p.ListPushConfigs(ctx, "alice", task.ID, 2, token)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range page.Configs {
				got = append(got, c.ID)
			}
			if token = page.NextPageToken; token == "" {
				if pages != 2 {
					t.Fatalf("%d pages, want 3", pages+1)
				}
				break
			}
		}
		if fmt.Sprint(got) != "[a b c d e]" {
			t.Fatalf("listed %v", got)
		}
		if _, err := p.ListPushConfigs(ctx, "alice", task.ID, 2, "not-a-token"); !errors.Is(err, taskplane.ErrInvalid) {
			t.Fatalf("bad token: err = %v, want ErrInvalid", err)
		}
	})
}

func TestPushConfigValidation(t *testing.T) {
	eachDriver(t, func(t *testing.T, p *taskplane.Plane) {
		ctx := context.Background()
		task := mustAccept(t, p, pushEvent("alice", "m1")).Task
		for name, c := range map[string]taskplane.PushConfig{
			"no url":             {},
			"relative url":       {URL: "/hook"},
			"ftp url":            {URL: "ftp://hooks.example.com/"},
			"user info":          {URL: "https://u:p@hooks.example.com/"},
			"slash in id":        {ID: "a/b", URL: "https://hooks.example.com/"},
			"long id":            {ID: strings.Repeat("x", taskplane.MaxPushConfigIDLen+1), URL: "https://hooks.example.com/"},
			"no scheme":          {URL: "https://hooks.example.com/", Auth: &taskplane.PushAuth{Credentials: "x"}},
			"header injection":   {URL: "https://hooks.example.com/", Token: "a\r\nX-Evil: 1"},
			"credentials inject": {URL: "https://hooks.example.com/", Auth: &taskplane.PushAuth{Scheme: "Bearer", Credentials: "a\nb"}},
			// Bytes no HTTP client sends in a header: refused at registration, not found out by
			// every notification failing.
			"control byte":       {URL: "https://hooks.example.com/", Token: "tok\x01en"},
			"token padded":       {URL: "https://hooks.example.com/", Token: "  padded-token\t "},
			"credentials padded": {URL: "https://hooks.example.com/", Auth: &taskplane.PushAuth{Scheme: "Bearer", Credentials: "cred  "}},
			"scheme not a token": {URL: "https://hooks.example.com/", Auth: &taskplane.PushAuth{Scheme: "Bea(rer)", Credentials: "x"}},
		} {
			if _, err := p.SetPushConfig(ctx, "alice", task.ID, c); !errors.Is(err, taskplane.ErrInvalid) {
				t.Errorf("%s: err = %v, want ErrInvalid", name, err)
			}
		}
		if _, err := p.SetPushConfig(ctx, "alice", task.ID, taskplane.PushConfig{ID: "urn:hook:1", URL: "https://hooks.example.com/"}); err != nil {
			t.Errorf("an id with colons: %v", err)
		}
	})
}

// An id no store can hold (NUL, invalid UTF-8: Postgres text refuses both) is a clean answer on
// every driver, never an internal error: a push
// config id is invalid at create and not found at get; deleting it succeeds as for a missing one;
// a task or context id is not found (or lists nothing); a message id, context id or task id of an
// event is invalid.
func TestIDsNoStoreCanHoldAreInvalidOrNotFoundNotInternal(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := context.Background()
		p := taskplane.New(open(t))
		acc, err := p.Accept(ctx, pushEvent("alice", "m1"))
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"a\x00b", "a\xffb"} {
			if _, err := p.SetPushConfig(ctx, "alice", acc.Task.ID, taskplane.PushConfig{ID: bad, URL: "https://hook.example/x"}); !errors.Is(err, taskplane.ErrInvalid) {
				t.Errorf("set config %q: %v, want invalid", bad, err)
			}
			if _, err := p.GetPushConfig(ctx, "alice", acc.Task.ID, bad); !errors.Is(err, taskplane.ErrPushConfigNotFound) {
				t.Errorf("get config %q: %v, want not found", bad, err)
			}
			if err := p.DeletePushConfig(ctx, "alice", acc.Task.ID, bad); err != nil {
				t.Errorf("delete config %q: %v, want success", bad, err)
			}
			if _, err := p.GetTask(ctx, "alice", bad); !errors.Is(err, taskplane.ErrTaskNotFound) {
				t.Errorf("get task %q: %v, want not found", bad, err)
			}
			if _, _, err := p.Cancel(ctx, "alice", bad, nil); !errors.Is(err, taskplane.ErrTaskNotFound) {
				t.Errorf("cancel task %q: %v, want not found", bad, err)
			}
			if _, err := p.ListPushConfigs(ctx, "alice", bad, 0, ""); !errors.Is(err, taskplane.ErrTaskNotFound) {
				t.Errorf("list configs of task %q: %v, want not found", bad, err)
			}
			if page, err := p.ListTasks(ctx, "alice", taskplane.ListQuery{ContextID: bad}); err != nil || len(page.Tasks) != 0 {
				t.Errorf("list tasks of context %q: %+v, %v; want none", bad, page, err)
			}
			for name, ev := range map[string]taskplane.Event{
				"message id": pushEvent("alice", bad),
				"context id": func() taskplane.Event { e := pushEvent("alice", "m-ctx"); e.ContextID = bad; return e }(),
				"task id":    func() taskplane.Event { e := pushEvent("alice", "m-task"); e.TaskID = bad; return e }(),
			} {
				if _, err := p.Accept(ctx, ev); !errors.Is(err, taskplane.ErrInvalid) {
					t.Errorf("accept with %s %q: %v, want invalid", name, bad, err)
				}
			}
		}
	})
}

// Other control characters are stored as they are, as earlier builds stored them: a push config
// or a context whose client id holds a tab is reachable, and deleting such a config deletes it.
func TestIDsWithControlCharactersAStoreHoldsStayReachable(t *testing.T) {
	storetest.ForEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := context.Background()
		p := taskplane.New(open(t))
		acc, err := p.Accept(ctx, pushEvent("alice", "m1"))
		if err != nil {
			t.Fatal(err)
		}
		const id = "a\tb\x01c"
		if _, err := p.SetPushConfig(ctx, "alice", acc.Task.ID, taskplane.PushConfig{ID: id, URL: "https://hook.example/x"}); err != nil {
			t.Fatalf("set config %q: %v", id, err)
		}
		if _, err := p.GetPushConfig(ctx, "alice", acc.Task.ID, id); err != nil {
			t.Fatalf("get config %q: %v", id, err)
		}
		if err := p.DeletePushConfig(ctx, "alice", acc.Task.ID, id); err != nil {
			t.Fatal(err)
		}
		if _, err := p.GetPushConfig(ctx, "alice", acc.Task.ID, id); !errors.Is(err, taskplane.ErrPushConfigNotFound) {
			t.Fatalf("after delete, get config %q: %v, want not found", id, err)
		}
		ev := pushEvent("alice", "m-ctx\t1")
		ev.ContextID = "ctx\t1"
		first, err := p.Accept(ctx, ev)
		if err != nil {
			t.Fatalf("accept with context id and message id holding a tab: %v", err)
		}
		ev = pushEvent("alice", "m-ctx\t2")
		ev.ContextID = first.ContextID
		second, err := p.Accept(ctx, ev)
		if err != nil || second.ContextID != first.ContextID {
			t.Fatalf("a second message in that context: %v, context %q want %q", err, second.ContextID, first.ContextID)
		}
		if page, err := p.ListTasks(ctx, "alice", taskplane.ListQuery{ContextID: first.ContextID}); err != nil || len(page.Tasks) != 2 {
			t.Fatalf("list tasks of the context: %d tasks, %v; want 2", len(page.Tasks), err)
		}
	})
}
