# METADATA
# title: Run lifecycle gate
# description: >-
#   A run's life after train.create: its stages and the actions that change
#   it. On train.create the manifest's stages must follow the curriculum
#   order (data.ito.config.lifecycle.stage_order: pretrain, midtrain,
#   long_context, sft, dpo, rlvr). train.stage.advance moves a live run to
#   the next stage its manifest declares, only with a verified eval report
#   from the eval authority bound to the run, the stage it ends, the
#   manifest digest and that stage's battery, in which every eval of the
#   battery (bundle data) and every eval gate the manifest declares for the
#   stage is present and passes. There is no override. An advance into
#   long_context must raise the sequence length above the stage before it
#   (stage_settings, STAGE_SEQUENCE_NOT_RAISED); the training gates judge
#   the stage it enters (policies/ito/admission). train.restart needs a
#   live run. The ledger (input.ledger.run) says which stage a run is in and
#   its state (the ledger's RunRecord.State, which its commit and the
#   webhook read too); it records the new stage in the same transaction
#   that consumes the confirmation. A verified report bound to the run that
#   fails its stage's gate halts the run (halt, decision.halt): a halted run
#   is refused every advance and restart. The eval authority may also post
#   a report for a run directly (POST /v1/runs/{run_id}/eval-reports): Go
#   asks report_verdict, the same rules on that report alone, and halts the
#   run when it fails or records that the stage's report passed. A stage
#   may carry a report deadline (batteries.<stage>.report_deadline_seconds,
#   report_deadline_seconds): past it without a passing report the ledger
#   counts the run as halted. A restart starts from a step the run's
#   checkpoint plan writes and within its restart budget (restart.rego).
package ito.lifecycle

import data.ito.lib

_m := input.manifest

_cfg := data.ito.config.lifecycle

_action := lib.value_at(input, ["request", "action"], null)

_rank := {name: i | some i, name in _cfg.stage_order}

# ---------------------------------------------------------------------------
# The stages a manifest declares

_post_training_stages := [s.stage | some s in _m.post_training] if is_array(_m.post_training)

else := []

# every stage named, in the order written: `stages` when given, else
# objective.stage followed by the post-training recipe
_named_stages := _m.stages if is_array(_m.stages)

_named_stages := array.concat([stage], _post_training_stages) if {
	# (defined: the manifest is an object)
	stage := input.manifest.objective.stage
	not is_array(object.get(input.manifest, "stages", null))
}

# METADATA
# title: Declared stages
# description: >-
#   The manifest's stages in order with consecutive repeats collapsed
#   (["sft", "sft", "dpo"] is ["sft", "dpo"]): `stages` when the manifest
#   has it, else objective.stage followed by post_training's stages.
declared_stages := [s |
	named := _named_stages
	some i, s in named

	# the first, or not the one before it again
	not named[i - 1] == s
]

# METADATA
# title: Next stage
# description: The declared stage after `stage`; undefined for the last one.
next_stage(stage) := declared_stages[i + 1] if {
	some i, s in declared_stages
	s == stage
}

# METADATA
# title: Stages out of curriculum order
# description: >-
#   The manifest's stages must follow the curriculum order (pretrain,
#   midtrain, long_context, sft, dpo, rlvr; any may be left out, none may
#   come back): SFT -> DPO -> RLVR holds across stages, not only inside the
#   post-training recipe.
# custom:
#   code: STAGE_ORDER_INVALID
#   gate: lifecycle
deny contains v if {
	input.request.action == "train.create"
	some msg in _order_problems
	v := lib.violation_fix(rego.metadata.rule(), msg, sprintf("order the stages as %s (any may be left out)", [
		concat(" -> ", _cfg.stage_order),
	]))
}

_order_problems contains sprintf("stage %s is not a curriculum stage", [lib.show(s)]) if {
	some s in declared_stages
	not _rank[s]
}

_order_problems contains sprintf("stage %s comes after %s", [s, declared_stages[i - 1]]) if {
	some i, s in declared_stages
	i > 0
	_rank[s] < _rank[declared_stages[i - 1]]
	not _is_recipe_pair(i)
}

