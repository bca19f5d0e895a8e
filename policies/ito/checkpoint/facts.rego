# The checkpoint model: sizes, times and the work lost to failures (the formulas of the package METADATA).
# Part of package ito.checkpoint (see checkpoint.rego for the checks).
package ito.checkpoint

import data.ito.lib

# The checks read the model's figures from _f: Go's input.facts.checkpoint
# (gatekeeper/trainfacts, computed once per decision from this bundle's
# data), or, for an input without facts (opa test, opa eval),
# facts_reference, the formulas below. TestFactsMatchReference holds Go's
# facts byte-identical to facts_reference.
_f := f if {
	f := input.facts.checkpoint
} else := facts_reference if {
	not input.facts
}

# METADATA
# title: Checkpoint facts (Rego reference)
# description: >-
#   The checkpoint model's figures by the formulas below: what Go computes as
#   input.facts.checkpoint (policies/README.md names the Go function of
#   each). Keys are absent when a figure is undefined.
facts_reference := {k: v | some k, v in _reference}

_reference["computed_gib"] := _computed_gib

_reference["declared_gib"] := _declared_gib

_reference["size_gib"] := _size_gib

_reference["size_gb"] := _size_gb

_reference["tier"] := _model_tier_name

_reference["write_seconds"] := _write_seconds

_reference["resume_seconds"] := _resume_seconds_of_tier

_reference["resume_seconds_by_tier"] := {name: seconds |
	some name, tier in data.ito.tables.storage
	seconds := _resume_seconds(tier)
}

_reference["detection_seconds"] := _detection_seconds

_reference["steps"] := _steps

_reference["step_seconds"] := _model_step_seconds

_reference["interval_seconds"] := _interval_seconds

_reference["stall_seconds"] := _model_stall_seconds

_reference["lost_seconds"] := _lost_seconds

_reference["world_size"] := _model_world_size

_reference["lost_fraction"] := _lost_fraction

_reference["goodput"] := _goodput

_reference["telemetry"] := _telemetry_status

_reference["failure_rate_source"] := _failure_rate_source

_reference["gpu_hours_between_failures"] := _gpu_hours_between_failures

_reference["write_bandwidth_source"] := _write_bandwidth_source

_reference["storage_region"] := _storage_region

_reference["remote_write_gib"] := _remote_write_gib

_reference["quota_gib"] := _model_quota_gib

_reference["needed_gib"] := _model_needed_gib

# the figures the decision's estimates show, rounded to 2 decimals (lib.round2)
_reference["rounded"] := {k: v | some k, v in _rounded}

_rounded["size_gib"] := lib.round2(_size_gib)

_rounded["write_seconds"] := lib.round2(_write_seconds)

_rounded["resume_seconds"] := lib.round2(_resume_seconds_of_tier)

_rounded["interval_seconds"] := lib.round2(_interval_seconds)

_rounded["lost_seconds"] := lib.round2(_lost_seconds)

# as a share with 2 decimals of percent
_rounded["lost_fraction"] := lib.round2(_lost_fraction * 100) / 100

_rounded["goodput"] := lib.round2(_goodput * 100) / 100

_gib := 1073741824

# ---------------------------------------------------------------------------
# Size

_bytes_per_param := _cfg.model_bytes_per_param + _cfg.optimizer_bytes_per_param

_computed_gib := (_m.model.parameters * _bytes_per_param) / _gib if lib.is_count(_m.model.parameters)

_declared_gib := _ckpt.size_estimate_gib if {
	is_number(_ckpt.size_estimate_gib)
	_ckpt.size_estimate_gib >= 0
}

_size_gib := max([_declared_gib, _computed_gib])

_size_gb := (_size_gib * _gib) / 1000000000

# ---------------------------------------------------------------------------
# Storage tier and its bandwidth

_scheme := lower(parts[0]) if {
	is_string(_ckpt.storage_uri)
	parts := split(_ckpt.storage_uri, "://")
	count(parts) > 1
}

