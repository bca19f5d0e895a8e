package main

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/inert"
)

// runsRetryHint ends a transport failure of the runs commands: they only
// read, so asking again is safe.
const runsRetryHint = "nothing was changed: the runs commands only read; ask again"

func newRunsCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "Show your account's runs as the ledger has them (get, list)",
		Long: `Show the runs of the caller's account as the ledger has them: a run's state
(live, halted, revoked, cancelled, cleaned_up, released, expired), stage, GPUs,
restarts and every admission on it (runs get), or a page of runs (runs list).
Another account's run answers like an unknown one.`,
	}
	cmd.AddCommand(newRunsGetCmd(stdout, stderr), newRunsListCmd(stdout, stderr))
	return cmd
}

func newRunsGetCmd(stdout, stderr io.Writer) *cobra.Command {
	conn := &connOptions{retryHint: runsRetryHint}
	cmd := &cobra.Command{
		Use:   "get RUN_ID",
		Short: "Show one run of your account: state, stage, GPUs, restarts, halt or revocation, events",
		Long: `Show one run of the caller's account (GET /v1/runs/{run_id}): its state, stage,
GPUs held, admitted and live-until times, how it ended, the failed evals that
halted it or the revocation that stopped it, its restarts and checkpoint plan,
and its events (every transition with the decision id of its admission).

Exit status: 0 found, 3 no such run of your account, 4 bad input, 5
unavailable, 6 unauthenticated, 7 revoked credential, 1 other. With --json
every outcome is one envelope on stdout.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			conn.src = &secretSource{stdin: cmd.InOrStdin(), getenv: os.Getenv}
			c, err := conn.client()
			if err != nil {
				return conn.inputErr(stdout, stderr, err)
			}
			ctx, cancel := conn.withDeadline(cmd.Context())
			defer cancel()
			resp, err := c.Run(ctx, args[0])
			if err != nil {
				return conn.transportErr(ctx, stdout, stderr, err)
			}
			return renderAnswer(stdout, stderr, resp, conn.jsonOut, "runs get", "ERROR ", showRun)
		},
	}
	conn.bind(cmd)
	return cmd
}

type runsListOptions struct {
	conn      connOptions
	booking   string
	state     string
	limit     int
	pageToken string
}

func newRunsListCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &runsListOptions{conn: connOptions{retryHint: runsRetryHint}}
	var states []string
	for _, s := range api.RunStates() {
		states = append(states, string(s))
	}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List your account's runs, oldest first, a page at a time",
		Long: `List the runs of the caller's account (GET /v1/runs), in the order they were
admitted, a page at a time: --limit runs are read (default ` + strconv.Itoa(api.DefaultRunPage) + `, at most
` + strconv.Itoa(api.MaxRunPage) + `), then filtered by --state, so a filtered page may hold fewer runs, even
none, and still name a next page. The last line names the next page's
--page-token when there is one.

Exit status: 0 listed, 4 bad input, 5 unavailable, 6 unauthenticated, 7
revoked credential, 1 other. With --json every outcome is one envelope on
stdout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.conn.src = &secretSource{stdin: cmd.InOrStdin(), getenv: os.Getenv}
			if o.limit < 0 || o.limit > api.MaxRunPage {
				return o.conn.localErr(stdout, stderr, api.CodeClientInput,
					fmt.Sprintf("--limit %d: 1 to %d (0: the server's default, %d)", o.limit, api.MaxRunPage, api.DefaultRunPage), exitFailed)
			}
			q := url.Values{}
			for name, v := range map[string]string{"booking_id": o.booking, "state": o.state, "after": o.pageToken} {
				if v != "" {
					q.Set(name, v)
				}
			}
			if o.limit > 0 {
				q.Set("limit", strconv.Itoa(o.limit))
			}
			c, err := o.conn.client()
			if err != nil {
				return o.conn.inputErr(stdout, stderr, err)
			}
			ctx, cancel := o.conn.withDeadline(cmd.Context())
			defer cancel()
			resp, err := c.Runs(ctx, q)
			if err != nil {
				return o.conn.transportErr(ctx, stdout, stderr, err)
			}
			return renderAnswer(stdout, stderr, resp, o.conn.jsonOut, "runs list", "ERROR ", showRunList)
		},
	}
	o.conn.bind(cmd)
	f := cmd.Flags()
	f.StringVar(&o.booking, "booking", "", "only the runs on this booking")
	f.StringVar(&o.state, "state", "", "only the runs in this state: "+strings.Join(states, ", "))
	f.IntVar(&o.limit, "limit", 0, fmt.Sprintf("runs read for the page, 1 to %d (default: the server's, %d)", api.MaxRunPage, api.DefaultRunPage))
	f.StringVar(&o.pageToken, "page-token", "", "start after this run: the next page named by the previous page")
	plainValue(f, "page-token", "a run id of the caller's own account from the previous page; it grants nothing")
	return cmd
}