# Without `stages`, the order inside post_training is the manifest gate's
# (POST_TRAINING_ORDER_INVALID); this gate adds objective.stage before it.
_is_recipe_pair(i) if {
	not is_array(lib.value_at(input, ["manifest", "stages"], null))
	i > 1
}

# METADATA
# title: Stages disagree with the objective or the recipe
# description: >-
#   When the manifest lists `stages`, the first must be objective.stage and
#   every post_training stage must be among them.
# custom:
#   code: STAGES_INCONSISTENT
#   gate: lifecycle
#   fix: Start `stages` with objective.stage and list every post_training stage in it.
deny contains v if {
	is_array(input.manifest.stages)
	input.request.action == "train.create"
	some msg in _consistency_problems
	v := lib.violation(rego.metadata.rule(), msg)
}

_consistency_problems contains sprintf("stages starts with %s, objective.stage is %s", [
	lib.show(lib.value_at(_m.stages, [0], null)),
	lib.show(lib.value_at(input, ["manifest", "objective", "stage"], null)),
]) if {
	not _starts_with_objective
}

_starts_with_objective if _m.stages[0] == _m.objective.stage

_consistency_problems contains sprintf("post_training stage %s is not in stages", [lib.show(s)]) if {
	some s in _post_training_stages
	not s in _m.stages
}

# ---------------------------------------------------------------------------
# Actions on an admitted run

_run := input.ledger.run

_is_live if _run.state == "live"

# METADATA
# title: Run not live
# description: >-
#   train.stage.advance and train.restart act only on a live run
#   (input.ledger.run.state): not on a run that was cancelled, cleaned up,
#   released, revoked with its booking or entitlement, or is past its
#   declared end, nor on one the ledger does not know. A halted run has its
#   own code, RUN_HALTED.
# custom:
#   code: RUN_NOT_LIVE
#   gate: lifecycle
#   fix: >-
#     Create a new run; a run that ended or was revoked cannot be advanced or
#     restarted, only cancelled or cleaned up.
deny contains v if {
	data.ito.config.actions[input.request.action].effect == "step_run"
	not _is_live
	not _is_halted
	v := lib.violation(rego.metadata.rule(), sprintf("%s needs a live run; the run is %s", [
		_action, lib.show(lib.value_at(input, ["ledger", "run", "state"], null)),
	]))
}

_is_halted if _run.state == "halted"

# METADATA
# title: Run halted by a failed eval gate
# description: >-
#   A signed eval report failed the gate of the run's stage and the ledger
#   halted the run (input.ledger.run.halt): it gets no stage advance, no
#   restart and no new workload. Only train.cancel and train.cleanup are
#   admitted; a failed eval gate has no override.
# custom:
#   code: RUN_HALTED
#   gate: lifecycle
#   fix: Cancel or clean up the run; create a new run to train again.
deny contains v if {
	data.ito.config.actions[input.request.action].effect == "step_run"
	_is_halted
	v := lib.violation(rego.metadata.rule(), sprintf("the run was halted in stage %s: its eval gate failed (%s)", [
		lib.show(lib.value_at(input, ["ledger", "run", "halt", "stage"], null)),
		concat(", ", [sprintf("%v", [e]) | some e in lib.value_at(input, ["ledger", "run", "halt", "failed_evals"], [])]),
	]))
}

# METADATA
# title: Manifest is not the run's
# description: >-
#   train.stage.advance carries the run's signed manifest again (for its
#   stages and eval gates); its digest must be the one the run was admitted with.
# custom:
#   code: RUN_MANIFEST_MISMATCH
#   gate: lifecycle
#   fix: Send the exact manifest bytes the run was created with.
deny contains v if {
	input.request.action == "train.stage.advance"
	not _is_run_manifest
	v := lib.violation(rego.metadata.rule(), "the manifest's digest is not the one the run was admitted with")
}

_is_run_manifest if {
	lib.is_digest(input.manifest_digest)
	input.manifest_digest == _run.manifest_digest
}

_current := _run.stage

_target := lib.value_at(input, ["request", "stage"], null)

