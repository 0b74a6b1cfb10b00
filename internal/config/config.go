// Package config is the one configuration loader of Channels.
//
// Every setting is one field of Config. Its YAML key is the field's `yaml` tag, its command-line
// flag the same name with dashes (public_url → --public-url), and its environment variable
// CHANNELS_ followed by the key in upper case (CHANNELS_PUBLIC_URL). A later capability adds a
// field, never a new mechanism.
//
// Precedence, highest first: a flag given on the command line, the environment, the config file,
// the built-in default.
//
// Secrets never sit in the config file as plain values. A secret field is given in the file by
// reference: KEY_env names an environment variable that holds the value, KEY_file a file whose
// contents are the value; on the command line --KEY-file names such a file (a plain flag's value
// is visible in the process list, so --admin-token warns). The store URL is a partial secret: a plain `store:` is allowed in the
// file only when it carries no password (neither user:password@ nor a password or sslpassword
// parameter). Secrets are redacted wherever a Config is printed or
// logged.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/channels-dev/channels/internal/mediarange"
	"github.com/channels-dev/channels/internal/netguard"
	"github.com/channels-dev/channels/internal/redact"
	"github.com/channels-dev/channels/taskplane/store"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// EnvPrefix starts the environment variable of every key.
const EnvPrefix = "CHANNELS_"

// MinRetention is the shortest retention window: providers redeliver an event for hours (Slack
// retries, a webhook sender's backoff, an operator's manual redelivery), and an event whose claim
// was pruned is accepted as new work.
const MinRetention = 24 * time.Hour

// Executors lists the executors `serve` can run.
var Executors = []string{"echo", "conformance", "a2a", "worker", "exec"}

