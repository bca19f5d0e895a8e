# Restarts within the checkpoint plan: a train.restart's step must be one
# the run's checkpoint plan writes, as its train.create recorded it in the
# ledger (input.ledger.run.checkpoint), and the run's restarts stay within
# a budget priced with the checkpoint gate's lost-work estimate
# (data.ito.config.lifecycle.restarts). The ledger re-checks both at commit.
# Part of package ito.lifecycle (see lifecycle.rego).
package ito.lifecycle

import data.ito.lib

_plan := lib.value_at(input, ["ledger", "run", "checkpoint"], {})

_has_plan if {
	lib.is_count(_plan.interval_steps)
	lib.is_count(_plan.steps)
}

_step := lib.value_at(input, ["request", "checkpoint_step"], null)

_is_planned_step if {
	lib.is_count(_step)
	_step <= _plan.steps
	_step % _plan.interval_steps == 0
}

# METADATA
# title: Restart step off the checkpoint plan
# description: >-
#   A train.restart starts from a step the run's checkpoint plan writes, as
#   the ledger recorded it at train.create (input.ledger.run.checkpoint): a
#   positive multiple of checkpoint.interval_steps within the run's steps
#   (objective.max_steps, or the optimizer steps its max_tokens take when
#   fewer), counted as the run's global step across its stages. The ledger
#   checks it again at commit.
# custom:
#   code: RESTART_STEP_OFF_PLAN
#   gate: lifecycle
deny contains v if {
	input.request.action == "train.restart"
	_has_plan
	not _is_planned_step
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("step %s is no checkpoint of this run: it writes one every %d steps up to step %d", [
			lib.show(_step), _plan.interval_steps, _plan.steps,
		]),
		_plan_fix,
	)
}

_plan_fix := sprintf("restart from step %d, the last checkpoint at or before step %v", [
	_last_checkpoint, _step,
]) if {
	is_number(_step)
	_last_checkpoint > 0
}

else := sprintf("restart from a multiple of %d up to %d", [_plan.interval_steps, _plan.steps])

_last_checkpoint := min([
	_plan.steps - (_plan.steps % _plan.interval_steps),
	_step - (_step % _plan.interval_steps),
]) if {
	is_number(_step)
	_step >= 0
	_step == floor(_step)
}

# METADATA
# title: Restart budget
# description: >-
#   The most restarts a run may have: its restarts may together lose at
#   most data.ito.config.lifecycle.restarts.max_lost_fraction of its
#   declared wall clock, each priced with the checkpoint gate's expected
#   work lost per failure (recorded on the run), and never more than
#   max_count. Undefined for a run without a checkpoint plan.
restart_budget := min([_cfg.restarts.max_count, _priced_budget]) if {
	_has_plan
	_is_priced
}

_priced_budget := floor((_cfg.restarts.max_lost_fraction * _plan.wall_clock_seconds) / _plan.lost_seconds_per_restart)

restart_budget := _cfg.restarts.max_count if {
	_has_plan
	not _is_priced
}

_is_priced if {
	lib.is_count(_plan.wall_clock_seconds)
	lib.is_count(_plan.lost_seconds_per_restart)
}

_restarts := n if {
	n := input.ledger.run.restarts
	is_number(n)
}

# METADATA
# title: Restart budget exhausted
# description: >-
#   The run already had as many restarts as its budget (restart_budget)
#   allows: this restart would lose more of its wall clock than bundle data
#   lets a run's restarts lose. The ledger checks the budget again at
#   commit, so racing restarts cannot pass it.
# custom:
#   code: RESTART_BUDGET_EXCEEDED
#   gate: lifecycle
#   fix: >-
#     Cancel the run and find why it keeps failing; a new run with more
#     frequent (or asynchronous) checkpoints loses less work per restart.
deny contains v if {
	input.request.action == "train.restart"
	_restarts + 1 > restart_budget
	v := lib.violation(rego.metadata.rule(), sprintf(
		concat("", [
			"restart %d of this run is past its budget of %d restarts: %d × %d s expected lost work",
			" = %d s of its %d s wall clock, above the %v%% it may lose",
		]),
		[
			_restarts + 1, restart_budget, _restarts + 1, _plan.lost_seconds_per_restart,
			(_restarts + 1) * _plan.lost_seconds_per_restart, _plan.wall_clock_seconds,
			_cfg.restarts.max_lost_fraction * 100,
		],
	))
}

# METADATA
# title: Restart estimates
# description: >-
#   For a train.restart of a run with a plan: restart_budget (which the
#   ledger re-checks at commit), the restart's number and the work the
#   run's restarts are expected to lose with it.
estimates := {
	"restart_budget": restart_budget,
	"restart_number": _restarts + 1,
	"restart_lost_seconds": (_restarts + 1) * _plan.lost_seconds_per_restart,
} if {
	input.request.action == "train.restart"
	restart_budget
}
