# METADATA
# title: Checkpoint and fault-tolerance gate
# description: >-
#   For train.create: what checkpointing costs the run and how much work a
#   failure loses, from the manifest's checkpoint policy, the model and the
#   storage tier's bandwidth (data.ito.tables.storage). Thresholds live in
#   data.ito.config.checkpoint. The storage COST is the budget gate's (one
#   formula); this gate computes sizes and times.
#
#   size_gib      = max(checkpoint.size_estimate_gib, P × (model + optimizer bytes per param) / 2^30)
#                   (12 bytes: fp32 parameters + Adam's two fp32 moments; ZeRO, Rajbhandari et al. 2020, §3.1)
#   write_bw      = min(nodes × tier write GB/s per node, tier aggregate GB/s)      (read_bw alike)
#   write_s       = size_gib × 2^30 / 10^9 / write_bw
#   resume_s      = restart_s + size_gib × 2^30 / 10^9 / read_bw
#                   (restart_s: checkpoint.restart_overhead_seconds, else the bundle's restart_overhead_seconds)
#   detection_s   = checkpoint.failure_detection_seconds (default: PyTorch's NCCL timeout, 600 s)
#   steps         = objective.max_steps, or ceil(max_tokens / (global batch × sequence)) when smaller
#   step_s        = max_wall_clock_hours × 3600 / steps
#   interval_s    = checkpoint.interval_steps × step_s
#   stall_s       = 0 with async checkpoints, write_s without
#   lost_s        = interval_s / 2 + detection_s + resume_s      (expected work lost per failure)
#   lost_fraction = W × lost_s / 3600 / gpu_hours_between_failures
#                   (expected share of the run lost to failures; Llama 3 failure rate)
#   goodput       = max(0, 1 − lost_fraction)                  (expected share of the run's GPU time kept)
#
#   Signed telemetry: when the entitlement carries a telemetry claim that is
#   well-formed, within data.ito.config.checkpoint.telemetry's bounds and
#   fresh, gpu_hours_between_failures = 1 / telemetry.interruptions_per_gpu_hour
#   and a tier's write GB/s per node = telemetry.checkpoint_write_gbytes_per_s_per_node[tier]
#   (each when the claim has it); else the bundle's data. The facts record
#   which (failure_rate_source, write_bandwidth_source); the entitlement gate
#   denies a malformed or stale claim.
package ito.checkpoint

import data.ito.lib

_m := lib.train_manifest

_ckpt := _m.checkpoint

_cfg := data.ito.config.checkpoint

_has_policy if is_object(_ckpt)

# METADATA
# title: Checkpoint size (GiB)
# description: The larger of the declared size and P × bytes per parameter / 2^30 (input.facts.checkpoint.size_gib).
size_gib := _f.size_gib

# METADATA
# title: Checkpoint write time (seconds)
# description: size at the tier's write bandwidth for the run's nodes (input.facts.checkpoint.write_seconds).
write_seconds := _f.write_seconds

# METADATA
# title: Resume time (seconds)
# description: restart overhead + size at the tier's read bandwidth for the run's nodes.
resume_seconds := _f.resume_seconds

# METADATA
# title: Failure detection time (seconds)
# description: checkpoint.failure_detection_seconds, or the default from bundle data.
detection_seconds := _f.detection_seconds

# METADATA
# title: Checkpoint interval (seconds)
# description: interval_steps × the run's seconds per step (wall-clock budget / steps).
interval_seconds := _f.interval_seconds

# METADATA
# title: Expected work lost per failure (seconds)
# description: half an interval + detection + resume.
lost_seconds := _f.lost_seconds

# METADATA
# title: Expected share of the run lost to failures
# description: W × lost hours per failure / GPU-hours between failures.
lost_fraction := _f.lost_fraction

# METADATA
# title: Expected goodput
# description: max(0, 1 − lost_fraction), the expected share of the run's GPU time not lost to failures.
goodput := _f.goodput