// Config holds every setting of Channels. Field tags: `yaml` is the key, `usage` the flag's help,
// `secret` marks a value that is never stored plainly in a file ("true": only by reference;
// "url": a URL whose password — userinfo, password or sslpassword parameter — is secret), or printed whole ("origin": a URL whose path and
// query may hold a key, printed as its scheme and host, and also accepted by reference).
type Config struct {
	Listen          string        `yaml:"listen" usage:"address the HTTP server listens on"`
	PublicURL       string        `yaml:"public_url" usage:"absolute base URL clients use to reach this server (default http://<listen>, with 127.0.0.1 for a listen address of all interfaces)"`
	Store           string        `yaml:"store" secret:"url" usage:"store URL: sqlite:///path/to/channels.db or postgres://user@host/db"`
	Executor        string        `yaml:"executor" usage:"agent that works tasks: echo, conformance, a2a, worker or exec (docs/executors.md)"`
	Credentials     string        `yaml:"credentials" usage:"JSON file of bearer tokens and their principals"`
	AllowAnonymous  bool          `yaml:"allow_anonymous" usage:"accept unauthenticated callers even when not listening on loopback"`
	MessageIDDedupe string        `yaml:"message_id_dedupe" usage:"whether a resent A2A messageId returns the earlier outcome: on, off, or auto (on, except with the conformance executor, whose test kit reuses its ids)"`
	BlockingTimeout time.Duration `yaml:"blocking_timeout" usage:"longest a blocking send waits before it returns the current task"`
	Retention       time.Duration `yaml:"retention" usage:"how long finished conversations and idempotency claims are kept"`
	RetentionEvery  time.Duration `yaml:"retention_interval" usage:"how often a retention pass runs"`
	Concurrency     int           `yaml:"concurrency" usage:"executor turns run at once"`
	TurnLease       time.Duration `yaml:"turn_lease" usage:"how long an executor turn lasts without a renewal (renewed every third of it): a stopped or killed process's turns are offered again after it"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" usage:"longest a graceful shutdown waits for in-flight requests"`
	TurnDrain       time.Duration `yaml:"turn_drain_timeout" usage:"how long executor turns running at a shutdown may go on to finish (within shutdown_timeout) before they are interrupted and left to run again after the restart; 0 interrupts them at once"`
	LogLevel        string        `yaml:"log_level" usage:"debug, info, warn or error"`

	AgentName        string        `yaml:"agent_name" usage:"name on the agent card"`
	AgentDescription string        `yaml:"agent_description" usage:"description on the agent card"`
	KeepAlive        time.Duration `yaml:"keep_alive" usage:"interval of SSE keep-alive comments on open streams"`
	InputModes       string        `yaml:"input_modes" usage:"media types a message's parts may have, comma-separated: types, ranges (image/*) or */* (the card's defaultInputModes; another is refused as unsupported)"`

	// Request limits of the A2A bindings; a request beyond one is refused with invalid params.
	MaxBodyBytes     int `yaml:"max_body_bytes" usage:"largest request body"`
	MaxParts         int `yaml:"max_parts" usage:"most parts in one message"`
	MaxTextBytes     int `yaml:"max_text_bytes" usage:"largest text part"`
	MaxRawBytes      int `yaml:"max_raw_bytes" usage:"largest raw (file bytes) part, decoded"`
	MaxDataBytes     int `yaml:"max_data_bytes" usage:"largest data part, JSON-encoded"`
	MaxDataDepth     int `yaml:"max_data_depth" usage:"deepest nesting of a data part or metadata object"`
	MaxMetadataBytes int `yaml:"max_metadata_bytes" usage:"largest metadata object, JSON-encoded"`
	MaxHistoryLength int `yaml:"max_history_length" usage:"most history messages a task in a response carries"`
	MaxPageBytes     int `yaml:"max_page_bytes" usage:"largest stored size of the tasks of one ListTasks page (a page holds at least one task)"`
	// Streams open at once; one past a bound is refused with RESOURCE_EXHAUSTED (HTTP 429).
	MaxStreams             int `yaml:"max_streams" usage:"most A2A streams open at once on the server"`
	MaxStreamsPerPrincipal int `yaml:"max_streams_per_principal" usage:"most A2A streams one caller may have open at once"`
	// Blocking sends waiting at once; one past a bound does not wait (it answers with the task as
	// accepted).
	MaxBlockingSends             int `yaml:"max_blocking_sends" usage:"most blocking A2A sends waiting for their task at once on the server (one more answers at once with the task as accepted)"`
	MaxBlockingSendsPerPrincipal int `yaml:"max_blocking_sends_per_principal" usage:"most blocking A2A sends of one caller waiting for their task at once"`

	// Push notifications (docs/push.md).
	PushNotifications        bool          `yaml:"push_notifications" usage:"offer A2A push notifications (the card declares pushNotifications)"`
	PushAllowPrivateNetworks bool          `yaml:"push_allow_private_networks" usage:"let webhooks use http and loopback or private addresses (development and tests only)"`
	PushTimeout              time.Duration `yaml:"push_timeout" usage:"longest one push-notification attempt may take (10s to 30s)"`

	// Operator surface (/admin, /readyz).
	AdminToken          string        `yaml:"admin_token" secret:"true" usage:"operator token for /admin and /admin/api (a Bearer token, or the password of HTTP Basic)"`
	AdminRefresh        time.Duration `yaml:"admin_refresh" usage:"how often the /admin page reloads itself (whole seconds, at least 1s; 0 = never)"`
	HealthInterval      time.Duration `yaml:"health_interval" usage:"how often each configured source's health is checked"`
	SourceFailureWindow time.Duration `yaml:"source_failure_window" usage:"how long a source may keep failing its health check before /readyz answers 503"`

	// Executors and the wake queue (docs/executors.md).
	AgentURL          string        `yaml:"agent_url" secret:"origin" usage:"base URL of the remote A2A agent (executor a2a); its card is read from /.well-known/agent-card.json"`
	AgentTokenEnv     string        `yaml:"agent_token_env" usage:"environment variable holding the bearer token sent to the remote A2A agent (executor a2a)"`
	AgentAllowPrivate bool          `yaml:"agent_allow_private" usage:"let the remote A2A agent use http and private, loopback, link-local, unique-local or CGNAT addresses, or 0.0.0.0"`
	ExecCommand       string        `yaml:"exec_command" usage:"command run once per wake (executor exec): program and arguments separated by spaces, no shell"`
	ExecTimeout       time.Duration `yaml:"exec_timeout" usage:"longest one exec command may run before its task fails"`
	ExecEnv           string        `yaml:"exec_env" usage:"environment variables the exec command also receives, comma-separated names (besides PATH, HOME, USER, LOGNAME, LANG, LC_ALL, LC_CTYPE, TZ and TMPDIR); nothing else of Channels' environment passes"`
	WorkerTokens      string        `yaml:"worker_tokens" usage:"JSON file of worker tokens for the worker API (executor worker)"`
	WorkerLease       time.Duration `yaml:"worker_lease" usage:"how long a worker's turn lasts without a call or heartbeat"`
	WorkflowManifest  string        `yaml:"workflow_manifest" usage:"YAML or JSON file declaring the workflow outputs agents may record (default: any valid name)"`
	TaskTimeout       time.Duration `yaml:"task_timeout" usage:"how long a task may stay WORKING, or wait for an answer, before it fails (timeout / no-response)"`

	// Sources are the configured source instances. They are set only in the config file (the
	// sources list): a list has no flag or environment variable.
	Sources []SourceConfig `yaml:"-"`
}

// DedupesMessageIDs reports whether a resent A2A messageId returns the earlier outcome
// (message_id_dedupe; auto is on except with the conformance executor: the A2A conformance kit
// reuses its messageIds within a run, expecting new work each time).
func (c Config) DedupesMessageIDs() bool {
	switch c.MessageIDDedupe {
	case "off":
		return false
	case "auto":
		return c.Executor != "conformance"
	}
	return true
}

