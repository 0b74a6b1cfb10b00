package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	matrix "github.com/channels-dev/channels/conformance-matrix"
	"github.com/channels-dev/channels/internal/config"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane/store"
)

// configReport is what `channels config check` prints. It holds no secret values: settings are
// redacted and source options are not printed.
type configReport struct {
	Valid    bool              `json:"valid"`
	File     string            `json:"file"`
	Errors   []string          `json:"errors"`
	Warnings []string          `json:"warnings"`
	Sources  []configSource    `json:"sources"`
	Settings map[string]string `json:"settings,omitempty"`
}

type configSource struct {
	Type      string `json:"type"`
	Name      string `json:"name"`
	Principal string `json:"principal"`
}

// errInvalidConfig is the error of a failed check (exit code 1): the report already said why.
var errInvalidConfig = errors.New("the configuration has problems")

func (a *app) configCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check the configuration",
	}
	cmd.AddCommand(a.configCheckCmd())
	return cmd
}

func (a *app) configCheckCmd() *cobra.Command {
	var asJSON, connect bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Validate the configuration: keys, values, secrets, URLs and every configured source",
		Long: `Load the configuration the way "channels serve" does (the config file, CHANNELS_*
variables, --store and every flag of serve) and report every problem with what to fix: unknown keys, values of the
wrong kind, secrets written in the file or whose environment variable or file is missing, bad
URLs, a listener off loopback without credentials, source instances that are unknown, named
twice, or whose options their source refuses, and everything else serve builds before it opens
the store, built the same way: the executor (agent_token_env unset, an agent URL refused), the
credentials, the worker tokens and the workflow manifest (unreadable or invalid). --connect also
checks that the store can be reached, without creating, locking or migrating it: a SQLite file
that does not exist yet, or a schema serve will migrate, is a warning.

Secret values are never printed.

Exit status: 0 when the configuration is valid (warnings allowed), 1 when it is not, 2 on a
usage mistake.`,
		Example: `  channels config check
  channels config check --config /etc/channels/channels.yaml --connect
  channels config check --listen 0.0.0.0:8788 --credentials /etc/channels/credentials.json --admin-token-file /etc/channels/admin_token
  channels config check --json | jq -r '.errors[]'`,
		Annotations: map[string]string{noConfig: "loads it itself, to report its problems"},
		Args:        cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := a.checkConfig(cmd, connect)
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else {
				a.printConfigReport(r)
			}
			if !r.Valid {
				return silentError{errInvalidConfig}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	// serve's flags, so that a serve command line is checked as serve reads it (a plain
	// --admin-token is reported as serve logs it).
	config.AddFlags(cmd.Flags(), serveFlagKeys()...)
	cmd.Flags().BoolVar(&connect, "connect", false, "also check that the store can be reached, changing nothing (a SQLite store held by a running server is reported, not an error)")
	return cmd
}

// checkConfig loads and checks the configuration, collecting every problem.
func (a *app) checkConfig(cmd *cobra.Command, connect bool) configReport {
	r := configReport{Errors: []string{}, Warnings: []string{}, Sources: []configSource{}}
	path, _ := cmd.Flags().GetString("config")
	if path == "" {
		path = a.getenv("CHANNELS_CONFIG")
	}
	if path == "" {
		path = config.DefaultPath()
	}
	r.File = path
	cfg, err := config.LoadAll(path, cmd.Flags(), a.getenv, a.environ)
	if cfg == nil {
		r.Errors = append(r.Errors, splitErrors(err)...)
		return r
	}
	// With problems in the file or its values, the checks below still run on what loaded, so
	// every problem is reported at once; a check whose input was already found wrong is skipped.
	partial := err != nil
	if partial {
		r.Errors = append(r.Errors, splitErrors(err)...)
	}
	r.Warnings = append(r.Warnings, cfg.Warnings...)
	r.Settings = cfg.Redacted()
	for _, s := range cfg.Sources {
		r.Sources = append(r.Sources, configSource{Type: s.Type, Name: s.Name, Principal: s.Principal})
	}

	// What serve would refuse.
	if cfg.Store == "" {
		r.Errors = append(r.Errors, config.ErrNoStore.Error())
	} else if u, err := url.Parse(cfg.Store); err == nil && u.Scheme != "" {
		// What the driver refuses in the URL's form (a SQLite path with '?'); reaching the
		// store is --connect's.
		if err := store.CheckURL(cfg.Store); err != nil {
			r.Errors = append(r.Errors, err.Error())
		}
	}
	if err := checkListen(cfg.Config); err != nil {
		if _, _, perr := net.SplitHostPort(cfg.Listen); perr == nil {
			r.Errors = append(r.Errors, err.Error())
		}
	}
	// The executor, the workflow manifest, the worker tokens and the credentials, built as serve
	// builds them (without the executor when its settings are already reported wrong).
	parts := cfg.Config
	if len(cfg.ExecutorProblems()) > 0 {
		parts.Executor = "echo"
	}
	if _, err := buildServeParts(parts, a.getenv, slog.New(slog.DiscardHandler)); err != nil {
		r.Errors = append(r.Errors, splitErrors(err)...)
	}
	r.Errors = append(r.Errors, checkSources(cfg.Sources, r.Errors, &r.Warnings)...)

	// What serve would accept but an operator likely did not mean. (A listen address reported
	// wrong already, one without a port, is no more "not loopback" than it is loopback.)
	listenWrong := slices.ContainsFunc(r.Errors, func(e string) bool { return strings.Contains(e, `listen "`) })
	if !cfg.ListensOnLoopback() && !listenWrong {
		// An admin_token_file or admin_token_env that does not resolve is an error already.
		if cfg.AdminToken == "" && !slices.ContainsFunc(r.Errors, func(e string) bool { return strings.Contains(e, "admin_token") }) {
			r.Warnings = append(r.Warnings, fmt.Sprintf("listen %s is not loopback and admin_token is unset: /admin and /admin/api will refuse every request (set admin_token_env or admin_token_file)", cfg.Listen))
		}
		if cfg.AllowAnonymous {
			r.Warnings = append(r.Warnings, "allow_anonymous is true off loopback: anyone who reaches the port can create tasks")
		}
	}
	r.Warnings = append(r.Warnings, operatorAccessWarnings(&cfg.Config)...)
	if cfg.AdminToken != "" && len(cfg.AdminToken) < 16 {
		r.Warnings = append(r.Warnings, "admin_token is shorter than 16 characters: use a long random token (openssl rand -hex 32)")
	}

	if connect && len(r.Errors) == 0 {
		checkStoreReachable(cmd.Context(), cfg.Store, &r)
	}
	r.Valid = len(r.Errors) == 0
	return r
}

// checkStoreReachable adds to r what --connect finds of the store: that it can be reached, and
// what serve will do with it. It creates, locks and migrates nothing (store.Inspect): a check of a
// store that does not exist yet leaves none behind.
func checkStoreReachable(ctx context.Context, rawURL string, r *configReport) {
	ctx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	defer cancel()
	in, err := store.Inspect(ctx, rawURL)
	where := redactedStore(rawURL)
	switch {
	case errors.Is(err, store.ErrInUse):
		r.Warnings = append(r.Warnings, "store: in use by another process (a running channels serve holds this SQLite store)")
	case err != nil:
		// On one line: a driver's error may hold several (pgx lists each address it tried).
		r.Errors = append(r.Errors, "store: "+strings.Join(strings.Fields(err.Error()), " "))
	case !in.Exists:
		r.Warnings = append(r.Warnings, fmt.Sprintf("store: %s does not exist yet: serve will create a new, empty store there", where))
	case in.Version > in.Latest:
		r.Errors = append(r.Errors, fmt.Sprintf("store: %s has schema version %d, newer than this binary's %d: serve refuses it (run the newer channels, or restore a backup)", where, in.Version, in.Latest))
	case in.Version == 0:
		r.Warnings = append(r.Warnings, fmt.Sprintf("store: %s has no schema yet: serve will create it", where))
	case in.Version < in.Latest:
		r.Warnings = append(r.Warnings, fmt.Sprintf("store: %s has schema version %d, older than this binary's %d: serve will migrate it", where, in.Version, in.Latest))
	}
}

// checkSources builds every configured instance the way serve does, so an unknown source or
// options its source refuses are reported now.
// An instance the loader already reported a problem of (in reported) is not built: it would
// report the same problem again.
func checkSources(list []config.SourceConfig, reported []string, warnings *[]string) []string {
	var errs []string
	registered := sources.Names()
	var (
		names []string
		built []sources.Source
	)
	for i, s := range list {
		where := fmt.Sprintf("%s[%d] (%s)", config.SourcesKey, i, s.Label())
		if s.Type == "" || slices.ContainsFunc(reported, func(e string) bool { return strings.Contains(e, where+":") }) {
			continue // reported by the loader
		}
		if !slices.Contains(registered, s.Type) {
			errs = append(errs, fmt.Sprintf("%s: no source %q is registered in this binary: want one of %s", where, s.Type, strings.Join(registered, ", ")))
			continue
		}
		src, err := sources.New(s.Type, sources.Config{Instance: s.Name, Principal: s.Principal, Options: s.Options})
		if err != nil {
			for _, line := range splitErrors(err) {
				errs = append(errs, fmt.Sprintf("%s: %s", where, line))
			}
		} else {
			names, built = append(names, s.Name), append(built, src)
		}
		if row, ok, err := matrix.Find(s.Type); err == nil && ok && row.Status != matrix.Built {
			*warnings = append(*warnings, fmt.Sprintf("%s: the conformance matrix lists %s as %s", where, s.Type, row.Status))
		}
	}
	if err := sources.CheckKeys(names, built); err != nil {
		errs = append(errs, splitErrors(err)...)
	}
	return errs
}

// splitErrors turns a joined error into its lines.
func splitErrors(err error) []string {
	var out []string
	for _, line := range strings.Split(err.Error(), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}

func (a *app) printConfigReport(r configReport) {
	file := r.File
	if file == "" {
		file = "none (defaults, environment and flags only)"
	}
	fmt.Fprintf(a.stdout, "config file: %s\n", file)
	if len(r.Sources) > 0 {
		fmt.Fprintf(a.stdout, "sources: ")
		for i, s := range r.Sources {
			if i > 0 {
				fmt.Fprint(a.stdout, ", ")
			}
			fmt.Fprintf(a.stdout, "%s %s (principal %s)", s.Type, s.Name, s.Principal)
		}
		fmt.Fprintln(a.stdout)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(a.stdout, "error: %s\n", e)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(a.stdout, "warning: %s\n", w)
	}
	if r.Valid {
		fmt.Fprintf(a.stdout, "ok: the configuration is valid (%s)\n", count(len(r.Warnings), "warning"))
	} else {
		fmt.Fprintf(a.stdout, "invalid: %s, %s\n", count(len(r.Errors), "error"), count(len(r.Warnings), "warning"))
	}
}

// count is n and noun, plural unless n is 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// silentError fails a command whose output already explained the failure: run prints nothing
// more and exits 1.
type silentError struct{ error }