_model_tier_name := _ckpt.storage_tier if is_string(_ckpt.storage_tier)

# (`not is_string(x.y)` is not true when x.y is undefined: read it with object.get)
_model_tier_name := _cfg.default_storage_tiers[_scheme] if not is_string(object.get(_ckpt, "storage_tier", null))

_model_tier := data.ito.tables.storage[_model_tier_name]

_nodes := _m.hardware.nodes if lib.is_count(_m.hardware.nodes)

_bandwidth(tier, per_node_key) := _bandwidth_at(tier[per_node_key], tier)

_bandwidth_at(per_node, tier) := min([_nodes * per_node, tier.aggregate_gbytes_per_s])

_write_seconds := _size_gb / _bandwidth_at(_write_gbytes_per_s_per_node, _model_tier)

# the run's tier's write bandwidth per node: the signed telemetry's
# measurement for the tier when it is used, else the storage table's
_write_bandwidth_source := "telemetry" if {
	is_number(_telemetry_used.checkpoint_write_gbytes_per_s_per_node[_model_tier_name])
} else := "bundle"

_write_gbytes_per_s_per_node := _telemetry_used.checkpoint_write_gbytes_per_s_per_node[_model_tier_name] if {
	_write_bandwidth_source == "telemetry"
} else := _model_tier.write_gbytes_per_s_per_node

_resume_seconds(tier) := _restart_seconds + (_size_gb / _bandwidth(tier, "read_gbytes_per_s_per_node"))

# the time from a failure's detection to training again, before the
# checkpoint is read: checkpoint.restart_overhead_seconds when the run
# declares it (a warm standby or a faster scheduler), else the bundle's
_restart_seconds := s if {
	s := _ckpt.restart_overhead_seconds
	lib.is_count(s)
} else := _cfg.restart_overhead_seconds if {
	not _ckpt.restart_overhead_seconds
}

_resume_seconds_of_tier := _resume_seconds(_model_tier)

_detection_seconds := _ckpt.failure_detection_seconds if lib.is_count(_ckpt.failure_detection_seconds)

_detection_seconds := _cfg.failure_detection_seconds_default if {
	_has_policy
	object.get(_ckpt, "failure_detection_seconds", null) == null
}

# ---------------------------------------------------------------------------
# Steps and intervals

_step_limits contains _m.objective.max_steps if lib.is_count(_m.objective.max_steps)

_step_limits contains lib.ceil_div(_m.objective.max_tokens, gbs * seq) if {
	lib.is_count(_m.objective.max_tokens)
	gbs := _m.objective.global_batch_size
	seq := _m.objective.sequence_length
	lib.is_count(gbs)
	lib.is_count(seq)
}

_steps := min(_step_limits) if count(_step_limits) > 0

_model_step_seconds := (_m.budget.max_wall_clock_hours * 3600) / _steps if {
	is_number(_m.budget.max_wall_clock_hours)
	_m.budget.max_wall_clock_hours > 0
}

_interval_seconds := _ckpt.interval_steps * _model_step_seconds if lib.is_count(_ckpt.interval_steps)

_is_async if _ckpt.async == true

_model_stall_seconds := 0 if _is_async

_model_stall_seconds := _write_seconds if not _is_async

_lost_seconds := ((_interval_seconds / 2) + _detection_seconds) + _resume_seconds_of_tier

_model_world_size := _nodes * _m.hardware.gpus_per_node if lib.is_count(_m.hardware.gpus_per_node)

_lost_fraction := ((_model_world_size * _lost_seconds) / 3600) / _gpu_hours_between_failures

# expected goodput: the share of the run's GPU time not lost to failures
_goodput := max([0, 1 - _lost_fraction])

_storage_region := _ckpt.storage_region if is_string(_ckpt.storage_region)

_storage_region := input.entitlement.region if {
	_has_policy
	not is_string(object.get(_ckpt, "storage_region", null))
}

