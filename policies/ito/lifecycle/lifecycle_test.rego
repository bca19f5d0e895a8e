package ito.lifecycle_test

import data.ito.admission
import data.ito.lifecycle

_base := data.ito.testdata.base.input

_set(path, value) := {"op": "add", "path": path, "value": value}

test_declared_stages[name] if {
	some name, tc in {
		"objective only": {"patch": [], "want": ["pretrain"]},
		"objective then recipe": {
			"patch": [_set("/manifest/post_training", [{"stage": "sft"}, {"stage": "sft"}, {"stage": "dpo"}])],
			"want": ["pretrain", "sft", "dpo"],
		},
		"sft objective repeated by the recipe": {
			"patch": [_set("/manifest/objective/stage", "sft"), _set("/manifest/post_training", [{"stage": "sft"}])],
			"want": ["sft"],
		},
		"explicit curriculum": {
			"patch": [_set("/manifest/stages", ["pretrain", "midtrain", "long_context", "sft"])],
			"want": ["pretrain", "midtrain", "long_context", "sft"],
		},
	}
	lifecycle.declared_stages == tc.want with input as json.patch(_base, tc.patch)
}

test_next_stage if {
	inp := json.patch(_base, [_set("/manifest/stages", ["pretrain", "long_context", "rlvr"])])
	lifecycle.next_stage("pretrain") == "long_context" with input as inp
	lifecycle.next_stage("long_context") == "rlvr" with input as inp
	not lifecycle.next_stage("rlvr") with input as inp
}

_advance := [
	_set("/request/action", "train.stage.advance"),
	_set("/request/run_id", "run_01"),
	_set("/request/stage", "pretrain"),
	_set("/ledger/run", {"state": "live", "stage": "pretrain", "manifest_digest": _base.manifest_digest}),
]

test_backwards_names_the_next_stage if {
	inp := json.patch(_base, array.concat(_advance, [_set("/manifest/post_training", [{"stage": "sft"}])]))
	[v.fix | some v in lifecycle.deny with input as inp; v.code == "STAGE_NOT_NEXT"] == ["advance to sft"]
}

test_last_stage_has_no_next if {
	inp := json.patch(_base, _advance)
	[v.fix | some v in lifecycle.deny with input as inp; v.code == "STAGE_NOT_NEXT"] == [
		"the run is in its last declared stage: there is no stage to advance to",
	]
}

test_failed_eval_names_both_thresholds if {
	report := {"verified": true, "key_id": "k", "claims": {
		"kind": "eval_report", "run_id": "run_01", "stage": "pretrain",
		"manifest_digest": _base.manifest_digest, "battery_id": "ito-battery-pretrain-2026.10",
		"results": {"mmlu_5shot": 0.2, "hellaswag_acc": 0.9},
	}}
	inp := json.patch(_base, array.concat(_advance, [_set("/eval_reports", [report])]))
	msgs := {v.message | some v in lifecycle.deny with input as inp; v.code == "EVAL_FAILED"}
	msgs == {
		"mmlu_5shot = 0.2 is below the battery's minimum 0.25",
		"mmlu_5shot = 0.2 is below the manifest's minimum 0.25",
	}
}

# A failed gate halts the run: the report's failing and missing evals.

_report(results) := {"verified": true, "key_id": "k", "claims": {
	"kind": "eval_report", "run_id": "run_01", "stage": "pretrain",
	"manifest_digest": _base.manifest_digest, "battery_id": "ito-battery-pretrain-2026.10",
	"results": results,
}}

_advance_with(report, more) := json.patch(_base, array.concat(array.concat(_advance, [_set("/eval_reports", [report])]), more))

test_failing_report_halts_the_run if {
	inp := _advance_with(_report({"mmlu_5shot": 0.2, "hellaswag_acc": 0.9}), [])
	lifecycle.halt == {"failed_evals": ["mmlu_5shot"]} with input as inp
	d := admission.decision with input as inp
	d.allow == false
	d.halt == {"failed_evals": ["mmlu_5shot"]}
}

test_missing_result_halts_the_run if {
	inp := _advance_with(_report({"mmlu_5shot": 0.2}), [])
	lifecycle.halt == {"failed_evals": ["hellaswag_acc", "mmlu_5shot"]} with input as inp
}

test_passing_report_halts_nothing if {
	inp := _advance_with(_report({"mmlu_5shot": 0.3, "hellaswag_acc": 0.9}), [])
	not lifecycle.halt with input as inp
	d := admission.decision with input as inp
	not "halt" in object.keys(d)
}

