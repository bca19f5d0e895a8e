package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// TestShowRunReportState: the human `runs get` names the stage's report
// deadline, says when it passed (the run is halted for it) and shows the
// passing report recorded, as --json does with report_due, report_overdue
// and report.
func TestShowRunReportState(t *testing.T) {
	var b bytes.Buffer
	showRun(&b, api.RunStatus{RunID: "run_1", State: api.RunHalted, Stage: "pretrain", ReportDue: 1790000240, ReportOverdue: true})
	if want := "  eval report of stage pretrain due " + unixTime(1790000240) + ": OVERDUE, the run is halted (EVAL_REPORT_OVERDUE)\n"; !strings.Contains(b.String(), want) {
		t.Fatalf("overdue run:\n%s\nwant the line %q", b.String(), want)
	}
	b.Reset()
	showRun(&b, api.RunStatus{RunID: "run_2", State: api.RunLive, Stage: "pretrain", ReportDue: 1790000240,
		Report: &api.RunReport{At: 1790000100, Stage: "pretrain", ReportDigest: "sha256:ab", DecisionID: "dec_1"}})
	out := b.String()
	if strings.Contains(out, "OVERDUE") ||
		!strings.Contains(out, "  eval report of stage pretrain due "+unixTime(1790000240)+"\n") ||
		!strings.Contains(out, "  passing eval report of stage pretrain recorded "+unixTime(1790000100)+" (report sha256:ab, decision_id=dec_1)\n") {
		t.Fatalf("run that reported in time:\n%s", out)
	}
	b.Reset()
	showRun(&b, api.RunStatus{RunID: "run_3", State: api.RunLive, Stage: "pretrain"})
	if strings.Contains(b.String(), "eval report") {
		t.Fatalf("run without a deadline or report:\n%s", b.String())
	}
}