// Default returns the built-in defaults. The store is SQLite under $XDG_DATA_HOME.
func Default() Config {
	return Config{
		Listen:          "127.0.0.1:8788",
		Store:           DefaultStoreURL(),
		Executor:        "echo",
		MessageIDDedupe: "auto",
		BlockingTimeout: 60 * time.Second,
		Retention:       30 * 24 * time.Hour, // at least MinRetention
		RetentionEvery:  time.Hour,
		Concurrency:     32,
		ShutdownTimeout: 30 * time.Second,
		LogLevel:        "info",

		AgentName:        "Channels",
		AgentDescription: "Channels A2A task plane",
		InputModes:       "text/plain,application/json",
		KeepAlive:        15 * time.Second,

		MaxBodyBytes:     1 << 20,
		MaxParts:         64,
		MaxTextBytes:     256 << 10,
		MaxRawBytes:      512 << 10,
		MaxDataBytes:     256 << 10,
		MaxDataDepth:     32,
		MaxMetadataBytes: 64 << 10,
		MaxHistoryLength: 100,
		MaxPageBytes:     8 << 20,

		MaxStreams:             1000,
		MaxStreamsPerPrincipal: 100,

		MaxBlockingSends:             1000,
		MaxBlockingSendsPerPrincipal: 100,

		PushNotifications: true,
		PushTimeout:       15 * time.Second,

		AdminRefresh:        30 * time.Second,
		HealthInterval:      10 * time.Second,
		SourceFailureWindow: time.Minute,

		ExecTimeout: 10 * time.Minute,
		WorkerLease: 2 * time.Minute,
		TurnLease:   time.Minute,
		TaskTimeout: 2 * time.Hour,
	}
}

// DataHome is $XDG_DATA_HOME, or ~/.local/share when it is unset or not an absolute path, or ""
// when HOME is unset too.
func DataHome() string {
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".local", "share")
}

// ConfigHome is $XDG_CONFIG_HOME, or ~/.config when it is unset or not an absolute path.
func ConfigHome() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".config")
}

// DefaultStoreURL is the SQLite database under $XDG_DATA_HOME/channels, or "" when there is no
// data home (DataHome): a store somewhere else, such as the temporary directory, would lose the
// state without a word, so a command that needs the store fails with ErrNoStore instead.
func DefaultStoreURL() string {
	d := DataHome()
	if d == "" {
		return ""
	}
	return store.SQLiteURL(filepath.Join(d, "channels", "channels.db"))
}

// ErrNoStore is the error of a command that needs the store when none is configured and the
// default has no place: neither XDG_DATA_HOME (an absolute path) nor HOME is set.
var ErrNoStore = errors.New("no store: neither XDG_DATA_HOME (an absolute path) nor HOME is set, so the default SQLite store has no place; set XDG_DATA_HOME (the store is then $XDG_DATA_HOME/channels/channels.db), or store (--store, CHANNELS_STORE or the config file)")

// DefaultPath is $XDG_CONFIG_HOME/channels/channels.yaml if that file exists, else "".
func DefaultPath() string {
	h := ConfigHome()
	if h == "" {
		return ""
	}
	p := filepath.Join(h, "channels", "channels.yaml")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return ""
}

// field describes one setting.
type field struct {
	key    string // YAML key
	index  int    // struct field index
	usage  string
	secret string // "", "true", "url" or "origin"
}

// Flag is the command-line flag name of the field.
func (f field) Flag() string { return strings.ReplaceAll(f.key, "_", "-") }

// Env is the environment variable of the field.
func (f field) Env() string { return EnvPrefix + strings.ToUpper(f.key) }

var fields = func() []field {
	t := reflect.TypeOf(Config{})
	out := make([]field, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		key := sf.Tag.Get("yaml")
		if key == "" || key == "-" {
			continue
		}
		out = append(out, field{key: key, index: i, usage: sf.Tag.Get("usage"), secret: sf.Tag.Get("secret")})
	}
	return out
}()

// Keys lists every config key, sorted.
func Keys() []string {
	out := make([]string, 0, len(fields))
	for _, f := range fields {
		out = append(out, f.key)
	}
	sort.Strings(out)
	return out
}

func lookupField(key string) (field, bool) {
	for _, f := range fields {
		if f.key == key {
			return f, true
		}
	}
	return field{}, false
}

// AddFlags registers on fs one flag per named key (all keys when none are named), with the
// defaults of Default() and the key's usage, and for a secret key also --KEY-file, a file holding
// the value: a flag's value is visible to every user of the host in the process list. Flag values
// are read back by Load, and only when the flag was given on the command line.
func AddFlags(fs *pflag.FlagSet, keys ...string) {
	def := reflect.ValueOf(Default())
	for _, f := range fields {
		if len(keys) > 0 && !contains(keys, f.key) {
			continue
		}
		usage := f.usage + " (config key " + f.key + ", env " + f.Env() + ")"
		switch f.secret {
		case "true":
			usage += "; deprecated: other users see a flag's value in the process list, use --" + f.Flag() + "-file"
		case "url":
			usage += "; with a password, use --" + f.Flag() + "-file: other users see a flag's value in the process list"
		}
		if f.secret != "" {
			fs.String(f.Flag()+"-file", "", "file holding "+f.key+", trailing newlines removed (config key "+f.key+"_file, env "+f.Env()+"_FILE)")
			_ = fs.SetAnnotation(f.Flag()+"-file", flagAnnotation, []string{f.key})
		}
		v := def.Field(f.index)
		switch v.Kind() {
		case reflect.String:
			fs.String(f.Flag(), v.String(), usage)
		case reflect.Bool:
			fs.Bool(f.Flag(), v.Bool(), usage)
		case reflect.Int:
			fs.Int(f.Flag(), int(v.Int()), usage)
		case reflect.Int64: // time.Duration
			fs.Duration(f.Flag(), time.Duration(v.Int()), usage)
		default:
			panic(fmt.Sprintf("config: field %s has unsupported kind %s", f.key, v.Kind()))
		}
		// Marks the flag as a setting, so Load never reads a command's own flag that happens to
		// share a name (bench's --concurrency).
		_ = fs.SetAnnotation(f.Flag(), flagAnnotation, []string{f.key})
	}
}