# METADATA
# title: Telemetry status
# description: >-
#   The entitlement's telemetry claim: none (absent), used, malformed
#   (ill-formed or out of the bundle's bounds) or stale (older than
#   telemetry.max_age_seconds).
telemetry_status := _f.telemetry

# METADATA
# title: Checkpoint storage region
# description: checkpoint.storage_region, or the booking's region when none is declared (a bucket beside the cluster).
storage_region := _f.storage_region

# METADATA
# title: GiB written across regions
# description: >-
#   Checkpoints written to a store outside the booking's region:
#   floor(steps / interval_steps) × ceil(size_gib); 0 in the same region.
#   The budget gate prices it at the egress price.
remote_write_gib := _f.remote_write_gib

_tier_name := _f.tier

_tier := data.ito.tables.storage[_tier_name]

_step_seconds := _f.step_seconds

_stall_seconds := _f.stall_seconds

_world_size := _f.world_size

_quota_gib := _f.quota_gib

_needed_gib := _f.needed_gib

# METADATA
# title: Checkpoint estimates
# description: Sizes (GiB), times (seconds) and the lost-work share, rounded to 2 decimals, for train.create.
estimates := {
	"checkpoint_size_gib": _f.rounded.size_gib, "checkpoint_storage_tier": _f.tier,
	"checkpoint_write_seconds": _f.rounded.write_seconds, "checkpoint_resume_seconds": _f.rounded.resume_seconds,
	"checkpoint_detection_seconds": _f.detection_seconds, "checkpoint_interval_seconds": _f.rounded.interval_seconds,
	"checkpoint_lost_seconds_per_failure": _f.rounded.lost_seconds,
	"checkpoint_lost_fraction": _f.rounded.lost_fraction, "expected_goodput": _f.rounded.goodput,
	"checkpoint_failure_rate_source": _f.failure_rate_source,
	"checkpoint_write_bandwidth_source": _f.write_bandwidth_source,
	"checkpoint_remote_write_gib": _f.remote_write_gib, "checkpoint_needed_gib": ceil(_f.needed_gib),
	"checkpoint_quota_gib": floor(_f.quota_gib),
} if _f

# with a fact missing, one rule per key (_estimates below): only its key is left out
else := {k: v | some k, v in _estimates}

_estimates["checkpoint_size_gib"] := _f.rounded.size_gib

_estimates["checkpoint_storage_tier"] := _tier_name

_estimates["checkpoint_write_seconds"] := _f.rounded.write_seconds

_estimates["checkpoint_resume_seconds"] := _f.rounded.resume_seconds

_estimates["checkpoint_detection_seconds"] := detection_seconds

_estimates["checkpoint_interval_seconds"] := _f.rounded.interval_seconds

_estimates["checkpoint_lost_seconds_per_failure"] := _f.rounded.lost_seconds

_estimates["checkpoint_lost_fraction"] := _f.rounded.lost_fraction

# the expected share of the run's GPU time not lost to failures (4 decimals)
_estimates["expected_goodput"] := _f.rounded.goodput

# where the failure rate and the run's tier's write bandwidth came from:
# "telemetry" (the entitlement's signed claim) or "bundle" (bundle data)
_estimates["checkpoint_failure_rate_source"] := _f.failure_rate_source

_estimates["checkpoint_write_bandwidth_source"] := _f.write_bandwidth_source

_estimates["checkpoint_remote_write_gib"] := remote_write_gib

# what the ledger records and re-checks at commit (whole GiB)
_estimates["checkpoint_needed_gib"] := _needed_whole_gib

_estimates["checkpoint_quota_gib"] := _quota_whole_gib

# ---------------------------------------------------------------------------
# Checks

# METADATA
# title: Checkpoint storage tier unknown
# description: >-
#   The checkpoint's storage tier (checkpoint.storage_tier, or the default
#   for the storage URI's scheme) is not in the storage table, so its write
#   and resume times cannot be computed.
# custom:
#   code: CHECKPOINT_STORAGE_TIER_UNKNOWN
#   gate: checkpoint
deny contains v if {
	not _tier
	_has_policy
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("checkpoint storage tier %s is not in the storage table", [lib.show(object.get(
			_ckpt, "storage_tier",
			object.get(_cfg.default_storage_tiers, [_scheme], null),
		))]),
		sprintf("set checkpoint.storage_tier to one of %s", [concat(", ", sort(object.keys(data.ito.tables.storage)))]),
	)
}

