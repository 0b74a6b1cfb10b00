package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/channels-dev/channels/internal/config"
	"github.com/channels-dev/channels/internal/redact"
	_ "github.com/channels-dev/channels/taskplane/store/postgres" // postgres:// stores
	_ "github.com/channels-dev/channels/taskplane/store/sqlite"   // sqlite:// stores
)

// env is what a command sees of the process: its output streams and its environment.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	environ        []string
}

// app is the state shared by the commands of one invocation.
type app struct {
	env
	cfg *config.Loaded
	log *slog.Logger
}

// run executes the command line args and returns the process exit code.
func run(ctx context.Context, args []string, e env) int {
	a := &app{env: e}
	defer keepDefaultLogger()()
	root := a.rootCmd()
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		var se silentError
		if !errors.As(err, &se) {
			fmt.Fprintln(e.stderr, "channels:", terminalLines(err.Error()))
		}
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		var ec exitCoder
		if errors.As(err, &ec) {
			return ec.ExitCode()
		}
		return 1
	}
	return 0
}

// keepDefaultLogger records slog's package default and the log package's output, which load
// replaces with the command's logger, and returns what restores them (for tests, which run
// several commands in one process).
func keepDefaultLogger() (restore func()) {
	l, w, flags, prefix := slog.Default(), log.Writer(), log.Flags(), log.Prefix()
	return func() {
		slog.SetDefault(l)
		log.SetOutput(w)
		log.SetFlags(flags)
		log.SetPrefix(prefix)
	}
}

// noConfig, as a command annotation, marks a command that reads no configuration (a broken config
// file must not stop "channels version").
const noConfig = "channels/no-config"

// runsSources, as a command annotation, marks a command that runs the configured sources ("channels
// serve"): it loads the configuration with the secrets of the sources' options resolved. Every
// other command leaves them unresolved, so it works from a shell that does not hold them.
const runsSources = "channels/runs-sources"

// usageError is a mistake on the command line (exit code 2).
type usageError struct{ error }