// unixTime is a unix time as RFC 3339 in UTC, "-" for none.
func unixTime(s int64) string {
	if s == 0 {
		return "-"
	}
	return time.Unix(s, 0).UTC().Format(time.RFC3339)
}

// showRun prints a run of GET /v1/runs/{run_id}, one fact a line, every
// string inert.
func showRun(w io.Writer, r api.RunStatus) {
	t := inert.Text
	fmt.Fprintf(w, "RUN  %s  state=%s  stage=%s  booking=%s  gpus=%d\n", t(r.RunID), t(string(r.State)), t(r.Stage), t(r.BookingID), r.GPUs)
	fmt.Fprintf(w, "  manifest %s\n", t(r.ManifestDigest))
	fmt.Fprintf(w, "  admitted %s  live_until %s\n", unixTime(r.AdmittedAt), unixTime(r.LiveUntil))
	if r.EndedAt != 0 || r.EndedBy != "" {
		fmt.Fprintf(w, "  ended %s by %s\n", unixTime(r.EndedAt), t(string(r.EndedBy)))
	}
	fmt.Fprintf(w, "  restarts %d", r.Restarts)
	if r.LastCheckpointStep != nil {
		fmt.Fprintf(w, " (last from step %d)", *r.LastCheckpointStep)
	}
	fmt.Fprintln(w)
	if c := r.Checkpoint; c != nil {
		fmt.Fprintf(w, "  checkpoint every %d of %d steps, %d s of wall clock, %d s lost per restart\n",
			c.IntervalSteps, c.Steps, c.WallClockSeconds, c.LostSecondsPerRestart)
	}
	if h := r.Halt; h != nil {
		evals := make([]string, len(h.FailedEvals))
		for i, e := range h.FailedEvals {
			evals[i] = t(e)
		}
		fmt.Fprintf(w, "  halted %s at stage %s: failed evals %s (report %s, decision_id=%s)\n",
			unixTime(h.At), t(h.Stage), strings.Join(evals, ", "), t(h.ReportDigest), t(h.DecisionID))
	}
	if r.ReportDue != 0 {
		fmt.Fprintf(w, "  eval report of stage %s due %s", t(r.Stage), unixTime(r.ReportDue))
		if r.ReportOverdue {
			fmt.Fprint(w, ": OVERDUE, the run is halted (EVAL_REPORT_OVERDUE)")
		}
		fmt.Fprintln(w)
	}
	if p := r.Report; p != nil {
		fmt.Fprintf(w, "  passing eval report of stage %s recorded %s (report %s, decision_id=%s)\n",
			t(p.Stage), unixTime(p.At), t(p.ReportDigest), t(p.DecisionID))
	}
	if v := r.Revocation; v != nil {
		fmt.Fprintf(w, "  revoked %s: %s %s", unixTime(v.At), t(v.Kind), t(v.Subject))
		if v.Reason != "" {
			fmt.Fprintf(w, " (%s)", t(v.Reason))
		}
		fmt.Fprintln(w)
	}
	if len(r.Events) > 0 {
		fmt.Fprintln(w, "  events:")
	}
	for _, e := range r.Events {
		action := "-" // a transition of no admission's own: a halt, a revocation, an expiry
		if e.Action != "" {
			action = t(string(e.Action))
		}
		fmt.Fprintf(w, "    %s  %s", unixTime(e.At), action)
		for _, f := range []struct{ label, v string }{
			{"to", string(e.To)}, {"stage", e.Stage}, {"decision_id", e.DecisionID}, {"reason", e.Reason},
		} {
			if f.v != "" {
				fmt.Fprintf(w, "  %s=%s", f.label, t(f.v))
			}
		}
		if e.CheckpointStep != nil {
			fmt.Fprintf(w, "  checkpoint_step=%d", *e.CheckpointStep)
		}
		if e.GPUs > 0 { // a create's world size, or a stage advance that grew the run
			fmt.Fprintf(w, "  gpus=%d", e.GPUs)
		}
		fmt.Fprintln(w)
	}
}

// showRunList prints a page of GET /v1/runs as a table, then the next
// page's --page-token, every string inert.
func showRunList(w io.Writer, l api.RunList) {
	t := inert.Text
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN_ID\tSTATE\tSTAGE\tBOOKING\tGPUS\tRESTARTS\tLIVE_UNTIL")
	for _, r := range l.Runs {
		stage := r.Stage
		if stage == "" {
			stage = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", t(r.RunID), t(string(r.State)), t(stage), t(r.BookingID),
			r.GPUs, r.Restarts, unixTime(r.LiveUntil))
	}
	tw.Flush()
	if l.Next != "" {
		fmt.Fprintf(w, "next page: --page-token %s\n", t(l.Next))
	}
}
