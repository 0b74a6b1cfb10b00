package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/channels-dev/channels/internal/suggest"
)

// SourcesKey is the config-file key of the source list. It is the one key without a flag or an
// environment variable: a list of instances does not fit on a command line.
const SourcesKey = "sources"

// SourceConfig is one configured source instance, an entry of the sources list:
//
//	sources:
//	  - type: webhook          # the registered source (channels sources lists them)
//	    name: ci               # the instance: /sources/webhook/ci
//	    principal: ci-team     # owns every task the instance accepts
//	    options:               # the source's own settings
//	      secret_env: CI_WEBHOOK_SECRET
//	      identity: event.id
//
// Secrets in options follow the rule of the whole file: a plain value is refused, a reference
// (…_env naming an environment variable, …_file naming a file) is checked when the file loads —
// except by LoadWithoutSourceSecrets, for the commands that run no source.
type SourceConfig struct {
	Type      string         `yaml:"type" json:"type"`
	Name      string         `yaml:"name" json:"name"`
	Principal string         `yaml:"principal" json:"principal"`
	Options   map[string]any `yaml:"options" json:"options,omitempty"`
}

// sourceFields are the keys of an entry of the sources list.
var sourceFields = []string{"type", "name", "principal", "options"}

// Label names the instance in messages: "webhook ci".
func (s SourceConfig) Label() string { return strings.TrimSpace(s.Type + " " + s.Name) }

// instanceName is what a source instance may be called: it becomes a URL path segment.
var instanceName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// secretOption reports whether an option key names a secret by its own name (secret, token,
// password, or a key ending in one of them), which must then be given by reference.
func secretOption(key string) bool {
	k := strings.ToLower(key)
	for _, s := range []string{"secret", "token", "password", "passwd", "private_key", "api_key"} {
		if k == s || strings.HasSuffix(k, "_"+s) {
			return true
		}
	}
	return false
}

// loadSources decodes the sources list and checks the secrets its options reference.
func (l *Loaded) loadSources(path string, node *yaml.Node, getenv func(string) string) error {
	// A misspelt "principle:" is an error, not a silent zero. The fields are checked on the
	// file's own nodes, so the error names the file's line.
	var errs []error
	if node.Kind == yaml.SequenceNode {
		for i, item := range node.Content {
			if item.Kind != yaml.MappingNode {
				continue // Decode below says what is wrong with it
			}
			for k := 0; k+1 < len(item.Content); k += 2 {
				if key := item.Content[k]; !slices.Contains(sourceFields, key.Value) {
					errs = append(errs, fmt.Errorf("config file %s: line %d: %s[%d]: unknown field %q (known: %s)",
						path, key.Line, SourcesKey, i, key.Value, strings.Join(sourceFields, ", ")))
				}
			}
		}
	}
	var list []SourceConfig
	seq := node
	if seq.Kind == yaml.AliasNode && seq.Alias != nil {
		seq = seq.Alias
	}
	if seq.Kind != yaml.SequenceNode && seq.ShortTag() != "!!null" {
		return fmt.Errorf("config file %s: %s: line %d: want a list of {%s}, got %s",
			path, SourcesKey, node.Line, strings.Join(sourceFields, ", "), gotNode(node))
	}
	if err := node.Decode(&list); err != nil {
		return errors.Join(append(errs, fmt.Errorf("config file %s: %s: want a list of {%s}: %w",
			path, SourcesKey, strings.Join(sourceFields, ", "), oneLine(err)))...)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for i, s := range list {
		errs = append(errs, checkSourceSecrets(i, s, getenv, !l.skipSourceSecrets)...)
	}
	// Kept even with errors, so Validate reports the list's other problems too.
	l.Sources = list
	l.Origin[SourcesKey] = FromFile
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	return nil
}

// Suggest returns the known key closest to an unknown one (at most two edits away), or "".
func Suggest(key string) string {
	return suggest.Nearest(key, append(Keys(), SourcesKey), 2)
}

// checkSourceSecrets refuses plain secrets in an instance's options and references that name
// nothing, and, with resolve, checks that every …_env and …_file reference resolves.
func checkSourceSecrets(i int, s SourceConfig, getenv func(string) string, resolve bool) []error {
	var errs []error
	keys := make([]string, 0, len(s.Options))
	for k := range s.Options {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	where := fmt.Sprintf("%s[%d] (%s)", SourcesKey, i, s.Label())
	for _, k := range keys {
		v, isString := s.Options[k].(string)
		switch {
		case strings.HasSuffix(k, "_env"):
			if !isString || v == "" {
				errs = append(errs, fmt.Errorf("%s: option %s: want the name of an environment variable", where, k))
			} else if resolve && getenv(v) == "" {
				errs = append(errs, fmt.Errorf("%s: option %s names the environment variable %s, which is unset or empty: export it before starting channels", where, k, v))
			}
		case strings.HasSuffix(k, "_file"):
			if !isString || v == "" {
				errs = append(errs, fmt.Errorf("%s: option %s: want the path of a file", where, k))
			} else if resolve {
				if b, err := os.ReadFile(v); err != nil {
					errs = append(errs, fmt.Errorf("%s: option %s: cannot read %s: %w", where, k, v, errors.Unwrap(err)))
				} else if len(bytes.TrimSpace(b)) == 0 {
					errs = append(errs, fmt.Errorf("%s: option %s: the file %s is empty", where, k, v))
				}
			}
		case secretOption(k) && s.Options[k] != nil && s.Options[k] != "":
			errs = append(errs, fmt.Errorf("%s: option %s is a secret: give it as %s_env (an environment variable) or %s_file (a file), not as a plain value", where, k, k, k))
		}
	}
	return errs
}

// AnonymousPrincipal is the principal the A2A service gives unauthenticated callers
// (a2aservice.AnonymousPrincipal): no credential and no source may own work under it.
const AnonymousPrincipal = "anonymous"

// validateSources checks the instances' shape: what any source needs, before its own options
// are checked by the source itself (channels config check, channels serve).
func validateSources(list []SourceConfig) []error {
	var errs []error
	seen := map[string]int{}
	for i, s := range list {
		where := fmt.Sprintf("%s[%d] (%s)", SourcesKey, i, s.Label())
		if s.Type == "" {
			errs = append(errs, fmt.Errorf("%s: type is required: the registered source to run (see channels sources)", where))
		}
		switch {
		case s.Name == "":
			errs = append(errs, fmt.Errorf("%s: name is required: the instance name, unique per type (it appears in URLs and evidence)", where))
		case !instanceName.MatchString(s.Name):
			errs = append(errs, fmt.Errorf("%s: name %q: want lower-case letters, digits, '.', '_' or '-' (at most 63, starting with a letter or digit)", where, s.Name))
		}
		switch s.Principal {
		case "":
			errs = append(errs, fmt.Errorf("%s: principal is required: who owns the tasks this instance accepts", where))
		case AnonymousPrincipal:
			errs = append(errs, fmt.Errorf("%s: principal %q is reserved for unauthenticated A2A callers, who would see this instance's tasks: name another", where, AnonymousPrincipal))
		}
		key := s.Type + "/" + s.Name
		if j, dup := seen[key]; dup && s.Type != "" && s.Name != "" {
			errs = append(errs, fmt.Errorf("%s: %s %s is configured twice (also %s[%d])", where, s.Type, s.Name, SourcesKey, j))
		} else {
			seen[key] = i
		}
	}
	return errs
}