// exitCoder is an error that chooses its exit code (3 for "not found"; see tasks get).
type exitCoder interface{ ExitCode() int }

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "channels",
		Short: "Channels connects the places people talk to agents through one durable A2A task plane",
		Long: `Channels connects the places where people already talk to agents, through one
durable A2A v1 task plane.

Settings come from flags, CHANNELS_<KEY> environment variables and a YAML config file, in that
order of precedence; every flag of "serve" is also a config key (dashes become underscores).

Exit status: 0 success, 1 failure (the message says why), 2 a usage mistake, 3 not found
(tasks get). Every reading command takes --json.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.load(cmd)
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().String("config", "", "YAML config file (default $XDG_CONFIG_HOME/channels/channels.yaml when it exists; env CHANNELS_CONFIG)")
	config.AddFlags(root.PersistentFlags(), "store")
	root.AddCommand(a.serveCmd(), a.migrateCmd(), a.versionCmd(), a.benchCmd(), a.matrixCmd(), a.sourcesCmd(),
		a.deliveriesCmd(), a.evidenceCmd(), a.tasksCmd(), a.configCmd())
	// Before the completion command, which captures where to write its script when it is added.
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.InitDefaultCompletionCmd() // cobra adds it when run; here, so usageArgs sees it too
	// Completion scripts read no configuration: a broken config file must not break them.
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			markNoConfig(c, "prints a shell completion script")
		}
	}
	root.SetHelpCommand(helpCmd())
	usageArgs(root)
	return root
}

// helpCmd is "channels help [command]": cobra's own prints the root's help for an unknown topic
// and exits 0; this one makes that a usage error, as "channels foo" is.
func helpCmd() *cobra.Command {
	return &cobra.Command{
		Use:         "help [command]",
		Short:       "Help about any command",
		Annotations: map[string]string{noConfig: "prints help"},
		ValidArgsFunction: func(c *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cmd, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []cobra.Completion
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() || sub == c {
					names = append(names, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return usageError{fmt.Errorf("unknown help topic %q; see %s --help", strings.Join(args, " "), c.Root().Name())}
			}
			cmd.InitDefaultHelpFlag()
			cmd.InitDefaultVersionFlag()
			return cmd.Help()
		},
	}
}

// usageArgs makes every mistake in the positional arguments of cmd and its subcommands a usage
// error (exit 2), as a flag mistake is: an argument count a command's Args refuses ("tasks get"
// without an id, "evidence extra") and an unknown subcommand of a command group ("channels foo",
// "channels tasks foo"). Cobra reports those with plain errors, which would exit 1.
//
// A group (a command with subcommands and no action of its own) is given one: called alone, it
// prints its help to stderr and is a usage error, a missing argument ("channels tasks"); the root
// alone prints its help and exits 0. Being runnable is what makes cobra check its arguments, and it reads no
// configuration, so a broken config file does not stop "channels --help".
func usageArgs(cmd *cobra.Command) {
	switch check := cmd.Args; {
	case cmd.HasSubCommands() && !cmd.Runnable():
		cmd.Args = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
			if c.SuggestionsMinimumDistance <= 0 {
				c.SuggestionsMinimumDistance = 2
			}
			if s := c.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
			}
			return usageError{fmt.Errorf("%s; see %s --help", msg, c.CommandPath())}
		}
		cmd.RunE = func(c *cobra.Command, _ []string) error {
			if !c.HasParent() {
				return c.Help() // "channels" alone: what it is, and its commands
			}
			// A group alone is a missing argument: its help on stderr, then the usage error.
			c.SetOut(c.ErrOrStderr())
			if err := c.Help(); err != nil {
				return err
			}
			var names []string
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			return usageError{fmt.Errorf("%s needs a command: one of %s", c.CommandPath(), strings.Join(names, ", "))}
		}
		if cmd.Annotations == nil {
			cmd.Annotations = map[string]string{}
		}
		cmd.Annotations[noConfig] = "a command group: prints its help"
	case check != nil:
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return usageError{fmt.Errorf("%w (usage: %s)", err, c.UseLine())}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		usageArgs(sub)
	}
}

// markNoConfig marks cmd and its subcommands as reading no configuration.
func markNoConfig(cmd *cobra.Command, why string) {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[noConfig] = why
	for _, sub := range cmd.Commands() {
		markNoConfig(sub, why)
	}
}

// load reads the configuration for cmd and sets up the logger. Cobra's hidden __complete
// command (which the completion scripts call, created only when run) reads none either: no
// completion needs it.
func (a *app) load(cmd *cobra.Command) error {
	if cmd.Annotations[noConfig] != "" || cmd.Name() == cobra.ShellCompRequestCmd {
		return nil
	}
	path, _ := cmd.Flags().GetString("config")
	if path == "" {
		path = a.getenv("CHANNELS_CONFIG")
	}
	if path == "" {
		path = config.DefaultPath()
	}
	load := config.LoadWithoutSourceSecrets
	if cmd.Annotations[runsSources] != "" {
		load = config.Load
	}
	cfg, err := load(path, cmd.Flags(), a.getenv, a.environ)
	if err != nil {
		return err
	}
	a.cfg = cfg
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	a.log = slog.New(slog.NewJSONHandler(a.stderr, &slog.HandlerOptions{Level: level}))
	// The parts that log through slog's package default (the sources' host, the Slack source,
	// the Postgres store's clock and hints, the log package) follow log_level and the JSON
	// format too; run restores the previous default when the command returns.
	slog.SetDefault(a.log)
	for _, w := range cfg.Warnings {
		a.log.Warn(w)
	}
	return nil
}

// redactedStore is the store URL safe to print: every password in it hidden (redact.Password).
func redactedStore(raw string) string { return redact.Password(raw) }