# METADATA
# title: Not the next stage
# description: >-
#   A stage advance must name the stage that follows the run's current stage
#   in its manifest: stages never go backwards, repeat or skip.
# custom:
#   code: STAGE_NOT_NEXT
#   gate: lifecycle
deny contains v if {
	input.request.action == "train.stage.advance"
	_is_run_manifest
	not _is_next_stage
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("the run is in stage %s; %s is not the next stage its manifest declares (%s)", [
			lib.show(lib.value_at(input, ["ledger", "run", "stage"], null)), lib.show(_target),
			concat(" -> ", [sprintf("%v", [s]) | some s in declared_stages]),
		]),
		_next_fix,
	)
}

_is_next_stage if _target == next_stage(_current)

_next_fix := sprintf("advance to %s", [next_stage(_current)]) if next_stage(_current)

else := "the run is in its last declared stage: there is no stage to advance to"

# METADATA
# title: Long-context stage does not raise the sequence length
# description: >-
#   An advance into long_context enters a stage whose sequence length (the
#   objective.sequence_length of its effective manifest: stage_settings
#   merged over the manifest, lib.train_manifest) is not above that of the
#   stage before it in the manifest's declared stages (that stage's
#   effective manifest): a long-context stage trains on longer sequences
#   than the one it follows.
# custom:
#   code: STAGE_SEQUENCE_NOT_RAISED
#   gate: lifecycle
#   fix: >-
#     Computed per deny - set stage_settings.long_context.objective.sequence_length
#     above the stage before it, with a layout that fits it.
deny contains v if {
	input.request.action == "train.stage.advance"
	_target == "long_context"
	some i, s in declared_stages
	s == _target
	i > 0
	previous := declared_stages[i - 1]
	seq := lib.train_manifest.objective.sequence_length
	before := lib.stage_manifest(_m, previous).objective.sequence_length
	is_number(seq)
	is_number(before)
	seq <= before
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("stage long_context has sequence length %v; the stage before it, %s, has %v", [seq, previous, before]),
		sprintf("set stage_settings.long_context.objective.sequence_length above %v, %s", [
			before, "with a layout that fits it (stage_settings.long_context.parallelism, e.g. context)",
		]),
	)
}

# ---------------------------------------------------------------------------
# The eval report that ends the current stage

_reports := [r |
	some r in input.eval_reports
	lib.value_at(r, ["claims", "kind"], null) == "eval_report"
]

_battery := _cfg.batteries[_current]

# METADATA
# title: Eval report missing
# description: A stage advance needs exactly one eval report from the eval authority (trust.evals).
# custom:
#   code: EVAL_REPORT_MISSING
#   gate: lifecycle
#   fix: Have the eval authority run the stage's battery and send its signed report with the advance.
deny contains v if {
	input.request.action == "train.stage.advance"
	count(_reports) != 1
	v := lib.violation(rego.metadata.rule(), sprintf("a stage advance needs one eval report, got %d", [count(_reports)]))
}

_report := _reports[0] if count(_reports) == 1

_is_report_verified if _report.verified == true

# METADATA
# title: Eval report not verified
# description: Go did not establish the eval report's signature with the eval authority's keys (defense in depth).
# custom:
#   code: EVAL_REPORT_UNVERIFIED
#   gate: lifecycle
#   fix: Send the eval report exactly as the eval authority signed it.
deny contains v if {
	input.request.action == "train.stage.advance"
	count(_reports) == 1
	not _is_report_verified
	v := lib.violation(rego.metadata.rule(), "the eval report's signature was not verified")
}

# METADATA
# title: Eval report for something else
# description: >-
#   The eval report must be bound to this run, the stage it ends (the run's
#   current stage), this manifest digest and that stage's battery id.
# custom:
#   code: EVAL_REPORT_BINDING_MISMATCH
#   gate: lifecycle
#   fix: Get an eval report for this run's current stage, battery and manifest.
deny contains v if {
	input.request.action == "train.stage.advance"
	some msg in _binding_problems
	v := lib.violation(rego.metadata.rule(), msg)
}