// flagAnnotation marks the flags AddFlags registered.
const flagAnnotation = "channels/config-key"

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Source says where a setting's value came from.
type Source string

// Sources of a setting, lowest precedence first.
const (
	FromDefault Source = "default"
	FromFile    Source = "file"
	FromEnv     Source = "env"
	FromFlag    Source = "flag"
)

// Loaded is a loaded configuration with where each setting came from.
type Loaded struct {
	Config
	// Path is the config file read ("" when none).
	Path string
	// Origin maps each key to the source of its value.
	Origin map[string]Source
	// Warnings are problems that did not stop loading (an unknown CHANNELS_ variable).
	Warnings []string

	// envRefs are the environment variables the file names by reference (KEY_env), which are
	// not unknown settings even when their names start with CHANNELS_.
	envRefs map[string]bool
	// skipSourceSecrets: the …_env and …_file references of the sources' options are not
	// resolved (LoadWithoutSourceSecrets).
	skipSourceSecrets bool
}

// Load builds the configuration: defaults, then the file at path ("" for none), then the
// environment (getenv, usually os.Getenv; environ, usually os.Environ, to spot unknown CHANNELS_
// variables), then the flags of fs that were set on the command line (fs may be nil). The result
// is validated, and every secret the file references is read, those of the sources' options
// included: what a command that runs the sources needs ("channels serve").
func Load(path string, fs *pflag.FlagSet, getenv func(string) string, environ []string) (*Loaded, error) {
	l, err := loadAll(path, fs, getenv, environ, false)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// LoadWithoutSourceSecrets is Load for a command that runs no source (reading the store or a
// server): the …_env and …_file references in the sources' options are not resolved, so the
// operator's shell need not hold the sources' secrets (a systemd unit keeps them in its own
// environment file). The rest of the sources list is checked as Load checks it, a plain secret
// among its options included.
func LoadWithoutSourceSecrets(path string, fs *pflag.FlagSet, getenv func(string) string, environ []string) (*Loaded, error) {
	l, err := loadAll(path, fs, getenv, environ, true)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// LoadAll is Load for a checker that reports every problem at once ("channels config check"): with
// an error in the file or in validation it also returns the configuration as far as it loaded, so
// the checks that need a loaded configuration can still run. It returns nil with the error only
// when the environment or the flags could not be read.
func LoadAll(path string, fs *pflag.FlagSet, getenv func(string) string, environ []string) (*Loaded, error) {
	return loadAll(path, fs, getenv, environ, false)
}

func loadAll(path string, fs *pflag.FlagSet, getenv func(string) string, environ []string, skipSourceSecrets bool) (*Loaded, error) {
	l := &Loaded{Config: Default(), Path: path, Origin: map[string]Source{}, envRefs: map[string]bool{},
		skipSourceSecrets: skipSourceSecrets}
	for _, f := range fields {
		l.Origin[f.key] = FromDefault
	}
	// A broken file still lets the rest load and validate, so every problem is reported at once.
	var fileErr error
	if path != "" {
		fileErr = l.loadFile(path, getenv)
	}
	if err := l.loadEnv(getenv); err != nil {
		return nil, errors.Join(fileErr, err)
	}
	if fs != nil {
		if err := l.loadFlags(fs); err != nil {
			return nil, errors.Join(fileErr, err)
		}
	}
	l.warnUnknownEnv(environ)
	if err := errors.Join(fileErr, l.Validate()); err != nil {
		return l, err
	}
	return l, nil
}

func (l *Loaded) loadFile(path string, getenv func(string) string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config file: %w", err)
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("parse config file %s: %w", path, oneLine(err))
	}
	var doc map[string]yaml.Node
	if len(root.Content) > 0 {
		top := root.Content[0]
		if top.Kind != yaml.MappingNode && top.ShortTag() != "!!null" {
			return fmt.Errorf("parse config file %s: line %d: want a mapping of keys (key: value), got %s", path, top.Line, gotNode(top))
		}
		if err := top.Decode(&doc); err != nil {
			return fmt.Errorf("parse config file %s: %w", path, oneLine(err))
		}
	}
	// A second document (after "---") would be neither applied nor checked.
	var more yaml.Node
	if err := dec.Decode(&more); err == nil && len(more.Content) > 0 {
		return fmt.Errorf("parse config file %s: line %d: a second YAML document; the configuration is one document (remove the \"---\")", path, more.Line)
	} else if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("parse config file %s: %w", path, oneLine(err))
	}
	// Every problem of the file is reported at once, so one run of "channels config check"
	// lists everything to fix.
	var errs []error
	if node, ok := doc[SourcesKey]; ok {
		if err := l.loadSources(path, &node, getenv); err != nil {
			errs = append(errs, err)
		}
		delete(doc, SourcesKey)
	}
	var unknown []string
	for key := range doc {
		if _, ok := resolveKey(key); !ok {
			unknown = append(unknown, key)
			delete(doc, key)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		for i, k := range unknown {
			if s := Suggest(k); s != "" {
				unknown[i] = fmt.Sprintf("%s (did you mean %s?)", k, s)
			}
		}
		errs = append(errs, fmt.Errorf("config file %s: unknown keys %s (known keys: %s, %s; a secret is given as KEY_env or KEY_file)",
			path, strings.Join(unknown, ", "), strings.Join(Keys(), ", "), SourcesKey))
	}
	cfg := reflect.ValueOf(&l.Config).Elem()
	set := map[string]string{} // field key → the file key that set it
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if err := l.loadKey(path, key, doc[key], cfg, set, getenv); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// loadKey sets the field of one file key.
func (l *Loaded) loadKey(path, key string, node yaml.Node, cfg reflect.Value, set map[string]string, getenv func(string) string) error {
	r, _ := resolveKey(key)
	if prev, dup := set[r.f.key]; dup {
		return fmt.Errorf("config file %s: %s and %s both set %s", path, prev, key, r.f.key)
	}
	set[r.f.key] = key
	fv := cfg.Field(r.f.index)
	switch r.via {
	case "":
		if r.f.secret == "true" {
			return fmt.Errorf("config file %s: %s is a secret: give it as %s_env (an environment variable) or %s_file (a file), not as a plain value",
				path, key, key, key)
		}
		if err := decodeNode(&node, fv); err != nil {
			return fmt.Errorf("config file %s: key %s: %w", path, key, err)
		}
		if r.f.secret == "url" && fv.Kind() == reflect.String && hasPassword(fv.String()) {
			return fmt.Errorf("config file %s: %s carries a password: move the URL to %s_env or %s_file",
				path, key, key, key)
		}
	case "env", "file":
		var ref string
		if err := node.Decode(&ref); err != nil || ref == "" {
			return fmt.Errorf("config file %s: key %s: want the name of an %s", path, key, map[string]string{"env": "environment variable", "file": "file"}[r.via])
		}
		if r.via == "env" {
			l.envRefs[ref] = true
		}
		val, err := readRef(r.via, ref, getenv)
		if err != nil {
			return fmt.Errorf("config file %s: key %s: %w", path, key, err)
		}
		if err := setString(fv, val); err != nil {
			return fmt.Errorf("config file %s: key %s: value of %s: %w", path, key, ref, err)
		}
	}
	l.Origin[r.f.key] = FromFile
	return nil
}

// resolved is a file or environment key resolved to its field.
type resolved struct {
	f   field
	via string // "", "env" or "file"
}

func resolveKey(key string) (resolved, bool) {
	if f, ok := lookupField(key); ok {
		return resolved{f: f}, true
	}
	for _, via := range []string{"env", "file"} {
		if base, ok := strings.CutSuffix(key, "_"+via); ok {
			if f, ok := lookupField(base); ok && f.secret != "" {
				return resolved{f: f, via: via}, true
			}
		}
	}
	return resolved{}, false
}

func readRef(via, ref string, getenv func(string) string) (string, error) {
	switch via {
	case "env":
		v := getenv(ref)
		if v == "" {
			return "", fmt.Errorf("environment variable %s is empty or unset", ref)
		}
		return v, nil
	default:
		b, err := os.ReadFile(ref)
		if err != nil {
			return "", fmt.Errorf("read secret file: %w", err)
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", fmt.Errorf("secret file %s is empty", ref)
		}
		return v, nil
	}
}

// loadEnv applies the CHANNELS_<KEY> variables. One set to the empty string counts as unset: it
// cannot clear a value the file sets (an empty CHANNELS_STORE must not mean "no store"); a flag
// given empty can (docs/configuration.md).
func (l *Loaded) loadEnv(getenv func(string) string) error {
	cfg := reflect.ValueOf(&l.Config).Elem()
	for _, f := range fields {
		if v := getenv(f.Env()); v != "" {
			if err := setString(cfg.Field(f.index), v); err != nil {
				return fmt.Errorf("environment %s: %w", f.Env(), err)
			}
			l.Origin[f.key] = FromEnv
			continue
		}
		if f.secret != "" {
			if ref := getenv(f.Env() + "_FILE"); ref != "" {
				v, err := readRef("file", ref, getenv)
				if err != nil {
					return fmt.Errorf("environment %s_FILE: %w", f.Env(), err)
				}
				if err := setString(cfg.Field(f.index), v); err != nil {
					return fmt.Errorf("environment %s_FILE: %w", f.Env(), err)
				}
				l.Origin[f.key] = FromEnv
			}
		}
	}
	return nil
}

// warnUnknownEnv warns of each CHANNELS_ variable in environ that is neither a setting nor a
// variable the configuration names: a KEY_env reference of the file or of a source's options,
// agent_token_env, or a name in exec_env ("store_env: CHANNELS_PG_URL" is not a typo).
func (l *Loaded) warnUnknownEnv(environ []string) {
	named := map[string]bool{l.AgentTokenEnv: true}
	for ref := range l.envRefs {
		named[ref] = true
	}
	for _, s := range l.Sources {
		for k, v := range s.Options {
			if ref, ok := v.(string); ok && strings.HasSuffix(k, "_env") {
				named[ref] = true
			}
		}
	}
	for _, name := range strings.FieldsFunc(l.ExecEnv, func(r rune) bool { return r == ',' || r == ' ' }) {
		named[name] = true
	}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(name, EnvPrefix)
		if !ok || rest == "CONFIG" || named[name] {
			continue
		}
		key := strings.ToLower(rest)
		if _, ok := lookupField(key); ok {
			continue
		}
		if base, ok := strings.CutSuffix(key, "_file"); ok {
			if f, ok := lookupField(base); ok && f.secret != "" {
				continue
			}
		}
		l.Warnings = append(l.Warnings, fmt.Sprintf("environment variable %s names no config key (ignored)", name))
	}
	sort.Strings(l.Warnings)
}

func (l *Loaded) loadFlags(fs *pflag.FlagSet) error {
	cfg := reflect.ValueOf(&l.Config).Elem()
	given := func(name string) (*pflag.Flag, bool) {
		fl := fs.Lookup(name)
		return fl, fl != nil && fl.Changed && len(fl.Annotations[flagAnnotation]) > 0
	}
	for _, f := range fields {
		fl, plain := given(f.Flag())
		ff, file := given(f.Flag() + "-file")
		if f.secret == "" {
			file = false
		}
		switch {
		case plain && file:
			return fmt.Errorf("flags --%s and --%s-file both set %s: give one", f.Flag(), f.Flag(), f.key)
		case file:
			v, err := readRef("file", ff.Value.String(), nil)
			if err != nil {
				return fmt.Errorf("flag --%s-file: %w", f.Flag(), err)
			}
			if err := setString(cfg.Field(f.index), v); err != nil {
				return fmt.Errorf("flag --%s-file: %w", f.Flag(), err)
			}
		case plain:
			v := fl.Value.String()
			if err := setString(cfg.Field(f.index), v); err != nil {
				return fmt.Errorf("flag --%s: %w", f.Flag(), err)
			}
			if f.secret == "true" || (f.secret == "url" && hasPassword(v)) {
				l.Warnings = append(l.Warnings, fmt.Sprintf("flag --%s puts a secret in the process list, where other users of the host can read it: give it as --%s-file, %s_FILE or %s_file in the config file",
					f.Flag(), f.Flag(), f.Env(), f.key))
			}
		default:
			continue
		}
		l.Origin[f.key] = FromFlag
	}
	return nil
}

var durationType = reflect.TypeOf(time.Duration(0))

// decodeNode decodes a YAML value into a field, accepting "90s"-style strings for durations. Its
// error is one line, naming the value's line, what is wanted and what was given.
func decodeNode(n *yaml.Node, v reflect.Value) error {
	if v.Type() == durationType {
		var s string
		if err := n.Decode(&s); err != nil {
			return fmt.Errorf("line %d: want a duration such as 90s or 1h, got %s", n.Line, gotNode(n))
		}
		return setString(v, s)
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		want, ok := map[reflect.Kind]string{reflect.Bool: "true or false", reflect.Int: "an integer", reflect.String: "a string"}[v.Kind()]
		if !ok {
			return oneLine(err)
		}
		return fmt.Errorf("line %d: want %s, got %s", n.Line, want, gotNode(n))
	}
	return nil
}

// gotNode says what a YAML value is, for an error that says what was wanted instead.
func gotNode(n *yaml.Node) string {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	}
	return strconv.Quote(n.Value)
}

