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

# Each field of the bundle's list, made invalid on its own (a model.moe field
# inside an otherwise empty model.moe), is named by the deny with its kind's text.
test_each_invalid_field_is_named[name] if {
	some field in data.ito.config.manifest.fields
	name := concat("/", field.path)
	inp := json.patch(_base, [_set_field(field.path, _invalid_value[field.kind])])
	messages := {v.message | some v in manifest.deny with input as inp}
	sprintf("manifest field /%s is %s", [name, manifest._expectations[field.kind]]) in messages
	manifest.facts_reference.invalid_fields == [{"path": field.path, "kind": field.kind}] with input as inp
}

_invalid_value := {
	"count": 0, "optional_count": 1.5, "string": "", "zero_stage": 4, "positive_number": 0,
	"precision": "fp64", "checkpointing": "sometimes", "datasets": [], "array": {}, "optional_object": "x",
	"grad_precision": "fp16", "optional_bool": "yes", "schedule": "gpipe", "layer_counts": [4, -1],
	"stage": "pretraining",
}

_set_field(path, value) := _set(concat("/", array.concat([""], array.concat(["manifest"], path))), value) if count(path) < 3

else := _set(concat("/", ["", "manifest", path[0], path[1]]), {path[2]: value})

test_field_check_passes_valid_manifests[name] if {
	some name, inp in {"base": _base, "moe": json.patch(_base, [_set("/manifest/model/moe", {"experts": 8, "top_k": 2})])}
	manifest.facts_reference == {"invalid_fields": []} with input as inp
}

# 8.0 and 1e1 are whole numbers written otherwise; a kind_values number matches by value
test_numbers_by_value_pass if {
	inp := json.patch(_base, [
		_set("/manifest/hardware/nodes", 8.0), _set("/manifest/model/layers", 1e1),
		_set("/manifest/parallelism/zero_stage", 1.0),
		_set("/manifest/parallelism/pipeline_split", {"stage_layers": [4, 0, 3.0]}),
	])
	manifest.facts_reference == {"invalid_fields": []} with input as inp
}

# A manifest that is not an object: every required field is missing, in the list's order.
test_manifest_not_an_object if {
	some m in ["x", [], null]
	inp := json.patch(_base, [_set("/manifest", m)])
	[concat("/", f.path) | some f in manifest.facts_reference.invalid_fields with input as inp] == [
		"model/parameters", "model/layers", "model/hidden_size", "model/attention_heads", "model/kv_heads",
		"model/vocab_size", "objective/sequence_length", "objective/global_batch_size",
		"objective/micro_batch_size", "hardware/nodes", "hardware/gpus_per_node", "parallelism/tensor",
		"parallelism/pipeline", "hardware/gpu_type", "hardware/fabric", "hardware/region",
		"parallelism/precision", "objective/stage", "data",
	]
}

# With facts, the gate reads Go's check, not the reference: a field Go found
# invalid is denied on a manifest the reference passes.
test_reads_the_facts if {
	facts := {"version": 5, "manifest": {"invalid_fields": [{"path": ["model", "layers"], "kind": "count"}]}}
	inp := json.patch(_base, [_set("/facts", facts)])
	[v.message | some v in manifest.deny with input as inp; v.code == "MANIFEST_FIELD_INVALID"] == [
		"manifest field /model/layers is missing or not a positive integer",
	]
}

# A field check that did not run denies: facts without the part (another facts
# model), a part of another shape, a bundle that lists no fields.
test_unchecked_fields_deny[name] if {
	unchecked := [concat("", [
		"manifest field /* is not checked (no field list in data.ito.config.manifest.fields, ",
		"or no field check in input.facts)",
	])]
	some name, tc in {
		"facts without the part": {"facts": {"version": 5}, "fields": data.ito.config.manifest.fields},
		"invalid_fields an object": {
			"facts": {"version": 5, "manifest": {"invalid_fields": {}}},
			"fields": data.ito.config.manifest.fields,
		},
		"invalid_fields a string": {
			"facts": {"version": 5, "manifest": {"invalid_fields": "none"}},
			"fields": data.ito.config.manifest.fields,
		},
		"no field list": {"facts": {"version": 5, "manifest": {"invalid_fields": []}}, "fields": []},
	}
	inp := json.patch(_base, [_set("/facts", tc.facts)])
	[v.message |
		some v in manifest.deny with input as inp with data.ito.config.manifest.fields as tc.fields
		v.code == "MANIFEST_FIELD_INVALID"
	] == unchecked
}

