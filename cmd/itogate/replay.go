package main

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/replay"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/policies"
)

// replayDeadline is replay's default bound on one evaluation: forty times
// the server's policy.DefaultDeadline. The server's bound keeps a runaway
// bundle from holding admissions on a loaded server; replay runs offline
// and compares decisions, so a busy machine must not turn them into
// timeouts (a timeout is also retried once, replay.Retries). --deadline
// 250ms checks the candidate against the server's default bound.
const replayDeadline = 10 * time.Second

func newReplayCmd(stdout, stderr io.Writer) *cobra.Command {
	var bundlePath, logPath string
	var jsonOut, failOnFlip bool
	var deadline time.Duration
	var keys bundleKeyFlags
	cmd := &cobra.Command{
		Use:   "replay --decisions LOG [--bundle DIR|ARCHIVE.tar.gz]",
		Short: "Re-evaluate logged decisions against a candidate bundle and report what would flip",
		Long: `Re-evaluate every decision in a decision log (its recorded input and "now")
against a candidate bundle (default: the embedded bundle) and report each
decision whose outcome or codes would change, grouped by code: the impact of
a policy change before it ships. The candidate's training facts are computed
from its own tables, never taken from the log.

--bundle is a bundle directory (the one holding ito/, e.g. policies) or a
signed bundle archive, the .tar.gz itogate serve activates: the archive is
verified exactly as the server verifies it before activation (limits,
entries, the signature with --verification-key/--key-id, default the
PUBLISHED development key; the .manifest) and compiled as activation
compiles it; a refused archive exits 4 naming the reason ("bundle:
signature: ...", "bundle: unsigned: ...").

Decisions made before the policy ran (bad signature, unknown confirmation)
are skipped; so are decisions whose input lost facts to the mask or the
guard (a manifest that held a credential), counted apart: without those
facts any bundle would decide differently. Warnings are compared too.

An evaluation that produced no decision is never a flip: a candidate's
evaluation error (POLICY_TIMEOUT, POLICY_EVALUATION_FAILED, ...) and a
logged decision the server could not make (it answered POLICY_TIMEOUT and
logged no input) are counted and listed apart. Each evaluation is bounded
by --deadline, 10s by default — not the server's 250ms, so a loaded machine
does not make timeouts — and a timeout is retried once.

Exit status: 0 replayed (every decision evaluated; flips without
--fail-on-flip), 1 with --fail-on-flip when anything flips, 5 when the
candidate could not evaluate a decision, 4 bad input (a flag, a refused log,
bundle directory or archive, a bundle that does not compile), 3 any other
failure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			engine, err := replayEngine(cmd, bundlePath, &keys, deadline, stderr)
			if err != nil {
				return err
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
			switch {
			case len(r.Errors) > 0:
				return exitError{exitReplayUnevaluated}
			case failOnFlip && len(r.Flips) > 0:
				return exitError{exitReplayFlip}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&logPath, "decisions", "", "decision log (JSON lines, as itogate serve writes it)")
	cmd.Flags().StringVar(&bundlePath, "bundle", "", "candidate bundle: a directory holding ito/, or a signed bundle archive (default: the embedded bundle)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&failOnFlip, "fail-on-flip", false, "exit 1 when any decision flips (for CI)")
	cmd.Flags().DurationVar(&deadline, "deadline", replayDeadline,
		"bound on one evaluation, replay's own (the server's is 250ms); past it, and past one retry, the decision is reported as not evaluated")
	keys.register(cmd.Flags())
	readsFile(cmd.Flags(), "decisions")
	annotate(cmd.Flags(), "bundle", valueReadsDir)
	_ = cmd.MarkFlagRequired("decisions")
	return cmd
}

// replayEngine is the candidate of --bundle: the embedded bundle, a bundle
// directory, or a signed archive verified and activated as the server
// does. Every refusal is bad input.
func replayEngine(cmd *cobra.Command, path string, keys *bundleKeyFlags, deadline time.Duration, stderr io.Writer) (*policy.Engine, error) {
	var fsys fs.FS = policies.Bundle()
	if path != "" {
		// Lstat: a link is not followed here; the safe readers refuse it.
		if st, err := os.Lstat(path); err == nil && st.Mode().IsRegular() {
			v, _, err := keys.verifier(stderr)
			if err != nil {
				return nil, err
			}
			b, err := verifiedBundle(v, path)
			if err != nil {
				return nil, badInput(err)
			}
			engine, err := activatedEngine(cmd.Context(), b, 0, deadline, time.Now())
			return engine, badInput(err)
		}
		var err error
		if fsys, err = bundleDirFS(path); err != nil {
			return nil, badInput(err)
		}
	}
	if keys.keyFile != "" || keys.keyID != "" {
		return nil, badInput(errors.New("--verification-key and --key-id verify a bundle archive; --bundle is not one"))
	}
	engine, err := policy.New(cmd.Context(), policy.Options{Bundle: fsys, Deadline: deadline})
	return engine, badInput(err) // a bundle that does not compile
}
