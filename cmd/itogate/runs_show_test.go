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

// TestShowRunGrownGPUs: the human `runs get` shows the GPUs the run holds
// now and, on its events, the create's and the stage advance's that grew
// it.
func TestShowRunGrownGPUs(t *testing.T) {
	var b bytes.Buffer
	showRun(&b, api.RunStatus{RunID: "run_1", State: api.RunLive, Stage: "long_context", BookingID: "bk_1", GPUs: 128,
		Events: []api.RunEvent{
			{At: 1790000000, To: api.RunLive, Action: api.TrainCreate, DecisionID: "dec_1", Stage: "pretrain", GPUs: 64},
			{At: 1790000100, To: api.RunLive, Action: api.TrainStageAdvance, DecisionID: "dec_2", Stage: "long_context", GPUs: 128},
			{At: 1790000200, To: api.RunLive, Action: api.TrainStageAdvance, DecisionID: "dec_3", Stage: "sft"},
		}})
	out := b.String()
	for _, want := range []string{
		"RUN  run_1  state=live  stage=long_context  booking=bk_1  gpus=128\n",
		"train.create  to=live  stage=pretrain  decision_id=dec_1  gpus=64\n",
		"train.stage.advance  to=live  stage=long_context  decision_id=dec_2  gpus=128\n",
		"train.stage.advance  to=live  stage=sft  decision_id=dec_3\n",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("runs get:\n%s\nwant a line ending %q", out, want)
		}
	}
}
