package ito.lifecycle_test

import data.ito.admission
import data.ito.lifecycle

# A run checkpointing every 500 of 1000 steps, 6 h, 1800 s lost per restart.
_plan := {"interval_steps": 500, "steps": 1000, "wall_clock_seconds": 21600, "lost_seconds_per_restart": 1800}

_restart(step, restarts, plan) := json.patch(data.ito.testdata.base.input, [
	{"op": "add", "path": "/request/action", "value": "train.restart"},
	{"op": "add", "path": "/request/run_id", "value": "run_01"},
	{"op": "add", "path": "/request/checkpoint_step", "value": step},
	{"op": "add", "path": "/ledger/run", "value": {
		"state": "live", "stage": "pretrain", "manifest_digest": data.ito.testdata.base.input.manifest_digest,
		"restarts": restarts, "checkpoint": plan,
	}},
])

_codes(inp) := {v.code | some v in lifecycle.deny with input as inp}

test_restart_steps_on_the_plan[step] if {
	some step in [500, 1000]
	not "RESTART_STEP_OFF_PLAN" in _codes(_restart(step, 0, _plan))
}

test_restart_steps_off_the_plan[name] if {
	some name, tc in {
		"step 0": {"step": 0, "fix": "restart from a multiple of 500 up to 1000"},
		"step 7": {"step": 7, "fix": "restart from a multiple of 500 up to 1000"},
		"step 499": {"step": 499, "fix": "restart from a multiple of 500 up to 1000"},
		"step 501": {"step": 501, "fix": "restart from step 500, the last checkpoint at or before step 501"},
		"step 1500": {"step": 1500, "fix": "restart from step 1000, the last checkpoint at or before step 1500"},
		"step 2^53-1": {"step": 9007199254740991, "fix": "restart from step 1000, the last checkpoint at or before step 9007199254740991"},
	}
	[v | some v in lifecycle.deny with input as _restart(tc.step, 0, _plan); v.code == "RESTART_STEP_OFF_PLAN"] == [{
		"code": "RESTART_STEP_OFF_PLAN", "gate": "lifecycle",
		"message": sprintf("step %d is no checkpoint of this run: it writes one every 500 steps up to step 1000", [tc.step]),
		"fix": tc.fix,
	}]
}

# A run admitted before plans were recorded: its steps are not checked.
test_restart_without_a_plan_is_not_checked if {
	none := {"interval_steps": 0, "steps": 0, "wall_clock_seconds": 0, "lost_seconds_per_restart": 0}
	codes := _codes(_restart(7, 12, none))
	not "RESTART_STEP_OFF_PLAN" in codes
	not "RESTART_BUDGET_EXCEEDED" in codes
	d := admission.decision with input as _restart(7, 12, none)
	d.estimates == {}
}

# 21600 s of wall clock hold twelve restarts of 1800 s; the thirteenth is
# denied naming the figures.
test_restart_budget if {
	lifecycle.restart_budget == 12 with input as _restart(500, 0, _plan)
	not "RESTART_BUDGET_EXCEEDED" in _codes(_restart(500, 11, _plan))
	[v.message | some v in lifecycle.deny with input as _restart(500, 12, _plan); v.code == "RESTART_BUDGET_EXCEEDED"] == [
		"restart 13 of this run is past its budget of 12 restarts: 13 × 1800 s expected lost work = 23400 s of its 21600 s wall clock, above the 100% it may lose",
	]
	d := admission.decision with input as _restart(500, 1, _plan)
	d.estimates == {"restart_budget": 12, "restart_number": 2, "restart_lost_seconds": 3600}
}

# A run whose restarts lose next to nothing is capped by max_count.
test_restart_budget_is_capped if {
	cheap := object.union(_plan, {"lost_seconds_per_restart": 1})
	lifecycle.restart_budget == 64 with input as _restart(500, 0, cheap)
	unpriced := object.union(_plan, {"lost_seconds_per_restart": 0})
	lifecycle.restart_budget == 64 with input as _restart(500, 0, unpriced)
	"RESTART_BUDGET_EXCEEDED" in _codes(_restart(500, 64, unpriced))
}
