package slack_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/channels-dev/channels/sources"
	slacksrc "github.com/channels-dev/channels/sources/slack"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/store/storetest"
)

func TestSlackRefusesInvalidOptions(t *testing.T) {
	w := newWorkspace(t)
	leaked := "xoxp-SECRET-VALUE-0123"
	for _, tc := range []struct {
		name string
		mode string
		edit func(map[string]any)
		want string
	}{
		{"no bot token", slacksrc.ModeEvents, func(o map[string]any) { delete(o, "bot_token_file") }, "a bot token is required"},
		{"a user token", slacksrc.ModeEvents, func(o map[string]any) { o["bot_token_file"] = secretFile(t, "user", leaked) }, "must be a bot token"},
		{"a missing token file", slacksrc.ModeEvents, func(o map[string]any) { o["bot_token_file"] = "/nonexistent/bot" }, "bot_token_file"},
		{"an unset token variable", slacksrc.ModeEvents, func(o map[string]any) {
			delete(o, "bot_token_file")
			o["bot_token_env"] = "CHANNELS_TEST_SURELY_UNSET_VARIABLE"
		}, "is empty or unset"},
		{"env and file both", slacksrc.ModeEvents, func(o map[string]any) { o["bot_token_env"] = "HOME" }, "not both"},
		{"socket mode without an app token", slacksrc.ModeSocket, func(o map[string]any) { delete(o, "app_token_file") }, "app-level token"},
		{"a bot token as app token", slacksrc.ModeSocket, func(o map[string]any) { o["app_token_file"] = secretFile(t, "app2", botToken) }, "must be an app-level token"},
		{"events mode without a signing secret", slacksrc.ModeEvents, func(o map[string]any) { delete(o, "signing_secret_file") }, "signing secret"},
		{"an unknown mode", slacksrc.ModeEvents, func(o map[string]any) { o["mode"] = "rtm" }, `mode "rtm"`},
		{"an unknown channel_messages", slacksrc.ModeEvents, func(o map[string]any) { o["channel_messages"] = "some" }, "channel_messages"},
		{"an inline secret", slacksrc.ModeEvents, func(o map[string]any) { o["bot_token"] = botToken }, "unknown field"},
		{"a bad part interval", slacksrc.ModeEvents, func(o map[string]any) { o["part_interval"] = "soon" }, "part_interval"},
		{"a tiny message size", slacksrc.ModeEvents, func(o map[string]any) { o["max_message_chars"] = 10 }, "max_message_chars"},
		{"a negative body limit", slacksrc.ModeEvents, func(o map[string]any) { o["max_body"] = -5 }, "max_body -5: want a positive number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options(t, w, tc.mode)
			tc.edit(o)
			_, err := sources.New(slacksrc.Name, sources.Config{Instance: "default", Principal: principal, Options: o})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
			for _, secret := range []string{leaked, botToken, appToken, signing} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error shows a secret: %v", err)
				}
			}
		})
	}
	// The mode follows the tokens when not given, and decides which capabilities the instance has.
	o := options(t, w, slacksrc.ModeSocket)
	delete(o, "mode")
	src, err := sources.New(slacksrc.Name, sources.Config{Instance: "default", Principal: principal, Options: o})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := src.(sources.Endpoint); ok {
		t.Fatal("a socket mode instance mounts an HTTP endpoint")
	}
	if _, err := sources.New(slacksrc.Name, sources.Config{Instance: "default", Options: options(t, w, slacksrc.ModeEvents)}); err == nil {
		t.Fatal("an instance without a principal was accepted")
	}
	named, err := sources.New(slacksrc.Name, sources.Config{Instance: "acme", Principal: principal, Options: options(t, w, slacksrc.ModeEvents)})
	if err != nil {
		t.Fatal(err)
	}
	if p := named.(sources.Endpoint).Pattern(); p != "POST /sources/slack/acme/{endpoint}" {
		t.Fatalf("pattern of instance acme = %q", p)
	}
}

func TestSlackRefusedTokenStopsTheSource(t *testing.T) {
	w := newWorkspace(t)
	o := options(t, w, slacksrc.ModeSocket)
	o["bot_token_file"] = secretFile(t, "revoked", "xoxb-revoked")
	src := newInstance(t, o)
	sink, err := sources.NewSink(taskplane.New(storetest.OpenSQLite(t)), slacksrc.Name)
	if err != nil {
		t.Fatal(err)
	}
	err = sources.Run(context.Background(), src, sink)
	if err == nil || !strings.Contains(err.Error(), "invalid_auth") {
		t.Fatalf("Run with a refused token = %v, want invalid_auth", err)
	}
	if herr := src.(sources.HealthChecker).Health(context.Background()); herr == nil {
		t.Fatal("healthy after the token was refused")
	}
	// So does a refused app token, once the bot token was fine.
	o = options(t, w, slacksrc.ModeSocket)
	o["app_token_file"] = secretFile(t, "revoked-app", "xapp-revoked")
	src = newInstance(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := sources.Run(ctx, src, sink); err == nil || !strings.Contains(err.Error(), "invalid_auth") || ctx.Err() != nil {
		t.Fatalf("Run with a refused app token = %v, want invalid_auth before the deadline", err)
	}
	// An events instance that is not running answers 503, so Slack retries.
	ev := newInstance(t, options(t, w, slacksrc.ModeEvents))
	rw := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/sources/slack/events", strings.NewReader("{}"))
	req.SetPathValue("endpoint", "events")
	ev.(http.Handler).ServeHTTP(rw, req)
	if rw.Code != http.StatusServiceUnavailable {
		t.Fatalf("not running: %d, want 503", rw.Code)
	}
}
