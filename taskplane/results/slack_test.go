package results_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/sources"
	slacksrc "github.com/channels-dev/channels/sources/slack"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/results"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

// A delivery routed through the Router, as serve routes them, keeps the rate lane of the instance
// it goes out through (Slack: one per channel), so answers to one channel are spaced as Slack
// asks however many tasks finish at once.
func TestTheRouterKeepsTheInstancesRateLane(t *testing.T) {
	t.Setenv("TEST_SLACK_BOT", "xoxb-test")
	t.Setenv("TEST_SLACK_SIGN", "test-signing-secret")
	st := storetest.OpenSQLite(t)
	var instances []sources.Instance
	for _, name := range []string{"default", "eu"} {
		instances = append(instances, sources.Instance{Source: slacksrc.Name, Config: sources.Config{Instance: name, Principal: "alice",
			Options: map[string]any{"bot_token_env": "TEST_SLACK_BOT", "signing_secret_env": "TEST_SLACK_SIGN", "api_url": "http://127.0.0.1:1/"}}})
	}
	host, err := sources.NewHost(taskplane.New(st), http.NewServeMux(), instances)
	if err != nil {
		t.Fatal(err)
	}
	eng := delivery.New(st, results.FromHost(host))
	loc, _ := json.Marshal(slacksrc.Locator{Team: "T1", Channel: "C1", ThreadTS: "1.1", TS: "1.1", Instance: "eu"})
	rec, err := eng.Prepare(context.Background(), delivery.Request{Principal: "alice", TaskID: "t-1", ContextID: "c1",
		Source: slacksrc.Name, Operation: delivery.OpReply, State: taskplane.StateCompleted, Locator: loc,
		Message: taskplane.Message{ID: "m1", Role: taskplane.RoleAgent, Parts: []taskplane.Part{taskplane.TextPart("hi")}}})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Lane == "" {
		t.Fatalf("a delivery to Slack channel C1 prepared through the Router has no lane")
	}
}