_remote_write_gib := 0 if _storage_region == input.entitlement.region

_remote_write_gib := floor(_steps / _ckpt.interval_steps) * ceil(_size_gib) if {
	_storage_region != input.entitlement.region
	lib.is_count(_ckpt.interval_steps)
}

_model_quota_gib := input.entitlement.storage_quota_gib if is_number(input.entitlement.storage_quota_gib)

_model_quota_gib := _model_tier.quota_gib if {
	not is_number(lib.value_at(input, ["entitlement", "storage_quota_gib"], null))
}

_model_needed_gib := _size_gib * _ckpt.retention if lib.is_count(_ckpt.retention)

# ---------------------------------------------------------------------------
# Signed telemetry (the entitlement's telemetry claim)
#
# When the claim is present, well-formed, within the bounds of
# data.ito.config.checkpoint.telemetry and fresh, its interruption rate
# replaces gpu_hours_between_failures (as 1 / rate) and its write bandwidth
# per node replaces the storage table's for the tiers it names. "none": no
# claim (the bundle's data); "malformed" and "stale" are denied by the
# entitlement gate (ENTITLEMENT_TELEMETRY_MALFORMED, _STALE), never used.

_tcfg := _cfg.telemetry

_telemetry_measures := {"interruptions_per_gpu_hour", "checkpoint_write_gbytes_per_s_per_node"}

_telemetry_keys := _telemetry_measures | {"measured_at", "window_seconds"}

_has_telemetry if {
	is_object(input.entitlement)
	"telemetry" in object.keys(input.entitlement)
}

_telemetry := input.entitlement.telemetry

_is_telemetry_valid if {
	is_object(_telemetry)
	count(object.keys(_telemetry) - _telemetry_keys) == 0
	count(object.keys(_telemetry) & _telemetry_measures) > 0
	lib.is_count(_telemetry.measured_at)
	is_number(input.entitlement.iat)
	_telemetry.measured_at <= input.entitlement.iat
	lib.is_count(_telemetry.window_seconds)
	_telemetry.window_seconds >= _tcfg.min_window_seconds
	_is_rate_valid
	_is_write_valid
}

_is_rate_valid if not "interruptions_per_gpu_hour" in object.keys(_telemetry)

_is_rate_valid if _is_in_bounds(_telemetry.interruptions_per_gpu_hour, _tcfg.interruptions_per_gpu_hour)

_is_write_valid if not "checkpoint_write_gbytes_per_s_per_node" in object.keys(_telemetry)

_is_write_valid if {
	by_tier := _telemetry.checkpoint_write_gbytes_per_s_per_node
	is_object(by_tier)
	count(by_tier) > 0
	every tier, gbytes in by_tier {
		is_object(data.ito.tables.storage[tier])
		_is_in_bounds(gbytes, _tcfg.write_gbytes_per_s_per_node)
	}
}

_is_in_bounds(x, bounds) if {
	is_number(x)
	x >= bounds.min
	x <= bounds.max
}

_telemetry_status := "none" if not _has_telemetry

_telemetry_status := "malformed" if {
	_has_telemetry
	not _is_telemetry_valid
}

_telemetry_status := "stale" if {
	_is_telemetry_valid
	is_number(input.now)
	input.now - _telemetry.measured_at > _tcfg.max_age_seconds
}

_telemetry_status := "used" if {
	_is_telemetry_valid
	is_number(input.now)
	input.now - _telemetry.measured_at <= _tcfg.max_age_seconds
}

_telemetry_used := _telemetry if _telemetry_status == "used"

_failure_rate_source := "telemetry" if {
	is_number(_telemetry_used.interruptions_per_gpu_hour)
} else := "bundle"

_gpu_hours_between_failures := 1 / _telemetry_used.interruptions_per_gpu_hour if {
	_failure_rate_source == "telemetry"
} else := _cfg.gpu_hours_between_failures
