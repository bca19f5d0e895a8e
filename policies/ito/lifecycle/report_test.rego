package ito.lifecycle_test

import data.ito.admission
import data.ito.lifecycle

# report_verdict: one eval report judged on its own, as the eval authority's
# direct post asks it (no action: the post is no admission).

_posted(report, more) := json.patch(_base, array.concat(
	[
		_set("/request/run_id", "run_01"),
		_set("/ledger/run", {"state": "live", "stage": "pretrain", "manifest_digest": _base.manifest_digest}),
		_set("/eval_reports", [report]),
	],
	more,
))

test_verdict[name] if {
	passing := _report({"mmlu_5shot": 0.3, "hellaswag_acc": 0.9})
	some name, tc in {
		"passing": {"report": passing, "more": [], "want": {"problems": [], "failed_evals": []}},
		"failing": {
			"report": _report({"mmlu_5shot": 0.2, "hellaswag_acc": 0.9}), "more": [],
			"want": {"problems": [], "failed_evals": ["mmlu_5shot"]},
		},
		"missing result": {
			"report": _report({"mmlu_5shot": 0.3}), "more": [],
			"want": {"problems": [], "failed_evals": ["hellaswag_acc"]},
		},
		"another run": {
			"report": json.patch(passing, [_set("/claims/run_id", "run_02")]), "more": [],
			"want": {"problems": ["the eval report's run_id is \"run_02\", this advance needs \"run_01\""], "failed_evals": []},
		},
		"another battery": {
			"report": json.patch(passing, [_set("/claims/battery_id", "ito-battery-sft-2026.10")]), "more": [],
			"want": {
				"problems": [
					"the eval report's battery_id is \"ito-battery-sft-2026.10\", this advance needs \"ito-battery-pretrain-2026.10\"",
				],
				"failed_evals": [],
			},
		},
		"unverified": {
			"report": json.patch(passing, [_set("/verified", false)]), "more": [],
			"want": {"problems": ["the eval report's signature was not verified"], "failed_evals": []},
		},
		"another manifest": {
			"report": passing, "more": [_set("/ledger/run/manifest_digest", "sha256:00")],
			"want": {
				"problems": ["the manifest's digest is not the one the run was admitted with"],
				"failed_evals": [],
			},
		},
	}
	lifecycle.report_verdict == tc.want with input as _posted(tc.report, tc.more)
}

test_verdict_needs_one_report[name] if {
	some name, reports in {"none": [], "two": [_report({}), _report({})]}
	not lifecycle.report_verdict with input as json.patch(_posted(_report({}), []), [_set("/eval_reports", reports)])
}

# The halt of an advance is the verdict's failed evals, only for a live run.
test_halt_is_the_verdict if {
	inp := _advance_with(_report({"mmlu_5shot": 0.2}), [])
	v := lifecycle.report_verdict with input as inp
	lifecycle.halt == {"failed_evals": v.failed_evals} with input as inp
}

# report_deadline_seconds: the battery of the stage a create or advance
# enters, handed to Go in the decision's estimates.

_deadlines := {"pretrain": 3600, "sft": 7200}

_batteries := {stage: object.union(b, _deadline(stage)) | some stage, b in data.ito.config.lifecycle.batteries}

_deadline(stage) := {"report_deadline_seconds": _deadlines[stage]} if _deadlines[stage]

else := {}

test_create_carries_its_first_stage_deadline if {
	d := admission.decision with input as _base with data.ito.config.lifecycle.batteries as _batteries
	d.estimates.stage_report_deadline_seconds == 3600
	lifecycle.report_deadline_seconds == 3600 with input as _base
		with data.ito.config.lifecycle.batteries as _batteries
}

test_advance_carries_the_entered_stage_deadline if {
	inp := json.patch(_base, array.concat(_advance, [_set("/request/stage", "sft")]))
	d := admission.decision with input as inp with data.ito.config.lifecycle.batteries as _batteries
	d.estimates.stage_report_deadline_seconds == 7200

	# beside the checkpoint gate's estimates of the stage it enters
	is_number(d.estimates.expected_goodput)
	d.estimates.checkpoint_failure_rate_source == "bundle"
	not d.estimates.gpu_hours
}

test_no_deadline_without_data[name] if {
	some name, tc in {
		"shipped data": {"batteries": data.ito.config.lifecycle.batteries, "input": _base},
		"stage without one": {"batteries": _batteries, "input": json.patch(_base, [_set("/manifest/objective/stage", "midtrain")])},
		"not a positive integer": {
			"batteries": json.patch(_batteries, [_set("/pretrain/report_deadline_seconds", 1.5)]),
			"input": _base,
		},
		"restart": {"batteries": _batteries, "input": json.patch(_base, [_set("/request/action", "train.restart")])},
	}
	not lifecycle.report_deadline_seconds with input as tc.input with data.ito.config.lifecycle.batteries as tc.batteries
	d := admission.decision with input as tc.input with data.ito.config.lifecycle.batteries as tc.batteries
	not "stage_report_deadline_seconds" in object.keys(d.estimates)
}