# METADATA
# title: Checkpoint size underestimated
# description: >-
#   checkpoint.size_estimate_gib is below the model and optimizer states a
#   checkpoint holds (P × bytes per parameter); storage would be under-priced.
# custom:
#   code: CHECKPOINT_SIZE_UNDERESTIMATED
#   gate: checkpoint
deny contains v if {
	_f.declared_gib < _f.computed_gib
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("checkpoint.size_estimate_gib %v is below %v GiB (%d parameters × %d bytes of model and optimizer state)", [
			_f.declared_gib, lib.round2(_f.computed_gib), _m.model.parameters, _bytes_per_param,
		]),
		sprintf("set checkpoint.size_estimate_gib to at least %d", [ceil(_f.computed_gib)]),
	)
}

# METADATA
# title: Failure detection too slow
# description: The failure-detection timeout exceeds failure_detection_max_seconds (bundle data, 10 minutes).
# custom:
#   code: CHECKPOINT_DETECTION_TOO_SLOW
#   gate: checkpoint
deny contains v if {
	_f.detection_seconds > data.ito.config.checkpoint.failure_detection_max_seconds
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("a failure is detected after %v s, above the %v s limit", [
			detection_seconds, _cfg.failure_detection_max_seconds,
		]),
		sprintf("set checkpoint.failure_detection_seconds (the collective timeout) to at most %v", [
			_cfg.failure_detection_max_seconds,
		]),
	)
}

# METADATA
# title: Resume too slow
# description: >-
#   Restart overhead plus reading the checkpoint at the tier's bandwidth takes
#   longer than resume_max_seconds (bundle data, 15 minutes).
# custom:
#   code: CHECKPOINT_RESUME_TOO_SLOW
#   gate: checkpoint
deny contains v if {
	_f.resume_seconds > data.ito.config.checkpoint.resume_max_seconds
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("resuming takes %v s (%v GiB from %s), above the %v s limit", [
			_f.rounded.resume_seconds, _f.rounded.size_gib, _tier_name, _cfg.resume_max_seconds,
		]),
		_faster_tier_fix,
	)
}

_fast_enough_tiers := sort([name |
	some name, seconds in _f.resume_seconds_by_tier
	seconds <= _cfg.resume_max_seconds
])

_faster_tier_fix := sprintf("use a faster storage tier (%s)", [concat(", ", _fast_enough_tiers)]) if {
	count(_fast_enough_tiers) > 0
}

_faster_tier_fix := concat("", [
	"no storage tier resumes this checkpoint in time: ",
	"shrink it (fewer optimizer states) or add nodes",
]) if {
	count(_fast_enough_tiers) == 0
}

# METADATA
# title: Checkpoint write slower than the interval
# description: Writing one checkpoint takes longer than the interval between checkpoints; checkpoints pile up.
# custom:
#   code: CHECKPOINT_WRITE_EXCEEDS_INTERVAL
#   gate: checkpoint
deny contains v if {
	_f.write_seconds > _f.interval_seconds
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("writing a checkpoint takes %v s but one is due every %v s", [
			_f.rounded.write_seconds, _f.rounded.interval_seconds,
		]),
		sprintf("raise checkpoint.interval_steps to at least %d, or use a faster storage tier", [
			ceil(write_seconds / _step_seconds),
		]),
	)
}

# METADATA
# title: Synchronous checkpoint stalls training
# description: >-
#   Without async checkpoints training stops while each one is written; the
#   stall is above sync_overhead_deny_fraction of the interval.
# custom:
#   code: CHECKPOINT_SYNC_OVERHEAD_HIGH
#   gate: checkpoint
deny contains v if {
	_f.stall_seconds > _stall_deny_seconds
	v := lib.violation_fix(rego.metadata.rule(), _stall_message, _stall_fix)
}