// oneLine returns err on one line. yaml reports values it cannot decode as "yaml: unmarshal
// errors:" and then an indented line per value, and config check reports each line of an error
// as a problem of its own: the header would count as one, naming nothing.
func oneLine(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	return errors.New(strings.Join(te.Errors, "; "))
}

// setString parses s into a field of kind string, bool, int or time.Duration.
func setString(v reflect.Value, s string) error {
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("want a duration such as 90s or 1h, got %q", s)
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", s)
		}
		v.SetBool(b)
	case v.Kind() == reflect.Int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", s)
		}
		v.SetInt(int64(n))
	default:
		return fmt.Errorf("unsupported setting kind %s", v.Kind())
	}
	return nil
}

// hasPassword reports whether a URL secret carries a password: in its userinfo, in a password
// or sslpassword query parameter, or in key=value form (redact.HasPassword).
func hasPassword(raw string) bool { return redact.HasPassword(raw) }

// CheckPublicURL refuses a public_url that is not an absolute http(s) URL, or that carries a user
// or password, a query or a fragment: the agent card advertises URLs made from it (the password
// for everyone to read, and a query or fragment the bindings' paths would follow). Its errors
// never quote a password.
func CheckPublicURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("public_url %q: want an absolute http or https URL", RedactURL(raw))
	}
	switch {
	case u.User != nil:
		return fmt.Errorf("public_url: remove the user and password, as in %q: the agent card publishes the URL", withoutUserinfo(u))
	case u.RawQuery != "" || u.ForceQuery:
		return fmt.Errorf("public_url %q: must not carry a query (?…): the agent card's URLs are the base URL and a path", u.Redacted())
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return fmt.Errorf("public_url %q: must not carry a fragment (#…): the agent card's URLs are the base URL and a path", u.Redacted())
	}
	return nil
}