_binding_problems contains sprintf("the eval report's %s is %s, this advance needs %s", [
	field, lib.show(lib.value_at(_report, ["claims", field], null)), lib.show(want),
]) if {
	some field, want in {
		"run_id": lib.value_at(input, ["request", "run_id"], null),
		"stage": lib.value_at(input, ["ledger", "run", "stage"], null),
		"manifest_digest": lib.value_at(input, ["manifest_digest"], null),
		"battery_id": object.get(_battery, "id", null),
	}
	not lib.value_at(_report, ["claims", field], null) == want
}

# the evals a stage must pass: the bundle's battery and the manifest's own gates
_required_evals contains {
	"metric": e.metric,
	"min": object.get(e, "min", null),
	"max": object.get(e, "max", null),
	"by": "battery",
} if {
	some e in _battery.evals
}

_required_evals contains {
	"metric": g.metric,
	"min": object.get(g, "min", null),
	"max": object.get(g, "max", null),
	"by": "manifest",
} if {
	some g in _m.eval_gates
	g.stage == _current
}

_results := r if {
	r := _report.claims.results
	is_object(r)
}

else := {}

# METADATA
# title: Eval result missing
# description: >-
#   An eval of the stage's battery, or an eval gate the manifest declares for
#   the stage, has no result in the report.
# custom:
#   code: EVAL_RESULT_MISSING
#   gate: lifecycle
#   fix: Run every eval of the stage's battery and the manifest's eval gates; a missing result is a failed gate.
deny contains v if {
	input.request.action == "train.stage.advance"
	_report
	some e in _required_evals
	not is_number(object.get(_results, e.metric, null))
	v := lib.violation(rego.metadata.rule(), sprintf("the eval report has no result for %s (required by the %s)", [
		lib.show(e.metric), e.by,
	]))
}

# METADATA
# title: Eval failed
# description: >-
#   A result is below its min or above its max. A failed eval gate halts
#   the run (the ledger records the failed evals): its restarts, stage
#   advances, later reports and new workloads are RUN_HALTED, and there is
#   no override.
# custom:
#   code: EVAL_FAILED
#   gate: lifecycle
#   fix: >-
#     The run is halted: cancel and clean it up (train.cancel,
#     train.cleanup), fix what failed, and admit a new run from a
#     checkpoint that passes; a failed gate has no override.
deny contains v if {
	input.request.action == "train.stage.advance"
	some msg in _eval_failures
	v := lib.violation(rego.metadata.rule(), msg)
}

_eval_failures contains sprintf("%s = %v is below the %s's minimum %v", [e.metric, value, e.by, e.min]) if {
	_report
	some e in _required_evals
	value := object.get(_results, e.metric, null)
	is_number(value)
	is_number(e.min)
	value < e.min
}

_eval_failures contains sprintf("%s = %v is above the %s's maximum %v", [e.metric, value, e.by, e.max]) if {
	_report
	some e in _required_evals
	value := object.get(_results, e.metric, null)
	is_number(value)
	is_number(e.max)
	value > e.max
}

# ---------------------------------------------------------------------------
# A failed gate halts the run

# METADATA
# title: Halt
# description: >-
#   {"failed_evals": [...]} when a stage advance of a live run carries one
#   verified eval report bound to this run, its current stage, its manifest
#   and the stage's battery, and an eval of the stage's gate failed or has no
#   result (sorted metric names): report_verdict without problems and with
#   failed evals. The admission decision carries it (decision.halt) and Go
#   records the halt on the run: a failed gate is a fact about the run, not
#   about the request, so it halts whatever else the request got wrong, and
#   consumes nothing. Undefined otherwise.
halt := {"failed_evals": report_verdict.failed_evals} if {
	input.request.action == "train.stage.advance"
	_is_live
	count(report_verdict.problems) == 0
	count(report_verdict.failed_evals) > 0
}

_failed_metrics contains e.metric if {
	_report
	some e in _required_evals
	not is_number(object.get(_results, e.metric, null))
}

_failed_metrics contains e.metric if {
	_report
	some e in _required_evals
	value := object.get(_results, e.metric, null)
	is_number(value)
	is_number(e.min)
	value < e.min
}

_failed_metrics contains e.metric if {
	_report
	some e in _required_evals
	value := object.get(_results, e.metric, null)
	is_number(value)
	is_number(e.max)
	value > e.max
}