# METADATA
# title: Synchronous checkpoint stalls training
# description: The stall is above sync_overhead_warn_fraction of the interval (and not above the deny fraction).
# custom:
#   code: CHECKPOINT_SYNC_OVERHEAD_HIGH
#   gate: checkpoint
#   level: warn
warn contains v if {
	_f.stall_seconds > data.ito.config.checkpoint.sync_overhead_warn_fraction * _f.interval_seconds
	_f.stall_seconds <= _stall_deny_seconds
	v := lib.violation_fix(rego.metadata.rule(), _stall_message, _stall_fix)
}

# the stall above the deny fraction of the interval (one product for the deny and the warn)
_stall_deny_seconds := data.ito.config.checkpoint.sync_overhead_deny_fraction * _f.interval_seconds

# a stall is the write of a synchronous checkpoint, so its rounded figure is write_seconds
_stall_message := sprintf("each synchronous checkpoint stops training for %v s of every %v s", [
	_f.rounded.write_seconds, _f.rounded.interval_seconds,
])

_stall_fix := sprintf(
	"set checkpoint.async to true, or raise interval_steps to at least %d, or use a faster storage tier",
	[ceil(_stall_seconds / (_cfg.sync_overhead_warn_fraction * _step_seconds))],
)

# METADATA
# title: Too much work lost to failures
# description: >-
#   The expected share of the run lost to failures (lost_fraction) is above
#   lost_work_deny_fraction.
# custom:
#   code: CHECKPOINT_LOST_WORK_HIGH
#   gate: checkpoint
deny contains v if {
	_f.lost_fraction > data.ito.config.checkpoint.lost_work_deny_fraction
	v := lib.violation_fix(rego.metadata.rule(), _lost_message, _lost_fix)
}

# METADATA
# title: Too much work lost to failures
# description: lost_fraction is above lost_work_warn_fraction (and not above the deny fraction).
# custom:
#   code: CHECKPOINT_LOST_WORK_HIGH
#   gate: checkpoint
#   level: warn
warn contains v if {
	_f.lost_fraction > data.ito.config.checkpoint.lost_work_warn_fraction
	_f.lost_fraction <= data.ito.config.checkpoint.lost_work_deny_fraction
	v := lib.violation_fix(rego.metadata.rule(), _lost_message, _lost_fix)
}

_lost_message := sprintf(
	concat("", [
		"a failure loses %v s of %d GPUs (interval %v s, detection %v s, resume %v s): %v %% of the run is expected lost",
		" at one failure per %v GPU-hours (%s)",
	]),
	[
		_f.rounded.lost_seconds, _world_size, _f.rounded.interval_seconds, detection_seconds,
		_f.rounded.resume_seconds, lib.round2(lost_fraction * 100),
		lib.round2(_f.gpu_hours_between_failures), _failure_rate_text[_f.failure_rate_source],
	],
)

_failure_rate_text := {"telemetry": "the booking's signed telemetry", "bundle": "bundle data"}

# The fix is solved for the threshold the finding crosses: a deny's names
# the longest interval that clears the deny (and the one that also clears
# the warning), a warning's the one that clears the warning. Solved from
# lost_fraction = W × (interval_s / 2 + detection_s + resume_s) / 3600 / G
# for interval_s, rounded down to whole steps, and checked with the model's
# own formula (a float rounding up past the threshold takes one step less).
_lost_fix := text if {
	lost_fraction > _cfg.lost_work_deny_fraction
	n := _clearing_steps(_cfg.lost_work_deny_fraction)
	n >= 1
	text := sprintf("lower checkpoint.interval_steps to at most %d%s", [n, _warn_steps_text])
} else := text if {
	lost_fraction <= _cfg.lost_work_deny_fraction
	n := _clearing_steps(_cfg.lost_work_warn_fraction)
	n >= 1
	text := sprintf("lower checkpoint.interval_steps to at most %d", [n])
} else := sprintf(
	concat("", [
		"no interval is short enough: a one-step interval loses %v s per failure (half of a %v s step,",
		" detection %v s, resume %v s), above the %v s that %d GPUs may lose; lower",
		" checkpoint.failure_detection_seconds or checkpoint.restart_overhead_seconds,",
		" use a faster storage tier, or use at most %d GPUs",
	]),
	[
		lib.round2(_one_step_lost_seconds), lib.round2(_step_seconds), detection_seconds,
		_f.rounded.resume_seconds, lib.round2(_lost_budget_seconds(_limit)), _world_size, _max_gpus,
	],
)

