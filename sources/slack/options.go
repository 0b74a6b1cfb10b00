package slack

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/channels-dev/channels/sources"
)

// Intake modes.
const (
	// ModeSocket receives over a Socket Mode websocket (an app-level token, no public URL).
	ModeSocket = "socket"
	// ModeEvents receives the Events API and interactive payloads over HTTP, signed with the
	// app's signing secret.
	ModeEvents = "events"
)

// What plain (unmentioned) channel messages are.
const (
	// ChannelThreads: a reply in a thread of an allowed channel is work (the default); a
	// top-level message without a mention is not.
	ChannelThreads = "threads"
	// ChannelAll: every message in an allowed channel is work.
	ChannelAll = "all"
	// ChannelNone: only mentions and direct messages are work.
	ChannelNone = "none"
)

// Defaults.
const (
	DefaultAPIURL          = "https://slack.com/api/"
	DefaultMaxBody         = sources.DefaultMaxBody
	DefaultHandledReaction = "white_check_mark"
	// DefaultMaxMessageChars bounds one posted message; longer output is split into parts.
	DefaultMaxMessageChars = 3500
	// DefaultPartInterval spaces the parts of a split answer, Slack's ~1 message/s per channel.
	DefaultPartInterval = time.Second
)

// Options configure one Slack app installation (the options of a `slack` source in the config
// file). Secrets are given only by reference — an environment variable (…_env) or a file
// (…_file) — and are never logged.
type Options struct {
	// Mode is "socket" or "events". Default: socket when an app token is configured, else events.
	Mode string `json:"mode,omitempty"`
	// BotTokenEnv / BotTokenFile hold the bot token (xoxb-…): Web API calls and answers.
	BotTokenEnv  string `json:"bot_token_env,omitempty"`
	BotTokenFile string `json:"bot_token_file,omitempty"`
	// AppTokenEnv / AppTokenFile hold the app-level token (xapp-…, scope connections:write):
	// Socket Mode.
	AppTokenEnv  string `json:"app_token_env,omitempty"`
	AppTokenFile string `json:"app_token_file,omitempty"`
	// SigningSecretEnv / SigningSecretFile hold the signing secret: Events API over HTTP.
	SigningSecretEnv  string `json:"signing_secret_env,omitempty"`
	SigningSecretFile string `json:"signing_secret_file,omitempty"`
	// Channels is the allow-list of channel ids (C…, G…). Empty: every channel the bot is in.
	// Direct messages are governed by DirectMessages, not by this list.
	Channels []string `json:"channels,omitempty"`
	// ChannelMessages says which unmentioned channel messages are work: "threads" (default),
	// "all" or "none". Mentions (app_mention) in an allowed channel are always work.
	ChannelMessages string `json:"channel_messages,omitempty"`
	// DirectMessages makes direct messages to the bot work (default true).
	DirectMessages *bool `json:"direct_messages,omitempty"`
	// HandledReaction is the emoji name of the "handled" marker (default white_check_mark).
	HandledReaction string `json:"handled_reaction,omitempty"`
	// MaxMessageChars bounds one posted message (default 3500); longer answers are split.
	MaxMessageChars int `json:"max_message_chars,omitempty"`
	// PartInterval spaces the parts of a split answer, as a Go duration (default "1s").
	PartInterval string `json:"part_interval,omitempty"`
	// MaxBody is the largest accepted HTTP body in bytes (default 1 MiB).
	MaxBody int64 `json:"max_body,omitempty"`
	// APIURL is the Web API base URL (default https://slack.com/api/): a proxy, or a test server.
	APIURL string `json:"api_url,omitempty"`

	botToken, appToken, signingSecret string
	allowed                           map[string]bool
	dms                               bool
	partInterval                      time.Duration
}

// secret reads a secret given by environment variable or file; "" when neither is set.
func secret(name, env, file string) (string, error) {
	switch {
	case env != "" && file != "":
		return "", fmt.Errorf("%s: give %s_env or %s_file, not both", name, name, name)
	case env != "":
		v := strings.TrimSpace(os.Getenv(env))
		if v == "" {
			return "", fmt.Errorf("%s_env: environment variable %s is empty or unset", name, env)
		}
		return v, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s_file: %w", name, err)
		}
		v := string(bytes.TrimSpace(b))
		if v == "" {
			return "", fmt.Errorf("%s_file: %s is empty", name, file)
		}
		return v, nil
	}
	return "", nil
}

