package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/channels-dev/channels/internal/config"
	"github.com/channels-dev/channels/taskplane/store"
)

// migrateReport is what migrate prints: the schema version the store had before (0: a new
// store) and has now.
type migrateReport struct {
	Store         string  `json:"store"`
	Driver        string  `json:"driver"`
	FromVersion   int     `json:"from_version"`
	SchemaVersion int     `json:"schema_version"`
	Seconds       float64 `json:"seconds"`
}

func (a *app) migrateCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Open the store and apply its embedded schema migrations",
		Long: `Open the store named by --store, apply every embedded migration it lacks, and report.
Opening a store always migrates it, so running this is optional; it lets an operator migrate
ahead of a deploy and see the result. Several processes migrating one Postgres database at once
serialize on a lock; the SQLite store refuses a second process.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			start := time.Now()
			ctx, cancel := context.WithTimeout(cmd.Context(), storeOpenTimeout)
			defer cancel()
			if a.cfg.Store == "" {
				return fmt.Errorf("migrate: %w", config.ErrNoStore)
			}
			a.progressf("opening %s and applying migrations…\n", redactedStore(a.cfg.Store))
			before, err := store.Inspect(ctx, a.cfg.Store)
			if err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
			st, err := store.Open(ctx, a.cfg.Store)
			if err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
			// Open migrated the store to this binary's latest schema (it refuses a newer one). The
			// version it found under its migration lock is the one to report: another process
			// (a second migrate, a starting serve) may have migrated since Inspect read it.
			r := migrateReport{Store: redactedStore(a.cfg.Store), Driver: st.Capabilities().Name,
				FromVersion: before.Version, SchemaVersion: before.Latest}
			if m, ok := st.(store.Migrated); ok {
				r.FromVersion = m.MigratedFrom()
			}
			if err := st.Close(); err != nil {
				return fmt.Errorf("migrate: close store: %w", err)
			}
			r.Seconds = float64(time.Since(start).Milliseconds()) / 1000
			if asJSON {
				return json.NewEncoder(a.stdout).Encode(r)
			}
			msg := fmt.Sprintf("store %s (%s): schema migrated from version %d to %d", r.Store, r.Driver, r.FromVersion, r.SchemaVersion)
			if r.FromVersion == r.SchemaVersion {
				msg = fmt.Sprintf("store %s (%s): schema already at version %d, nothing to apply", r.Store, r.Driver, r.SchemaVersion)
			}
			_, err = fmt.Fprintln(a.stdout, msg)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