_limit := _cfg.lost_work_deny_fraction if lost_fraction > _cfg.lost_work_deny_fraction

else := _cfg.lost_work_warn_fraction

_warn_steps_text := sprintf(" (at most %d also clears the warning)", [n]) if {
	n := _clearing_steps(_cfg.lost_work_warn_fraction)
	n >= 1
} else := ""

# the seconds a failure may lose with lost_fraction at `fraction`
_lost_budget_seconds(fraction) := ((fraction * _f.gpu_hours_between_failures) * 3600) / _world_size

# the most whole steps per interval with lost_fraction at most `fraction`
_clearing_steps(fraction) := n if {
	n := _max_interval_steps(fraction)
	_lost_fraction_at(n) <= fraction
} else := _max_interval_steps(fraction) - 1

_max_interval_steps(fraction) := floor(seconds / _step_seconds) if {
	seconds := 2 * ((_lost_budget_seconds(fraction) - detection_seconds) - resume_seconds)
}

# lost_fraction with interval_steps = n, in the model's order of operations
_lost_fraction_at(n) := ((_world_size * lost) / 3600) / _f.gpu_hours_between_failures if {
	lost := (((n * _step_seconds) / 2) + detection_seconds) + resume_seconds
}

_one_step_lost_seconds := ((_step_seconds / 2) + detection_seconds) + resume_seconds

# the most GPUs for which a one-step interval stays within the limit
_max_gpus := floor(((_limit * _f.gpu_hours_between_failures) * 3600) / _one_step_lost_seconds)

# METADATA
# title: Checkpoint storage quota exceeded
# description: >-
#   size × retention, with the checkpoints the booking's live runs keep,
#   exceeds the booking's storage quota: the entitlement's storage_quota_gib,
#   else the tier's quota_gib (in whole GiB: the run's rounded up, the quota
#   down). The ledger decides the same again at commit.
# custom:
#   code: CHECKPOINT_CAPACITY_EXCEEDED
#   gate: checkpoint
deny contains v if {
	ceil(_f.needed_gib) + _held_gib > floor(_f.quota_gib)
	v := lib.violation_fix(rego.metadata.rule(), _capacity_message, sprintf(
		"lower checkpoint.retention to at most %d, or get a larger storage quota",
		[max([0, floor((_quota_whole_gib - _held_gib) / size_gib)])],
	))
}

_capacity_message := sprintf("keeping %d checkpoints of %v GiB needs %v GiB, above the %v GiB quota", [
	_ckpt.retention, _f.rounded.size_gib, lib.round2(_needed_gib), _quota_gib,
]) if {
	_held_gib == 0
} else := sprintf(
	"keeping %d checkpoints of %v GiB needs %d GiB; with the %d GiB the booking's live runs keep, above the %v GiB quota",
	[_ckpt.retention, _f.rounded.size_gib, _needed_whole_gib, _held_gib, _quota_gib],
)

# METADATA
# title: Checkpoints written to another region
# description: >-
#   The checkpoint store is outside the booking's region; every checkpoint
#   crosses regions, and the budget gate prices that egress.
# custom:
#   code: CHECKPOINT_REGION_REMOTE
#   gate: checkpoint
#   level: warn
#   fix: Keep checkpoints in the booking's region (checkpoint.storage_region).
warn contains v if {
	_f.storage_region != input.entitlement.region
	v := lib.violation(rego.metadata.rule(), sprintf(
		"checkpoints go to region %s, the booking is in %s (%v GiB cross regions)",
		[lib.show(storage_region), lib.show(input.entitlement.region), remote_write_gib],
	))
}