// withoutUserinfo is u without its user name and password, and without what public_url may
// not carry either (a query, a fragment), so the suggestion is one that is accepted.
func withoutUserinfo(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = nil, "", false, "", ""
	return c.String()
}

// minIntervals are the floors of settings that pace a loop, beyond the 1ms every duration needs:
// a keep-alive comment on every stream, a retention pass and a health check of every source
// would otherwise run back to back.
var minIntervals = map[string]time.Duration{
	"keep_alive":         time.Second,
	"retention_interval": time.Second,
	"health_interval":    100 * time.Millisecond,
}

// Validate checks every setting and reports all problems at once.
func (c *Config) Validate() error {
	var errs []error
	if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen %q: want host:port: %w", c.Listen, err))
	} else if err := checkPort(port); err != nil {
		errs = append(errs, fmt.Errorf("listen %q: %w", c.Listen, err))
	}
	if c.PublicURL != "" {
		if err := CheckPublicURL(c.PublicURL); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Store == "" && DataHome() == "" {
		// No default store: a command that needs one fails with ErrNoStore, the others run.
	} else if u, err := url.Parse(c.Store); err != nil || u.Scheme == "" {
		errs = append(errs, fmt.Errorf("store: want a URL such as sqlite:///path/channels.db or postgres://host/db"))
	}
	if c.Retention > 0 && c.Retention < MinRetention {
		errs = append(errs, fmt.Errorf("retention %s: at least %s: a shorter window forgets events' idempotency claims while providers may still redeliver them, and a redelivery would become new work", c.Retention, MinRetention))
	}
	if !contains([]string{"auto", "on", "off"}, c.MessageIDDedupe) {
		errs = append(errs, fmt.Errorf("message_id_dedupe %q: want auto, on or off", c.MessageIDDedupe))
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"blocking_timeout", c.BlockingTimeout}, {"retention", c.Retention}, {"retention_interval", c.RetentionEvery}, {"shutdown_timeout", c.ShutdownTimeout},
		{"health_interval", c.HealthInterval}, {"source_failure_window", c.SourceFailureWindow},
		{"exec_timeout", c.ExecTimeout}, {"task_timeout", c.TaskTimeout}, {"keep_alive", c.KeepAlive}} {
		// A nanosecond is positive but no interval (a ticker of task_timeout/4 would be zero);
		// some intervals are loops, for which a millisecond is no interval either.
		least := time.Millisecond
		if m, ok := minIntervals[d.key]; ok {
			least = m
		}
		if d.v < least {
			errs = append(errs, fmt.Errorf("%s must be at least %s, got %s", d.key, least, d.v))
		}
	}
	// A worker heartbeats about every third of its lease, over HTTP: under a few seconds a
	// network hiccup loses the turn. As turn_lease below.
	if c.WorkerLease < 5*time.Second {
		errs = append(errs, fmt.Errorf("worker_lease must be at least 5s, got %s", c.WorkerLease))
	}
	// A turn is renewed every third of its lease, by a write, and stops when two thirds pass
	// without one: under a few seconds a store stall of a second or two stops every running turn,
	// and a shutdown cannot give back a turn whose executor takes its 2 s to wind down.
	if c.TurnLease < 5*time.Second {
		errs = append(errs, fmt.Errorf("turn_lease must be at least 5s, got %s", c.TurnLease))
	}
	// The process exits at shutdown_timeout whatever still runs: a longer drain would be cut.
	if c.TurnDrain < 0 || c.TurnDrain >= c.ShutdownTimeout {
		errs = append(errs, fmt.Errorf("turn_drain_timeout must be at least 0 and less than shutdown_timeout (%s), got %s", c.ShutdownTimeout, c.TurnDrain))
	}
	for _, n := range []struct {
		key string
		v   int
	}{{"concurrency", c.Concurrency}, {"max_body_bytes", c.MaxBodyBytes}, {"max_parts", c.MaxParts},
		{"max_text_bytes", c.MaxTextBytes}, {"max_raw_bytes", c.MaxRawBytes}, {"max_data_bytes", c.MaxDataBytes},
		{"max_data_depth", c.MaxDataDepth}, {"max_metadata_bytes", c.MaxMetadataBytes}, {"max_history_length", c.MaxHistoryLength},
		{"max_page_bytes", c.MaxPageBytes}, {"max_streams", c.MaxStreams}, {"max_streams_per_principal", c.MaxStreamsPerPrincipal},
		{"max_blocking_sends", c.MaxBlockingSends}, {"max_blocking_sends_per_principal", c.MaxBlockingSendsPerPrincipal}} {
		if n.v < 1 {
			errs = append(errs, fmt.Errorf("%s must be at least 1, got %d", n.key, n.v))
		}
	}
	if c.PushTimeout < 10*time.Second || c.PushTimeout > 30*time.Second {
		errs = append(errs, fmt.Errorf("push_timeout must be between 10s and 30s, got %s", c.PushTimeout))
	}
	if c.AdminRefresh < 0 || (c.AdminRefresh > 0 && c.AdminRefresh < time.Second) || c.AdminRefresh%time.Second != 0 {
		errs = append(errs, fmt.Errorf("admin_refresh must be whole seconds, at least 1s (the page reloads in whole seconds), or 0 to turn the refresh off; got %s", c.AdminRefresh))
	}
	errs = append(errs, validateSources(c.Sources)...)
	errs = append(errs, c.ExecutorProblems()...)
	if c.AgentName == "" {
		errs = append(errs, errors.New("agent_name must not be empty"))
	}
	if modes, bad := mediarange.List(c.InputModes); bad != "" {
		errs = append(errs, fmt.Errorf("input_modes: %q is not a media type or range (type/subtype, type/* or */*)", bad))
	} else if len(modes) == 0 {
		errs = append(errs, errors.New("input_modes must name at least one media type"))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log_level %q: want debug, info, warn or error", c.LogLevel))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	return nil
}

