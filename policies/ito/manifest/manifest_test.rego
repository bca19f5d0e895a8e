package ito.manifest_test

import data.ito.manifest

_base := data.ito.testdata.base.input

_set(path, value) := {"op": "add", "path": path, "value": value}

_remove(path) := {"op": "remove", "path": path}

_stages(names) := [{"stage": n} | some n in names]

# an eval gate for every curriculum stage, so the post-training cases test the order alone
_all_gates := _set("/manifest/eval_gates", [{"stage": s, "suite": "ito-evals", "metric": "mmlu_5shot", "min": 0.25} |
	some s in ["pretrain", "midtrain", "long_context", "sft", "dpo", "rlvr"]
])

test_manifest_codes[name] if {
	some name, tc in _cases
	inp := json.patch(_base, tc.patch)
	got := {v.code | some v in manifest.deny with input as inp}
	warned := {v.code | some v in manifest.warn with input as inp}
	print(name, "got", got, "warned", warned)
	got == tc.want
	warned == object.get(tc, "warn", set())
}

_cases := {
	"valid": {"patch": [], "want": set()},
	"signature unverified": {
		"patch": [_set("/verification/manifest_signature/verified", false)],
		"want": {"MANIFEST_SIGNATURE_UNVERIFIED"},
	},
	"digest empty": {"patch": [_set("/manifest_digest", "")], "want": {"MANIFEST_DIGEST_INVALID"}},
	"digest missing": {"patch": [_remove("/manifest_digest")], "want": {"MANIFEST_DIGEST_INVALID"}},
	"digest upper-case": {
		"patch": [_set("/manifest_digest", upper(_base.manifest_digest))],
		"want": {"MANIFEST_DIGEST_INVALID"},
	},
	"schema v2": {"patch": [_set("/manifest/schema", "ito.training/v2")], "want": {"MANIFEST_SCHEMA_UNSUPPORTED"}},
	"revision main": {"patch": [_set("/manifest/model/revision", "main")], "want": {"MODEL_REVISION_NOT_PINNED"}},
	"revision tag": {"patch": [_set("/manifest/model/revision", "v1.0")], "want": {"MODEL_REVISION_NOT_PINNED"}},
	"revision short sha": {"patch": [_set("/manifest/model/revision", "8cde5ca")], "want": {"MODEL_REVISION_NOT_PINNED"}},
	"revision missing": {"patch": [_remove("/manifest/model/revision")], "want": {"MODEL_REVISION_NOT_PINNED"}},
	"revision sha256": {
		"patch": [_set("/manifest/model/revision", concat("", ["sha256:", concat("", ["a" | some _ in numbers.range(1, 64)])]))],
		"want": set(),
	},
	"checkpoint missing": {"patch": [_remove("/manifest/checkpoint")], "want": {"CHECKPOINT_POLICY_MISSING"}},
	"checkpoint null": {"patch": [_set("/manifest/checkpoint", null)], "want": {"CHECKPOINT_POLICY_MISSING"}},
	"post-training in order": {"patch": [_set("/manifest/post_training", _stages(["sft", "dpo", "rlvr"])), _all_gates], "want": set()},
	"post-training skipping dpo": {"patch": [_set("/manifest/post_training", _stages(["sft", "rlvr"])), _all_gates], "want": set()},
	"post-training repeating sft": {"patch": [_set("/manifest/post_training", _stages(["sft", "sft", "dpo"])), _all_gates], "want": set()},
	"post-training dpo before sft": {
		"patch": [_set("/manifest/post_training", _stages(["dpo", "sft"])), _all_gates],
		"want": {"POST_TRAINING_ORDER_INVALID"},
	},
	"post-training rlvr before dpo": {
		"patch": [_set("/manifest/post_training", _stages(["sft", "rlvr", "dpo"])), _all_gates],
		"want": {"POST_TRAINING_ORDER_INVALID"},
	},
	"post-training unknown stage": {
		"patch": [_set("/manifest/post_training", _stages(["ppo"])), _all_gates],
		"want": {"POST_TRAINING_ORDER_INVALID", "EVAL_GATES_MISSING"},
	},
	"post-training not an array": {
		"patch": [_set("/manifest/post_training", {"stage": "sft"})],
		"want": {"MANIFEST_FIELD_INVALID"},
	},
	"nodes as a string": {"patch": [_set("/manifest/hardware/nodes", "8")], "want": {"MANIFEST_FIELD_INVALID"}},
	"zero parameters": {"patch": [_set("/manifest/model/parameters", 0)], "want": {"MANIFEST_FIELD_INVALID"}},
	"fractional layers": {"patch": [_set("/manifest/model/layers", 32.5)], "want": {"MANIFEST_FIELD_INVALID"}},
	"tensor missing": {"patch": [_remove("/manifest/parallelism/tensor")], "want": {"MANIFEST_FIELD_INVALID"}},
	"context zero": {"patch": [_set("/manifest/parallelism/context", 0)], "want": {"MANIFEST_FIELD_INVALID"}},
	"precision tf32": {"patch": [_set("/manifest/parallelism/precision", "tf32")], "want": {"MANIFEST_FIELD_INVALID"}},
	"zero stage 4": {"patch": [_set("/manifest/parallelism/zero_stage", 4)], "want": {"MANIFEST_FIELD_INVALID"}},
	"negative bytes per param": {"patch": [_set("/manifest/parallelism/bytes_per_param", -1)], "want": {"MANIFEST_FIELD_INVALID"}},
	"checkpointing sometimes": {
		"patch": [_set("/manifest/parallelism/activation_checkpointing", "sometimes")],
		"want": {"MANIFEST_FIELD_INVALID"},
	},
	"no datasets": {"patch": [_set("/manifest/data", [])], "want": {"MANIFEST_FIELD_INVALID"}},
	"empty gpu type": {"patch": [_set("/manifest/hardware/gpu_type", "")], "want": {"MANIFEST_FIELD_INVALID"}},
	"optional fields left out": {
		"patch": [
			_remove("/manifest/parallelism/data"), _remove("/manifest/parallelism/zero_stage"),
			_remove("/manifest/parallelism/context"), _remove("/manifest/parallelism/expert"),
			_remove("/manifest/parallelism/virtual_stages"), _remove("/manifest/parallelism/activation_checkpointing"),
			_remove("/manifest/model/ffn_hidden_size"),
		],
		"want": set(),
	},
	"bytes per param override": {"patch": [_set("/manifest/parallelism/bytes_per_param", 2)], "want": set()},
	"moe": {"patch": [_set("/manifest/model/moe", {"experts": 8, "top_k": 2})], "want": set()},
	"moe a list": {"patch": [_set("/manifest/model/moe", [])], "want": {"MANIFEST_FIELD_INVALID"}},
	"expert tensor zero": {"patch": [_set("/manifest/parallelism/expert_tensor", 0)], "want": {"MANIFEST_FIELD_INVALID"}},
	"pipeline schedule gpipe": {"patch": [_set("/manifest/parallelism/pipeline_schedule", "gpipe")], "want": {"MANIFEST_FIELD_INVALID"}},
	"sequence parallel as a string": {"patch": [_set("/manifest/parallelism/sequence_parallel", "yes")], "want": {"MANIFEST_FIELD_INVALID"}},
	"gradient reduction in fp16": {
		"patch": [_set("/manifest/parallelism/gradient_reduce_precision", "fp16")],
		"want": {"MANIFEST_FIELD_INVALID"},
	},
	"pipeline split a number": {"patch": [_set("/manifest/parallelism/pipeline_split", 3)], "want": {"MANIFEST_FIELD_INVALID"}},
	"first stage layers zero": {
		"patch": [_set("/manifest/parallelism/pipeline_split", {"first_stage_layers": 0})],
		"want": {"MANIFEST_FIELD_INVALID"},
	},
	"embedding stage as a number": {
		"patch": [_set("/manifest/parallelism/pipeline_split", {"embedding_stage": 1})],
		"want": {"MANIFEST_FIELD_INVALID"},
	},
	"new parallelism fields well formed": {
		"patch": [
			_set("/manifest/parallelism/expert_tensor", 1), _set("/manifest/parallelism/pipeline_schedule", "1f1b"),
			_set("/manifest/parallelism/sequence_parallel", false), _set("/manifest/parallelism/gradient_reduce_precision", "fp32"),
			_set("/manifest/parallelism/pipeline_split", {"embedding_stage": true, "loss_stage": false}),
		],
		"want": set(),
	},
	"no eval gates": {"patch": [_remove("/manifest/eval_gates")], "want": {"EVAL_GATES_MISSING"}},
	"eval gate for another stage": {"patch": [_set("/manifest/eval_gates/0/stage", "sft")], "want": {"EVAL_GATES_MISSING"}},
	"post-training stage without an eval gate": {
		"patch": [_set("/manifest/post_training", _stages(["sft"]))],
		"want": {"EVAL_GATES_MISSING"},
	},
	"long-context stage with its eval gate": {
		"patch": [_set("/manifest/stages", ["pretrain", "long_context"]), _all_gates],
		"want": set(),
	},
	"manifest missing": {
		"patch": [_remove("/manifest")],
		"want": {
			"MANIFEST_SCHEMA_UNSUPPORTED", "MANIFEST_FIELD_INVALID", "MODEL_REVISION_NOT_PINNED",
			"CHECKPOINT_POLICY_MISSING",
		},
	},
}

