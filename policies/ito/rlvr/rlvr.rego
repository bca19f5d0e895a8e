# METADATA
# title: RLVR recipe gate
# description: >-
#   For train.create with an RLVR stage (objective.stage, post_training or
#   stages): the manifest's rlvr block must name a supported algorithm
#   (data.ito.config.rlvr.algorithms: GRPO), declare the DAPO stability
#   options the bundle requires (Clip-Higher, Dynamic Sampling, token-level
#   loss, overlong reward shaping), run trainer and rollout on separate
#   workers and bound the rollout policy's staleness (steps) within the
#   bundle's max_staleness_steps.
package ito.rlvr

import data.ito.lib

_cfg := data.ito.config.rlvr

_rl := lib.value_at(input, ["manifest", "rlvr"], null)

_has_rlvr_stage if input.manifest.objective.stage == "rlvr"

_has_rlvr_stage if {
	some s in input.manifest.post_training
	s.stage == "rlvr"
}

_has_rlvr_stage if "rlvr" in input.manifest.stages

# METADATA
# title: RLVR recipe missing
# description: The manifest has an RLVR stage but no rlvr block.
# custom:
#   code: RLVR_RECIPE_MISSING
#   gate: rlvr
#   fix: Add an rlvr block (algorithm, dapo options, rollout separation and max staleness).
deny contains v if {
	_has_rlvr_stage
	not is_object(_rl)
	v := lib.violation(rego.metadata.rule(), "the manifest has an rlvr stage but no rlvr recipe")
}

# METADATA
# title: RLVR algorithm not supported
# description: rlvr.algorithm is not one of data.ito.config.rlvr.algorithms.
# custom:
#   code: RLVR_ALGORITHM_UNSUPPORTED
#   gate: rlvr
deny contains v if {
	_has_rlvr_stage
	is_object(_rl)
	not lib.value_at(_rl, ["algorithm"], null) in _cfg.algorithms
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("rlvr.algorithm %s is not supported", [lib.show(object.get(_rl, "algorithm", null))]),
		sprintf("use one of %s", [concat(", ", _cfg.algorithms)]),
	)
}

# METADATA
# title: DAPO stability options not declared
# description: An option of required_dapo_options is not declared true in rlvr.dapo.
# custom:
#   code: RLVR_DAPO_OPTIONS_MISSING
#   gate: rlvr
deny contains v if {
	_has_rlvr_stage
	is_object(_rl)
	missing := [o | some o in _cfg.required_dapo_options; not lib.value_at(_rl, ["dapo", o], null) == true]
	count(missing) > 0
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("rlvr.dapo does not declare %s", [concat(", ", missing)]),
		sprintf("turn on %s in rlvr.dapo (DAPO's stability fixes for GRPO)", [concat(", ", missing)]),
	)
}

# METADATA
# title: Trainer and rollout not separated
# description: rlvr.rollout.separated must be true (rollout generation on its own workers).
# custom:
#   code: RLVR_ROLLOUT_NOT_SEPARATED
#   gate: rlvr
#   fix: Run rollout generation on workers separate from the trainer and set rlvr.rollout.separated to true.
deny contains v if {
	_has_rlvr_stage
	is_object(_rl)
	not lib.value_at(_rl, ["rollout", "separated"], null) == true
	v := lib.violation(rego.metadata.rule(), "rlvr.rollout.separated is not true")
}

# METADATA
# title: Rollout staleness unbounded or too high
# description: rlvr.rollout.max_staleness_steps must be an integer from 0 to the bundle's max_staleness_steps.
# custom:
#   code: RLVR_STALENESS_EXCEEDED
#   gate: rlvr
deny contains v if {
	_has_rlvr_stage
	is_object(_rl)
	not _is_staleness_ok(lib.value_at(_rl, ["rollout", "max_staleness_steps"], null))
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("rlvr.rollout.max_staleness_steps is %s; the bound is %d", [
			lib.show(lib.value_at(_rl, ["rollout", "max_staleness_steps"], null)), _cfg.max_staleness_steps,
		]),
		sprintf("set rlvr.rollout.max_staleness_steps to at most %d", [_cfg.max_staleness_steps]),
	)
}

_is_staleness_ok(n) if {
	is_number(n)
	n == floor(n)
	n >= 0
	n <= _cfg.max_staleness_steps
}
