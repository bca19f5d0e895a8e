# METADATA
# title: Manifest gate
# description: >-
#   For train.create: the manifest signature is verified, the digest and
#   schema are what the contract says, the model revision is pinned, a
#   checkpoint policy exists, post-training runs SFT -> DPO -> RLVR, every
#   declared stage has an eval gate, and every
#   field the other gates compute with is present and well typed. The last
#   check is what keeps the other gates fail-closed: their rules assume the
#   shapes checked here.
package ito.manifest

import data.ito.lib
import data.ito.lifecycle

_m := input.manifest

# METADATA
# title: Manifest signature not verified
# description: Go did not establish the manifest's detached signature (defense in depth).
# custom:
#   code: MANIFEST_SIGNATURE_UNVERIFIED
#   gate: manifest
#   fix: Sign the exact manifest bytes with a pinned reviewer key or identity (cosign sign-blob) and send the signature.
deny contains v if {
	not input.verification.manifest_signature.verified == true
	v := lib.violation(rego.metadata.rule(), "the manifest's signature was not verified")
}

# METADATA
# title: Manifest digest malformed
# description: input.manifest_digest must be sha256:<64 lowercase hex> for train.create.
# custom:
#   code: MANIFEST_DIGEST_INVALID
#   gate: manifest
#   fix: Submit the manifest bytes; the server computes the digest (a client bug if this appears).
deny contains v if {
	not _has_digest
	v := lib.violation(rego.metadata.rule(), "the manifest digest is missing or not sha256:<64 hex>")
}

_has_digest if lib.is_digest(input.manifest_digest)

# METADATA
# title: Unsupported manifest schema
# description: The manifest's schema field must be "ito.training/v1".
# custom:
#   code: MANIFEST_SCHEMA_UNSUPPORTED
#   gate: manifest
#   fix: Write the manifest against schema "ito.training/v1" (schemas/manifest.v1.json).
deny contains v if {
	not _m.schema == "ito.training/v1"
	v := lib.violation(rego.metadata.rule(), sprintf("manifest schema %s is not \"ito.training/v1\"", [
		lib.show(lib.value_at(input, ["manifest", "schema"], null)),
	]))
}

# METADATA
# title: Manifest field missing or ill-typed
# description: >-
#   A field the gates compute with is missing or has the wrong type or range
#   (JSON Schema validation in Go should have refused it first; this keeps
#   policy fail-closed on its own).
# custom:
#   code: MANIFEST_FIELD_INVALID
#   gate: manifest
#   fix: Make the manifest valid against schemas/manifest.v1.json.
deny contains v if {
	some field in _invalid_fields
	v := lib.violation(rego.metadata.rule(), sprintf("manifest field /%s is %s", [
		concat("/", field.path),
		_expectation(field.kind),
	]))
}

# The fields the check found ill-typed, from the facts (facts.rego). A check
# that did not run denies on its own: facts without this part or with another
# shape, or a bundle that lists no fields (nothing would ever be checked).
_invalid_fields := fields if {
	count(data.ito.config.manifest.fields) > 0
	fields := _f.invalid_fields
	is_array(fields)
} else := [{"path": ["*"], "kind": "unchecked"}]

_expectation(kind) := e if {
	e := _expectations[kind]
} else := sprintf("not one of %s", [concat(", ", [lib.show(x) | some x in data.ito.config.manifest.kind_values[kind]])])

_expectations := {
	"count": "missing or not a positive integer",
	"optional_count": "not a positive integer",
	"string": "missing or not a non-empty string",
	"zero_stage": "not an integer from 0 to 3",
	"positive_number": "not a positive number",
	"precision": "missing or not one of fp32, fp16, bf16, fp8, mxfp8, nvfp4",
	"stage": "missing or not one of pretrain, midtrain, long_context, sft, dpo, rlvr",
	"checkpointing": "not one of none, selective, full",
	"grad_precision": "not one of bf16, fp32",
	"optional_bool": "not a boolean",
	"schedule": "not one of 1f1b, interleaved, zero_bubble, dualpipe",
	"datasets": "missing or not a non-empty array of objects",
	"array": "not an array",
	"optional_object": "not an object",
	"layer_counts": "not an array of whole numbers from 0",
	"unchecked": "not checked (no field list in data.ito.config.manifest.fields, or no field check in input.facts)",
}

# METADATA
# title: Model revision not pinned
# description: model.revision must be a 40-hex commit or sha256:<64 hex>; branches and tags ("main", "v1.0") move.
# custom:
#   code: MODEL_REVISION_NOT_PINNED
#   gate: manifest
#   fix: Pin model.revision to the 40-hex commit (or sha256 digest) of the weights you mean.
deny contains v if {
	not _is_pinned
	v := lib.violation(rego.metadata.rule(), sprintf("model.revision %s is not a 40-hex commit or sha256:<64 hex>", [
		lib.show(lib.value_at(input, ["manifest", "model", "revision"], null)),
	]))
}

_is_pinned if regex.match(`^([0-9a-f]{40}|sha256:[0-9a-f]{64})$`, _m.model.revision)

# METADATA
# title: Checkpoint policy missing
# description: The manifest must declare a checkpoint policy (interval, retention, storage, size estimate).
# custom:
#   code: CHECKPOINT_POLICY_MISSING
#   gate: manifest
#   fix: Add a checkpoint block with interval_steps, retention, storage_uri and size_estimate_gib.
deny contains v if {
	not _has_checkpoint
	v := lib.violation(rego.metadata.rule(), "the manifest has no checkpoint policy")
}

_has_checkpoint if is_object(_m.checkpoint)

# METADATA
# title: Post-training stages out of order
# description: post_training stages must run in the order SFT -> DPO -> RLVR (each stage's rank non-decreasing).
# custom:
#   code: POST_TRAINING_ORDER_INVALID
#   gate: manifest
#   fix: Order post_training as sft, then dpo, then rlvr (any of them may be left out).
deny contains v if {
	some message in _order_problems
	v := lib.violation(rego.metadata.rule(), message)
}

_stage_rank := {"sft": 1, "dpo": 2, "rlvr": 3}

_post_training := p if {
	p := _m.post_training
	is_array(p)
}

_order_problems contains sprintf("post_training[%d] has unknown stage %s", [i, lib.show(stage)]) if {
	some i, step in _post_training
	stage := lib.value_at(step, ["stage"], null)
	not _stage_rank[stage]
}

_order_problems contains msg if {
	some i, step in _post_training
	i > 0
	_stage_rank[step.stage] < _stage_rank[_post_training[i - 1].stage]
	msg := sprintf("post_training[%d] (%s) comes after %s; the order is sft -> dpo -> rlvr", [
		i, step.stage, _post_training[i - 1].stage,
	])
}

# METADATA
# title: No eval gate for a declared stage
# description: >-
#   Every stage the manifest declares (objective.stage, post_training, or
#   `stages`; see data.ito.lifecycle.declared_stages) needs at least one eval
#   gate: a stage without one could never be checked before the run moves on.
# custom:
#   code: EVAL_GATES_MISSING
#   gate: manifest
#   fix: Add an eval_gates entry (suite, metric, min or max) for every stage the manifest declares.
deny contains v if {
	some stage in lifecycle.declared_stages
	not _has_eval_gate(stage)
	v := lib.violation(rego.metadata.rule(), sprintf("no eval gate is declared for stage %s", [lib.show(stage)]))
}

_has_eval_gate(stage) if {
	some g in _m.eval_gates
	g.stage == stage
}