// resolve reads the secrets, fills defaults and checks the options.
func (o *Options) resolve() error {
	var errs []error
	var err error
	if o.botToken, err = secret("bot_token", o.BotTokenEnv, o.BotTokenFile); err != nil {
		errs = append(errs, err)
	}
	if o.appToken, err = secret("app_token", o.AppTokenEnv, o.AppTokenFile); err != nil {
		errs = append(errs, err)
	}
	if o.signingSecret, err = secret("signing_secret", o.SigningSecretEnv, o.SigningSecretFile); err != nil {
		errs = append(errs, err)
	}
	if o.Mode == "" {
		o.Mode = ModeEvents
		if o.AppTokenEnv != "" || o.AppTokenFile != "" {
			o.Mode = ModeSocket
		}
	}
	switch {
	case o.BotTokenEnv == "" && o.BotTokenFile == "":
		errs = append(errs, errors.New("a bot token is required (bot_token_env or bot_token_file)"))
	case o.botToken != "" && !strings.HasPrefix(o.botToken, "xoxb-"):
		errs = append(errs, errors.New("the bot token must be a bot token (xoxb-…)"))
	}
	switch o.Mode {
	case ModeSocket:
		if o.AppTokenEnv == "" && o.AppTokenFile == "" {
			errs = append(errs, errors.New("socket mode needs an app-level token (app_token_env or app_token_file)"))
		} else if o.appToken != "" && !strings.HasPrefix(o.appToken, "xapp-") {
			errs = append(errs, errors.New("the app token must be an app-level token (xapp-…)"))
		}
	case ModeEvents:
		if o.SigningSecretEnv == "" && o.SigningSecretFile == "" {
			errs = append(errs, errors.New("events mode needs the signing secret (signing_secret_env or signing_secret_file)"))
		}
	default:
		errs = append(errs, fmt.Errorf("mode %q: want %q or %q", o.Mode, ModeSocket, ModeEvents))
	}
	switch o.ChannelMessages {
	case "":
		o.ChannelMessages = ChannelThreads
	case ChannelThreads, ChannelAll, ChannelNone:
	default:
		errs = append(errs, fmt.Errorf("channel_messages %q: want %q, %q or %q", o.ChannelMessages, ChannelThreads, ChannelAll, ChannelNone))
	}
	o.allowed = map[string]bool{}
	for _, c := range o.Channels {
		if c == "" {
			errs = append(errs, errors.New("channels: an empty channel id"))
		}
		o.allowed[c] = true
	}
	o.dms = o.DirectMessages == nil || *o.DirectMessages
	if o.HandledReaction == "" {
		o.HandledReaction = DefaultHandledReaction
	}
	o.HandledReaction = strings.Trim(o.HandledReaction, ":")
	if o.MaxMessageChars == 0 {
		o.MaxMessageChars = DefaultMaxMessageChars
	}
	if o.MaxMessageChars < 200 || o.MaxMessageChars > 39000 {
		errs = append(errs, fmt.Errorf("max_message_chars %d: want 200…39000", o.MaxMessageChars))
	}
	o.partInterval = DefaultPartInterval
	if o.PartInterval != "" {
		d, err := time.ParseDuration(o.PartInterval)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("part_interval %q: want a Go duration", o.PartInterval))
		}
		o.partInterval = d
	}
	if o.MaxBody, err = sources.BodyLimit(o.MaxBody); err != nil {
		errs = append(errs, err)
	}
	if o.APIURL == "" {
		o.APIURL = DefaultAPIURL
	}
	if !strings.HasSuffix(o.APIURL, "/") {
		o.APIURL += "/"
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("slack options: %w", err)
	}
	return nil
}

// channelAllowed reports whether a (non-DM) channel is on the allow-list.
func (o *Options) channelAllowed(ch string) bool { return len(o.allowed) == 0 || o.allowed[ch] }