# A failing report that is no fact about this run's stage halts nothing.
test_halt_needs_a_bound_verified_report_of_a_live_run[name] if {
	failing := _report({"mmlu_5shot": 0.2, "hellaswag_acc": 0.9})
	some name, tc in {
		"another run": {"report": json.patch(failing, [_set("/claims/run_id", "run_02")]), "more": []},
		"another stage": {"report": json.patch(failing, [_set("/claims/stage", "midtrain")]), "more": []},
		"another manifest": {
			"report": json.patch(failing, [_set("/claims/manifest_digest", "sha256:0000000000000000000000000000000000000000000000000000000000000000")]),
			"more": [],
		},
		"another battery": {"report": json.patch(failing, [_set("/claims/battery_id", "ito-battery-midtrain-2026.10")]), "more": []},
		"unverified": {"report": json.patch(failing, [_set("/verified", false)]), "more": []},
		"cancelled run": {"report": failing, "more": [_set("/ledger/run/state", "cancelled")]},
		"halted run": {"report": failing, "more": [_set("/ledger/run/state", "halted")]},
		"revoked run": {"report": failing, "more": [_set("/ledger/run/state", "revoked")]},
	}
	inp := _advance_with(tc.report, tc.more)
	not lifecycle.halt with input as inp
	d := admission.decision with input as inp
	d.allow == false
	not "halt" in object.keys(d)
}

test_halted_run_names_its_failed_evals[action] if {
	some action in ["train.stage.advance", "train.restart"]
	inp := json.patch(_base, array.concat(_advance, [
		_set("/request/action", action),
		_set("/ledger/run/state", "halted"),
		_set("/ledger/run/halt", {
			"stage": "pretrain", "failed_evals": ["hellaswag_acc", "mmlu_5shot"],
			"report_digest": _base.manifest_digest, "decision_id": "dec_1",
		}),
	]))
	[v.message | some v in lifecycle.deny with input as inp; v.code == "RUN_HALTED"] == [
		"the run was halted in stage \"pretrain\": its eval gate failed (hellaswag_acc, mmlu_5shot)",
	]
	not "RUN_NOT_LIVE" in {v.code | some v in lifecycle.deny with input as inp}
}

test_revoked_run_is_not_live if {
	inp := json.patch(_base, array.concat(_advance, [_set("/request/action", "train.restart"), _set("/ledger/run/state", "revoked")]))
	[v.message | some v in lifecycle.deny with input as inp; v.code == "RUN_NOT_LIVE"] == [
		"train.restart needs a live run; the run is \"revoked\"",
	]
}

# A long_context stage raises the sequence length above the stage before it
# (each stage's effective one: its stage_settings over the manifest).

_into_long_context(settings) := json.patch(_base, array.concat(_advance, [
	_set("/request/stage", "long_context"),
	_set("/manifest/stages", ["pretrain", "midtrain", "long_context"]),
	_set("/ledger/run/stage", "midtrain"),
	_set("/manifest/stage_settings", settings),
]))

_sequence_denies(inp) := [v | some v in lifecycle.deny with input as inp; v.code == "STAGE_SEQUENCE_NOT_RAISED"]

test_long_context_must_raise_the_sequence_length[name] if {
	some name, tc in {
		"no settings": {"settings": {}, "before": 8192, "seq": 8192},
		"lower than the stage before": {
			"settings": {"long_context": {"objective": {"sequence_length": 4096}}},
			"before": 8192, "seq": 4096,
		},
		"the stage before raised it as far": {
			"settings": {
				"midtrain": {"objective": {"sequence_length": 32768}},
				"long_context": {"objective": {"sequence_length": 32768}},
			},
			"before": 32768, "seq": 32768,
		},
	}
	[v] := _sequence_denies(_into_long_context(tc.settings))
	v.message == sprintf("stage long_context has sequence length %d; the stage before it, midtrain, has %d", [
		tc.seq,
		tc.before,
	])
	startswith(v.fix, sprintf("set stage_settings.long_context.objective.sequence_length above %d", [tc.before]))
}

test_long_context_raising_the_sequence_length[name] if {
	some name, settings in {
		"above the manifest's": {"long_context": {"objective": {"sequence_length": 16384}}},
		"above the stage before's own": {
			"midtrain": {"objective": {"sequence_length": 16384}},
			"long_context": {"objective": {"sequence_length": 32768}},
		},
	}
	_sequence_denies(_into_long_context(settings)) == []
}

# Only an advance into long_context is held to it.
test_sequence_rule_is_the_long_context_advance_s if {
	inp := json.patch(_into_long_context({}), [_set("/request/stage", "midtrain"), _set("/ledger/run/stage", "pretrain")])
	_sequence_denies(inp) == []
	create := json.patch(_into_long_context({}), [_set("/request/action", "train.create")])
	_sequence_denies(create) == []
}