// InputModeList is input_modes as a list (Validate has checked it).
func (c *Config) InputModeList() []string {
	modes, _ := mediarange.List(c.InputModes)
	return modes
}

// ExecutorProblems reports what Validate finds wrong with the executor's settings: an unknown
// executor, or one missing what it needs.
func (c *Config) ExecutorProblems() []error {
	if !contains(Executors, c.Executor) {
		return []error{fmt.Errorf("executor %q: want one of %s", c.Executor, strings.Join(Executors, ", "))}
	}
	return c.validateExecutor()
}

// validateExecutor checks that the chosen executor has what it needs.
func (c *Config) validateExecutor() []error {
	var errs []error
	switch c.Executor {
	case "a2a":
		if u, err := url.Parse(c.AgentURL); c.AgentURL == "" || err != nil || u.Host == "" {
			errs = append(errs, fmt.Errorf("executor a2a needs agent_url, the remote agent's base URL"))
		}
	case "exec":
		if strings.TrimSpace(c.ExecCommand) == "" {
			errs = append(errs, fmt.Errorf("executor exec needs exec_command"))
		}
	case "worker":
		if c.WorkerTokens == "" {
			errs = append(errs, fmt.Errorf("executor worker needs worker_tokens, a JSON file of worker tokens"))
		}
	}
	return errs
}

