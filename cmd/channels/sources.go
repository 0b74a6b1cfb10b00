package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	matrix "github.com/channels-dev/channels/conformance-matrix"
	"github.com/channels-dev/channels/sources"
	_ "github.com/channels-dev/channels/sources/all" // the native sources
)

// configuredSources maps a source name to its configured instances (the config file's sources
// list).
func (a *app) configuredSources() map[string][]string { return configuredOf(a.cfg.Sources) }

func (a *app) sourcesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "sources",
		Short: "List the sources: registered in this binary, configured, and their conformance-matrix rows",
		Long: `List every source that is registered in this binary or has a row in the conformance matrix,
with whether the configuration runs it and the row's key declarations. --json prints one JSON
object per line, one per source, with its whole matrix row.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := matrix.Default()
			if err != nil {
				return err
			}
			list := sources.List(m, a.configuredSources())
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				for _, s := range list {
					if err := enc.Encode(s); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SOURCE\tSTATUS\tREGISTERED\tCONFIGURED\tCONTINUATION\tCHECKPOINT\tRECOVERY")
			for _, s := range list {
				status, cont, cp, rec := "no matrix row", "-", "-", "-"
				if s.Row != nil {
					status, cont, cp, rec = string(s.Row.Status), s.Row.Continuation.Method, s.Row.Checkpoint.Position, s.Row.DeliveryRecovery
				}
				configured := yesNo(s.Configured)
				if s.Configured {
					configured += " (" + strings.Join(s.Instances, ", ") + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(s.Name), cell(status), yesNo(s.Registered), cell(configured),
					cell(cont), cell(cp), cell(rec))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, one source per line")
	return cmd
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