# A kind the bundle lists in kind_values has a message made from its values.
test_listed_kind_message if {
	fields := array.concat(data.ito.config.manifest.fields, [{"path": ["model", "flavor"], "kind": "flavor"}])
	values := object.union(data.ito.config.manifest.kind_values, {"flavor": ["plain", 2, null]})
	inp := json.patch(_base, [_set("/manifest/model/flavor", "spicy")])
	msgs := [v.message |
		some v in manifest.deny with input as inp
			with data.ito.config.manifest.fields as fields
			with data.ito.config.manifest.kind_values as values
		v.code == "MANIFEST_FIELD_INVALID"
	]
	msgs == ["manifest field /model/flavor is not one of \"plain\", 2, null"]
	ok := json.patch(_base, [_set("/manifest/model/flavor", 2.0)])
	manifest.facts_reference.invalid_fields == [] with input as ok
		with data.ito.config.manifest.fields as fields
		with data.ito.config.manifest.kind_values as values
}

# An integer beyond 2^64 that 64 bits of mantissa do not hold (beyond the
# manifest schema's 1e18) is not a count to lib.is_count, which every gate's
# count guard uses (OPA's floor of it is inexact): the field check refuses it
# rather than let the gates skip the rules that read it.
test_count_beyond_float_precision_is_invalid if {
	inp := json.patch(_base, [_set("/manifest/model/hidden_size", 123456789012345678901234567890)])
	[v.message | some v in manifest.deny with input as inp; v.code == "MANIFEST_FIELD_INVALID"] == [
		"manifest field /model/hidden_size is missing or not a positive integer",
	]
}

# The lifecycle gates compute with objective.stage, stages and each stage's
# settings: without the schema in front (opa eval), a manifest without
# objective.stage, with `stages` not an array, or with stage settings of the
# wrong type was allowed (the stages fell back to the defaults, the settings
# were ignored or judged only at the advance).
test_stage_fields_are_checked[name] if {
	some name, tc in {
		"no objective.stage": {
			"patch": [{"op": "remove", "path": "/manifest/objective/stage"}],
			"want": [{"path": ["objective", "stage"], "kind": "stage"}],
		},
		"objective.stage not a stage": {
			"patch": [_set("/manifest/objective/stage", "finetune")],
			"want": [{"path": ["objective", "stage"], "kind": "stage"}],
		},
		"stages a number": {
			"patch": [_set("/manifest/stages", 5)],
			"want": [{"path": ["stages"], "kind": "array"}],
		},
		"stage_settings an array": {
			"patch": [_set("/manifest/stage_settings", ["sft"])],
			"want": [{"path": ["stage_settings"], "kind": "optional_object"}],
		},
		"a stage's settings not an object": {
			"patch": [_set("/manifest/stage_settings", {"sft": 5})],
			"want": [{"path": ["stage_settings", "sft"], "kind": "optional_object"}],
		},
		"a stage's sequence length a string": {
			"patch": [_set("/manifest/stage_settings", {"long_context": {"objective": {"sequence_length": "x"}}})],
			"want": [{"path": ["stage_settings", "long_context", "objective", "sequence_length"], "kind": "count"}],
		},
		"a stage's parallelism replaced by a number": {
			"patch": [_set("/manifest/stage_settings", {"sft": {"parallelism": 2}})],
			"want": [
				{"path": ["stage_settings", "sft", "parallelism", "tensor"], "kind": "count"},
				{"path": ["stage_settings", "sft", "parallelism", "pipeline"], "kind": "count"},
				{"path": ["stage_settings", "sft", "parallelism", "precision"], "kind": "precision"},
			],
		},
		"stages in kind_values order": {
			"patch": [_set("/manifest/stage_settings", {
				"sft": {"hardware": {"nodes": 0}},
				"midtrain": {"parallelism": {"zero_stage": 7}},
			})],
			"want": [
				{"path": ["stage_settings", "midtrain", "parallelism", "zero_stage"], "kind": "zero_stage"},
				{"path": ["stage_settings", "sft", "hardware", "nodes"], "kind": "count"},
			],
		},
		# wrong in the manifest and in the stage: named once, for the manifest
		"wrong in both": {
			"patch": [
				_set("/manifest/model/layers", 0),
				_set("/manifest/stage_settings", {"sft": {"objective": {"sequence_length": 4096}}}),
			],
			"want": [{"path": ["model", "layers"], "kind": "count"}],
		},
		# a key that is not a stage is never entered, and never shown
		"a key that is not a stage": {
			"patch": [_set("/manifest/stage_settings", {"ghp_notastage": 5})],
			"want": [],
		},
		"valid stage settings": {
			"patch": [_set("/manifest/stage_settings", {"long_context": {"objective": {"sequence_length": 131072}}})],
			"want": [],
		},
	}
	inp := json.patch(_base, tc.patch)
	manifest.facts_reference.invalid_fields == tc.want with input as inp
}

test_stage_settings_message if {
	inp := json.patch(_base, [_set("/manifest/stage_settings", {"long_context": {"objective": {"sequence_length": "x"}}})])
	[v.message | some v in manifest.deny with input as inp; v.code == "MANIFEST_FIELD_INVALID"] == [
		"manifest field /stage_settings/long_context/objective/sequence_length is missing or not a positive integer",
	]
}
