// Command channels is the Channels daemon and its operator CLI.
//
//	channels serve                      run the A2A task plane (loopback, SQLite, echo agent by default)
//	channels migrate                    open the store and apply its migrations
//	channels version                    print the build
//	channels bench accept               measure durable acceptance throughput
//	channels bench a2a                  measure A2A SendMessage throughput (optionally against a2a-go)
//
// Every subcommand takes --config (YAML) and --store (sqlite:///path or postgres://…); every
// flag of serve is also a config key and a CHANNELS_* environment variable.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal starts a graceful shutdown; a second one, with the default handling back,
	// ends the process at once (what it holds is durable).
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], env{
		stdout:  os.Stdout,
		stderr:  os.Stderr,
		getenv:  os.Getenv,
		environ: os.Environ(),
	})
	stop()
	os.Exit(code)
}
