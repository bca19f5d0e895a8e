# The eval authority's direct post (POST /v1/runs/{run_id}/eval-reports)
# and the report deadline of a stage. report_verdict judges one eval report
# by the rules a stage advance applies (lifecycle.rego): Go halts the run
# when evals fail and records a passing report otherwise. A stage's battery
# may carry report_deadline_seconds: a create or advance into the stage
# hands it to Go (stage_estimates), which records when the report is due on
# the run; past it without a passing report the ledger counts the run as
# halted (EVAL_REPORT_OVERDUE). Part of package ito.lifecycle (see
# lifecycle.rego).
package ito.lifecycle

# METADATA
# title: Eval report verdict
# description: >-
#   The eval gate's judgment of the one eval report in input.eval_reports on
#   its own, by the rules a stage advance applies: {"problems": [...],
#   "failed_evals": [...]}. problems (sorted) say why the report cannot be
#   judged for this run: not verified, the manifest is not the run's, or it
#   is not bound to the run (input.request.run_id), its current stage
#   (input.ledger.run.stage), its manifest digest and that stage's battery
#   id; failed_evals (sorted) are the evals of the stage's gate (battery and
#   manifest eval gates) that failed or have no result. Go queries it for
#   the eval authority's direct post: problems refuse the report, failed
#   evals halt the run, neither records a passing report. Undefined without
#   exactly one eval report.
# entrypoint: true
report_verdict := {"problems": sort(_report_problems), "failed_evals": sort(_failed_metrics)} if {
	count(_reports) == 1
}

_report_problems contains "the eval report's signature was not verified" if not _is_report_verified

_report_problems contains "the manifest's digest is not the one the run was admitted with" if not _is_run_manifest

_report_problems contains msg if some msg in _binding_problems

# ---------------------------------------------------------------------------
# The report deadline of the stage a run enters

# the stage a create starts the run in, or an advance moves it to
# (input is an object once it has request.action: object.get is lib.value_at there)
_entered_stage := object.get(input, ["manifest", "objective", "stage"], null) if {
	input.request.action == "train.create"
}

_entered_stage := _target if input.request.action == "train.stage.advance"

# METADATA
# title: Report deadline of the stage entered
# description: >-
#   For a train.create or a train.stage.advance, the seconds after the
#   decision within which a passing eval report for the stage the run enters
#   must reach the ledger: that stage's battery's report_deadline_seconds
#   (bundle data, optional; a positive integer). Go records the decision
#   time plus it on the run (ledger.RunRecord.ReportDue); past it, without a
#   passing report posted by the eval authority, the run counts as halted
#   (EVAL_REPORT_OVERDUE). Undefined when the stage has none.
report_deadline_seconds := s if {
	s := _cfg.batteries[_entered_stage].report_deadline_seconds
	is_number(s)
	s > 0
	s == round(s)
}

# METADATA
# title: Stage estimates
# description: >-
#   {"stage_report_deadline_seconds": n} for a create or advance into a
#   stage with a report deadline (report_deadline_seconds), which the
#   admission decision carries in its estimates; {} otherwise.
stage_estimates := {"stage_report_deadline_seconds": report_deadline_seconds} if {
	report_deadline_seconds
} else := {}