// EffectivePublicURL is PublicURL, or http://<listen> (loopback when listening on all interfaces).
func (c *Config) EffectivePublicURL() string {
	if c.PublicURL != "" {
		return strings.TrimRight(c.PublicURL, "/")
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return "http://" + c.Listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// checkPort checks the port of a listen address: a number from 0 (any free port) to 65535, or a
// service name; not empty, which net.Listen would take as any free port too.
func checkPort(port string) error {
	if port == "" {
		return errors.New("no port: want host:port (port 0 for any free port)")
	}
	if n, err := strconv.ParseUint(port, 10, 64); err == nil {
		if n > 65535 {
			return fmt.Errorf("port %s: want 0 to 65535 (0: any free port)", port)
		}
		return nil
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q: want a number from 0 to 65535 or a service name", port)
	}
	return nil
}

// ListensOnLoopback reports whether Listen names only a loopback address (127.0.0.0/8, ::1 or
// localhost).
func (c *Config) ListensOnLoopback() bool {
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return false
	}
	if netguard.HostName(host) == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Redacted returns the settings as key → printable value, secrets redacted: a "true" secret is
// "[redacted]" when set, a URL secret loses its password.
func (c *Config) Redacted() map[string]string {
	out := map[string]string{}
	v := reflect.ValueOf(*c)
	for _, f := range fields {
		fv := v.Field(f.index)
		var s string
		switch {
		case fv.Type() == durationType:
			s = time.Duration(fv.Int()).String()
		default:
			s = fmt.Sprint(fv.Interface())
		}
		switch f.secret {
		case "true":
			if s != "" {
				s = "[redacted]"
			}
		case "url":
			s = RedactURL(s)
		case "origin":
			if s != "" {
				s = redact.Origin(s)
			}
		}
		if f.key == "public_url" {
			s = RedactURL(s) // not a secret, but Validate refuses one with a password: do not print it
		}
		out[f.key] = s
	}
	return out
}

// RedactURL returns raw with every password replaced by "xxxxx": its userinfo's and the values of
// its password and sslpassword parameters (redact.Password); an unparsable URL is replaced whole,
// since it might hold a secret.
func RedactURL(raw string) string { return redact.Password(raw) }

// String prints the redacted settings, sorted by key.
func (c *Config) String() string {
	m := c.Redacted()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, m[k])
	}
	return b.String()
}

// LogValue logs the redacted settings, so a Config handed to slog never leaks a secret.
func (c *Config) LogValue() slog.Value {
	m := c.Redacted()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		attrs = append(attrs, slog.String(k, m[k]))
	}
	return slog.GroupValue(attrs...)
}
