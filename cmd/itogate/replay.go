package main

import (
	"encoding/json"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/replay"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/policies"
)

func newReplayCmd(stdout io.Writer) *cobra.Command {
	var bundleDir, logPath string
	var jsonOut, failOnFlip bool
	var deadline time.Duration
	cmd := &cobra.Command{
		Use:   "replay --decisions LOG [--bundle DIR]",
		Short: "Re-evaluate logged decisions against a candidate bundle and report what would flip",
		Long: `Re-evaluate every decision in a decision log (its recorded input and "now")
against a candidate bundle directory (default: the embedded bundle) and report
each decision whose outcome or codes would change, grouped by code: the
impact of a policy change before it ships. Decisions made before the policy
ran (bad signature, unknown confirmation) are skipped; so are decisions whose
input lost facts to the mask or the guard (a manifest that held a
credential), counted apart: without those facts any bundle would decide
differently. Warnings are compared too. --bundle is the directory holding
ito/ (e.g. policies). Exit status: 0 replayed, 1 with --fail-on-flip when
anything flips, 4 bad input (a flag, a refused log or bundle directory, a
bundle that does not compile), 3 any other failure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			bundle := policies.Bundle()
			if bundleDir != "" {
				if bundle, err = bundleDirFS(bundleDir); err != nil {
					return badInput(err)
				}
			}
			engine, err := policy.New(cmd.Context(), policy.Options{Bundle: bundle, Deadline: deadline})
			if err != nil {
				return badInput(err) // the --bundle given does not compile
			}
			f, err := safefile.Open(logPath)
			if err != nil {
				return err
			}
			defer f.Close()
			events, err := decisionlog.Read(f)
			if err != nil {
				return badInput(err)
			}
			// the candidate's own training facts, never the logged ones
			r := replay.Run(cmd.Context(), admission.OwnFacts(engine), events)
			if jsonOut {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else {
				r.Print(stdout)
			}
			if failOnFlip && len(r.Flips) > 0 {
				return exitError{exitReplayFlip}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&logPath, "decisions", "", "decision log (JSON lines, as itogate serve writes it)")
	cmd.Flags().StringVar(&bundleDir, "bundle", "", "candidate bundle directory (default: the embedded bundle)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&failOnFlip, "fail-on-flip", false, "exit 1 when any decision flips (for CI)")
	cmd.Flags().DurationVar(&deadline, "deadline", policy.DefaultDeadline,
		"bound on one evaluation; past it the decision is reported as an evaluation error (the server's default)")
	readsFile(cmd.Flags(), "decisions")
	annotate(cmd.Flags(), "bundle", valueReadsDir)
	_ = cmd.MarkFlagRequired("decisions")
	return cmd
}