test_field_messages if {
	inp := json.patch(_base, [_set("/manifest/hardware/nodes", "8"), _set("/manifest/parallelism/zero_stage", 4)])
	{v.message | some v in manifest.deny with input as inp} == {
		"manifest field /hardware/nodes is missing or not a positive integer",
		"manifest field /parallelism/zero_stage is not an integer from 0 to 3",
	}
}

test_order_message if {
	inp := json.patch(_base, [_set("/manifest/post_training", _stages(["sft", "rlvr", "dpo"])), _all_gates])
	[v.message | some v in manifest.deny with input as inp] == [
		"post_training[2] (dpo) comes after rlvr; the order is sft -> dpo -> rlvr",
	]
}

test_revision_message_withholds_secrets if {
	inp := json.patch(_base, [_set("/manifest/model/revision", "ghp_0123456789abcdefghijABCDEFGHIJ012345")])
	[v.message | some v in manifest.deny with input as inp] == [
		"model.revision (withheld) is not a 40-hex commit or sha256:<64 hex>",
	]
}

# The fast check (_are_fields_ok) must fail whenever one field is ill-typed, and
# the deny must then name that field: each field of _fields, made invalid on its
# own (a model.moe field inside an otherwise empty model.moe).
test_each_invalid_field_is_named[name] if {
	some field in manifest._fields
	name := concat("/", field.path)
	inp := json.patch(_base, [_set_field(field.path, _invalid_value[field.kind])])
	not manifest._are_fields_ok with input as inp
	messages := {v.message | some v in manifest.deny with input as inp}
	sprintf("manifest field /%s is %s", [name, manifest._expectation[field.kind]]) in messages
}

_invalid_value := {
	"count": 0, "optional_count": 1.5, "string": "", "zero_stage": 4, "positive_number": 0,
	"precision": "fp64", "checkpointing": "sometimes", "datasets": [], "array": {}, "optional_object": "x",
	"grad_precision": "fp16", "optional_bool": "yes", "schedule": "gpipe", "layer_counts": [4, -1],
}

_set_field(path, value) := _set(concat("/", array.concat([""], array.concat(["manifest"], path))), value) if count(path) < 3

else := _set(concat("/", ["", "manifest", path[0], path[1]]), {path[2]: value})

test_fast_field_check_passes_valid_manifests[name] if {
	some name, inp in {"base": _base, "moe": json.patch(_base, [_set("/manifest/model/moe", {"experts": 8, "top_k": 2})])}
	manifest._are_fields_ok with input as inp
}

# 8.0 is a whole number but not written as one: the fast check leaves it to the field-by-field check, which accepts it
test_count_written_as_a_decimal_passes if {
	inp := json.patch(_base, [_set("/manifest/hardware/nodes", 8.0)])
	not manifest._are_fields_ok with input as inp
	count({v | some v in manifest.deny with input as inp; v.code == "MANIFEST_FIELD_INVALID"}) == 0
}
