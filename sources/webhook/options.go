package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/channels-dev/channels/internal/redact"
	"github.com/channels-dev/channels/sources"
)

// Defaults.
const (
	DefaultMaxBody = sources.DefaultMaxBody
	DefaultWindow  = 5 * time.Minute
)

// Options configure one webhook endpoint (the options of a `type: webhook` source in the config
// file). Paths are dotted JSON paths into the body ("event.id", "items.0.text").
type Options struct {
	// Secret is the HMAC-SHA256 key; or SecretEnv names an environment variable, or SecretFile a
	// file, that holds it. It is never logged.
	Secret     string `json:"secret,omitempty"`
	SecretEnv  string `json:"secret_env,omitempty"`
	SecretFile string `json:"secret_file,omitempty"`
	// Identity is the path of the event id; a redelivery carries the same id.
	Identity string `json:"identity"`
	// Conversation are the paths whose values together name the conversation.
	Conversation []string `json:"conversation"`
	// Text is the path of the message text.
	Text string `json:"text"`
	// ReplyTo, optional, is the path of the id of a callback response this event replies to.
	ReplyTo string `json:"reply_to,omitempty"`
	// NonWork maps a path to values that mark an event as non-work (counted, never tasked).
	NonWork map[string][]string `json:"non_work,omitempty"`
	// Callback, optional, is the URL answers and questions are POSTed to (Send).
	Callback string `json:"callback,omitempty"`
	// MaxBody is the largest accepted body in bytes (0 or unset: 1 MiB; negative is refused).
	MaxBody int64 `json:"max_body,omitempty"`
	// Window is how far a request's timestamp may be from now, as a Go duration (default "5m").
	Window string `json:"window,omitempty"`

	secret []byte
	window time.Duration
}

// resolve fills defaults, reads the secret and checks the options.
func (o *Options) resolve() error {
	var errs []error
	switch {
	case o.Secret != "":
		o.secret = []byte(o.Secret)
	case o.SecretEnv != "":
		o.secret = []byte(os.Getenv(o.SecretEnv))
	case o.SecretFile != "":
		b, err := os.ReadFile(o.SecretFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("secret_file: %w", err))
		}
		o.secret = bytes.TrimSpace(b)
	}
	if len(o.secret) < 16 {
		errs = append(errs, errors.New("the secret (secret, secret_env or secret_file) must be at least 16 bytes"))
	}
	if o.Identity == "" || o.Text == "" || len(o.Conversation) == 0 {
		errs = append(errs, errors.New("identity, conversation and text paths are required"))
	}
	if o.Callback != "" {
		// The URL may hold a secret in its path or query: an error names at most its origin.
		if u, err := url.Parse(o.Callback); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("callback %s: want an absolute http or https URL", redact.Origin(o.Callback)))
		}
	}
	var err error
	if o.MaxBody, err = sources.BodyLimit(o.MaxBody); err != nil {
		errs = append(errs, err)
	}
	o.window = DefaultWindow
	if o.Window != "" {
		d, err := time.ParseDuration(o.Window)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("window %q: want a positive Go duration", o.Window))
		}
		o.window = d
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("webhook options: %w", err)
	}
	return nil
}

// parseJSON decodes a body, keeping numbers as written so ids do not lose digits.
func parseJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	// Only JSON whitespace may follow the value. (dec.More cannot tell: it is false at a stray
	// closing bracket or brace.)
	if rest := bytes.TrimLeft(b[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// lookup follows a dotted path and returns the scalar there as a string; objects, arrays, null
// and missing paths are not found.
func lookup(doc any, path string) (string, bool) {
	if path == "" {
		return "", false
	}
	cur := doc
	for _, seg := range strings.Split(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[seg]
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(c) {
				return "", false
			}
			cur = c[i]
		default:
			return "", false
		}
	}
	switch v := cur.(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	case bool:
		return strconv.FormatBool(v), true
	}
	return "", false
}

func contains(values []string, v string) bool { return slices.Contains(values, v) }

// reply writes v as a JSON answer.
func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
