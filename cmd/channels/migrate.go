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

// schemaVersioner is implemented by drivers that can report their applied schema version.
type schemaVersioner interface {
	SchemaVersion(ctx context.Context) (int, error)
}

// migrateReport is what migrate prints.
type migrateReport struct {
	Store         string  `json:"store"`
	Driver        string  `json:"driver"`
	SchemaVersion int     `json:"schema_version,omitempty"`
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
			st, err := store.Open(ctx, a.cfg.Store)
			if err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
			r := migrateReport{Store: redactedStore(a.cfg.Store), Driver: st.Capabilities().Name}
			if sv, ok := st.(schemaVersioner); ok {
				if r.SchemaVersion, err = sv.SchemaVersion(ctx); err != nil {
					_ = st.Close()
					return fmt.Errorf("migrate: read schema version: %w", err)
				}
			}
			if err := st.Close(); err != nil {
				return fmt.Errorf("migrate: close store: %w", err)
			}
			r.Seconds = float64(time.Since(start).Milliseconds()) / 1000
			if asJSON {
				return json.NewEncoder(a.stdout).Encode(r)
			}
			msg := fmt.Sprintf("store %s (%s): migrations applied, schema is current", r.Store, r.Driver)
			if r.SchemaVersion > 0 {
				msg += fmt.Sprintf(" at version %d", r.SchemaVersion)
			}
			_, err = fmt.Fprintln(a.stdout, msg)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
