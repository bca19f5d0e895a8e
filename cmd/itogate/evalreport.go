package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/client"
	"github.com/itocompute/itogate/gatekeeper/inert"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/safefile"
)

// evalReportSource is where itogate eval-report reads the report: the
// report is the post's credential, read as a bearer token is (a file,
// standard input or the environment, never an argument), and sent in the
// body, never as a bearer.
var evalReportSource = bearerSource{"report-file", "ITOGATE_EVAL_REPORT", "eval report"}

// evalReportRetryHint ends a transport failure: the same report gets the
// same answer, so posting it again is safe.
const evalReportRetryHint = "the outcome is unknown: post the same report again (it gets the same answer)"

type evalPostOptions struct {
	conn         connOptions
	runID        string
	manifestPath string
}

func newEvalReportCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &evalPostOptions{conn: connOptions{bearer: evalReportSource, retryHint: evalReportRetryHint}}
	cmd := &cobra.Command{
		Use:   "eval-report --run-id RUN --manifest FILE [--report-file FILE|-]",
		Short: "Post the eval authority's report for a run: a failing one halts it (POST /v1/runs/{run_id}/eval-reports)",
		Long: `Post an eval report of the eval authority (trust.evals) for a run directly,
as the eval authority: no request of the run's holder is needed. itogate
verifies the report as on a stage advance (bound to the run, its current
stage and manifest), judges it with the active bundle's eval gate and the
run's manifest (--manifest, the exact bytes the run was created with), and
either halts the run (a failed or missing eval: no new workload, restart or
advance; only cancel and cleanup) or records that the stage's report
passed, which meets the stage's report deadline if it has one.

The report is the post's only credential: it comes from --report-file (a
file, or - for standard input) or $ITOGATE_EVAL_REPORT, never from an
argument, and is sent in the body, not as a bearer token. Posting the same
report again is safe: it gets the same answer.

Exit status: 0 recorded (HALTED or PASSED; the same report again included),
2 refused (403/409: the report does not bind to the run's stage, manifest or
battery, or the run may take no report: RUN_HALTED, EVAL_REPORT_OVERDUE,
RUN_NOT_LIVE), 3 no such run (404), 4 bad input, 5 unavailable or no definite
answer (post it again), 6 the report does not verify (401
EVAL_REPORT_UNAUTHENTICATED), 7 the run was revoked (ENTITLEMENT_REVOKED), 1
other. With --json every outcome is one envelope on stdout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.conn.src = &secretSource{stdin: cmd.InOrStdin(), getenv: os.Getenv}
			return o.run(cmd.Context(), stdout, stderr)
		},
	}
	o.conn.bind(cmd)
	f := cmd.Flags()
	f.Lookup(evalReportSource.flag).Usage = "file holding the eval report (a compact JWS of the eval authority), - for standard input (default $" +
		evalReportSource.env + ")"
	f.StringVar(&o.runID, "run-id", "", "the run the report is for (the run_id its train.create returned)")
	f.StringVar(&o.manifestPath, "manifest", "", "the run's manifest: the exact bytes it was created with")
	readsFile(f, "manifest")
	_ = cmd.MarkFlagRequired("run-id")
	_ = cmd.MarkFlagRequired("manifest")
	return cmd
}

func (o *evalPostOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	bad := func(msg string) error {
		return o.conn.localErr(stdout, stderr, api.CodeClientInput, msg, exitFailed)
	}
	if err := o.conn.validate(); err != nil {
		return bad(err.Error())
	}
	if !ledger.IsRunID(o.runID) {
		return bad("--run-id: run_ followed by 26 lowercase letters and digits")
	}
	data, digest, err := safefile.ReadManifest(o.manifestPath, manifest.MaxBytes)
	if err != nil {
		return o.conn.inputErr(stdout, stderr, err)
	}
	server, err := serverURL(o.conn.server, o.conn.src.getenv)
	if err != nil {
		return bad(err.Error())
	}
	report, err := o.conn.src.read(evalReportSource.flag, o.conn.tokenFile, evalReportSource.env, evalReportSource.what)
	if err != nil {
		return o.conn.inputErr(stdout, stderr, err)
	}
	// No bearer: the report is the credential.
	c, err := client.New(client.Options{BaseURL: server, Timeout: o.conn.timeout, ConnectTimeout: o.conn.connectTimeout,
		Attempts: 1})
	if err != nil {
		return bad(err.Error())
	}
	fmt.Fprintf(stderr, "manifest %s (%d bytes)\n", digest, len(data))
	ctx, cancel := o.conn.withDeadline(ctx)
	defer cancel()
	resp, err := c.PostEvalReport(ctx, o.runID, report, data)
	if err != nil {
		return o.conn.transportErr(ctx, stdout, stderr, err)
	}
	return renderAnswer(stdout, stderr, resp, o.conn.jsonOut, "eval-report", "REFUSED", showEvalReport)
}

// showEvalReport prints a posted report's outcome, every string inert.
func showEvalReport(w io.Writer, r api.EvalReportResult) {
	t := inert.Text
	label := "PASSED"
	if r.Verdict == "failed" {
		label = "HALTED"
	}
	if !r.Created {
		label += " (before)"
	}
	fmt.Fprintf(w, "%s  run=%s  stage=%s  state=%s\n", label, t(r.RunID), t(r.Stage), t(string(r.State)))
	if len(r.FailedEvals) > 0 {
		evals := make([]string, len(r.FailedEvals))
		for i, e := range r.FailedEvals {
			evals[i] = t(e)
		}
		fmt.Fprintf(w, "  failed_evals %s\n", strings.Join(evals, ", "))
	}
	fmt.Fprintf(w, "  report %s\n  decision_id %s\n  recorded_at %s\n", t(r.ReportDigest), t(r.DecisionID), unixTime(r.RecordedAt))
}
