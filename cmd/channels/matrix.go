package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	matrix "github.com/channels-dev/channels/conformance-matrix"
)

func (a *app) matrixCmd() *cobra.Command {
	var (
		check bool
		out   string
	)
	cmd := &cobra.Command{
		Use:   "matrix",
		Short: "Render docs/a2a-source-conformance.md from the conformance matrix",
		Long: `Render the source conformance document from conformance-matrix/matrix.yaml (as built into
this binary) to --out, by default docs/a2a-source-conformance.md under the current directory (run
it from the repository root). With --check nothing is written: the command exits non-zero when the
file differs from what the matrix renders, which is how CI catches a stale document.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := matrix.Default()
			if err != nil {
				return err
			}
			if check {
				if err := matrix.Check(m, out); err != nil {
					if errors.Is(err, matrix.ErrStale) {
						return fmt.Errorf("%w; run `channels matrix --out %s` and commit it", err, out)
					}
					return err
				}
				_, err := fmt.Fprintf(a.stdout, "%s is current\n", out)
				return err
			}
			if err := matrix.Write(m, out); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "wrote %s (%d sources)\n", out, len(m.Sources))
			return err
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "exit non-zero if the document is stale; write nothing")
	cmd.Flags().StringVar(&out, "out", matrix.DocPath, "the document to write or check")
	return cmd
}
