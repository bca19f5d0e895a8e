package ito.lifecycle_test

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
