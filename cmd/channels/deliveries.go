package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/channels-dev/channels/delivery"
	"github.com/channels-dev/channels/sources"
	"github.com/channels-dev/channels/taskplane/store"
)

func (a *app) deliveriesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "deliveries",
		Short: "List outbound deliveries and resolve the ambiguous, failed or stuck ones",
		Long: `Outbound deliveries are the answers, questions and handled markers Channels sends to
providers, one provider mutation per delivery ID. "list" shows them; "resolve" settles one whose
outcome the engine could not know (ambiguous), that failed, or that is stuck in sending (the
process sending it died, and no engine routing its source recovered it).

With the SQLite store these commands need the store to themselves: stop "channels serve" first
(a second process is refused). With Postgres they run beside the servers.`,
	}
	cmd.AddCommand(a.deliveriesListCmd(), a.deliveriesResolveCmd())
	return cmd
}

// openDeliveries opens the configured store and an engine without routes over it (enough to
// read and resolve; it sends nothing).
func (a *app) openDeliveries(ctx context.Context) (*delivery.Engine, store.Store, error) {
	st, err := openStoreURL(ctx, a.cfg.Store)
	if err != nil {
		return nil, nil, fmt.Errorf("deliveries: %w", err)
	}
	// An operator's --delivered on a question records its reply anchor, checked against the
	// source's matrix row like the engine does.
	eng := delivery.New(st, nil, delivery.WithLogger(a.log), delivery.WithAnchorRecorder(sources.RecordAnchorTx))
	return eng, st, nil
}

func (a *app) deliveriesListCmd() *cobra.Command {
	var (
		state, source, principal string
		limit                    int
		asJSON                   bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List deliveries, newest first",
		Long: `List deliveries, newest first, optionally only those in one state (prepared, sending,
delivered, failed, ambiguous), of one source, or of one principal. --json prints one JSON
object per line, with every field of the delivery.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if state != "" && !delivery.State(state).Valid() {
				return usageError{fmt.Errorf("--state must be one of prepared, sending, delivered, failed, ambiguous")}
			}
			if limit < 0 { // as tasks and evidence: 0 is all
				return usageError{errors.New("--limit must not be negative")}
			}
			eng, st, err := a.openDeliveries(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			recs, err := eng.List(cmd.Context(), delivery.Filter{Principal: principal, State: delivery.State(state),
				Source: source, Limit: limit})
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				for _, r := range recs {
					if err := enc.Encode(r); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPRINCIPAL\tSOURCE\tOPERATION\tSTATE\tATTEMPTS\tPROVIDER ID\tUPDATED\tLAST ERROR")
			for _, r := range recs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", cell(r.ID), cell(r.Principal), cell(r.Source), cell(r.Operation),
					cell(string(r.State)), r.Attempts, cellOrDash(r.ProviderID), r.UpdatedAt.UTC().Format(time.RFC3339), cellOrDash(cellShort(r.LastError, 60)))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only deliveries in this state")
	cmd.Flags().StringVar(&source, "source", "", "only deliveries to this source")
	cmd.Flags().StringVar(&principal, "principal", "", "only deliveries of this principal")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many (0 = all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, one delivery per line")
	return cmd
}

func (a *app) deliveriesResolveCmd() *cobra.Command {
	var (
		deliveredID, principal, note, by string
		retry, abandon, asJSON           bool
	)
	cmd := &cobra.Command{
		Use:   "resolve ID (--delivered PROVIDER_ID | --retry | --abandon)",
		Short: "Settle an ambiguous, failed or stuck delivery",
		Long: `Settle an ambiguous or failed delivery, or one stuck in sending (its lease has run out: the
process sending it died, and no engine routing its source recovered it), after checking the
provider by hand:

  --delivered PROVIDER_ID  it reached the provider as PROVIDER_ID (a question's reply anchor is
                           recorded with it)
  --retry                  it did not reach the provider: send it again, with fresh attempts (an
                           ambiguous or stuck delivery's first call may have landed: retrying one
                           the provider has sends it twice)
  --abandon                do not send it: it becomes failed

The resolution, the operator (--by, default $USER, else "operator") and --note are kept as
evidence on the delivery and in "channels evidence". The same resolution given again (abandoned
again, delivered again under the same provider ID, retried again before any attempt) changes
nothing and records nothing: it prints "already <state>" and exits 0. A delivery in sending under a live lease (an
engine is sending it), and one in any other state, is refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res := delivery.Resolution{Delivered: deliveredID, Retry: retry, Abandon: abandon, By: by, Note: note}
			n := 0
			for _, set := range []bool{deliveredID != "", retry, abandon} {
				if set {
					n++
				}
			}
			if n != 1 {
				return usageError{errors.New("give exactly one of --delivered PROVIDER_ID, --retry, --abandon")}
			}
			if res.By == "" {
				res.By = a.getenv("USER")
			}
			eng, st, err := a.openDeliveries(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			id := args[0]
			if principal == "" {
				rec, err := eng.Find(cmd.Context(), id)
				if err != nil {
					return err
				}
				principal = rec.Principal
			}
			rec, err := eng.Resolve(cmd.Context(), principal, id, res)
			// A resolution run again is no second decision: nothing is written, and it is done.
			already := errors.Is(err, delivery.ErrAlreadyResolved)
			if err != nil && !already {
				return err
			}
			if asJSON {
				return json.NewEncoder(a.stdout).Encode(rec)
			}
			state := cell(string(rec.State))
			if already {
				state = "already " + state
			}
			_, err = fmt.Fprintf(a.stdout, "delivery %s (%s, %s): %s\n", cell(rec.ID), cell(rec.Source), cell(rec.Operation), state)
			return err
		},
	}
	cmd.Flags().StringVar(&deliveredID, "delivered", "", "the provider ID under which the delivery arrived")
	cmd.Flags().BoolVar(&retry, "retry", false, "send it again")
	cmd.Flags().BoolVar(&abandon, "abandon", false, "do not send it; mark it failed")
	cmd.Flags().StringVar(&principal, "principal", "", "the delivery's principal (needed only if the ID exists under several)")
	cmd.Flags().StringVar(&note, "note", "", "why, for the evidence")
	cmd.Flags().StringVar(&by, "by", "", "who resolves it, for the evidence (default $USER, else operator)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the resolved delivery as JSON")
	return cmd
}
