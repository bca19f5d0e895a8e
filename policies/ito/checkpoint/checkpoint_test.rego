package ito.checkpoint_test

import data.ito.checkpoint

_base := data.ito.testdata.base.input

_set(path, value) := {"op": "add", "path": path, "value": value}

# llama3-8b (torchtitan llama3_8b.toml): 8 nodes, 1000 steps in 6 h, a checkpoint every 500
# steps to S3; the declared 120 GiB is above 8.03e9 × 12 B = 89.74 GiB.
test_base_estimates if {
	e := checkpoint.estimates with input as _base
	e.checkpoint_size_gib == 120
	e.checkpoint_storage_tier == "s3-standard"
	e.checkpoint_write_seconds == 6.44 # 128.85 GB at min(8 × 2.5, 1000) GB/s
	e.checkpoint_resume_seconds == 306.44 # 300 s restart + the same read
	e.checkpoint_detection_seconds == 600
	e.checkpoint_interval_seconds == 10800 # 500 steps × 21.6 s
	e.checkpoint_lost_seconds_per_failure == 6306.44 # 5400 + 600 + 306.44
	e.checkpoint_remote_write_gib == 0
}

test_size_is_the_larger_of_declared_and_computed if {
	inp := json.patch(_base, [_set("/manifest/checkpoint/size_estimate_gib", 50)])
	checkpoint.size_gib == (8030000000 * 12) / 1073741824 with input as inp
}

test_fix_names_fast_enough_tiers if {
	inp := json.patch(_base, [
		_set("/manifest/checkpoint/storage_tier", "object-store-slow"),
		_set("/manifest/checkpoint/size_estimate_gib", 1052),
	])
	[v.fix | some v in checkpoint.deny with input as inp] == ["use a faster storage tier (gcs-standard, lustre, s3-standard)"]
}

test_no_tier_fast_enough if {
	inp := json.patch(_base, [
		_set("/manifest/checkpoint/storage_tier", "object-store-slow"),
		_set("/manifest/checkpoint/size_estimate_gib", 1000000),
		_set("/entitlement/storage_quota_gib", 10000000),
	])
	fixes := {v.fix | some v in checkpoint.deny with input as inp; v.code == "CHECKPOINT_RESUME_TOO_SLOW"}
	fixes == {"no storage tier resumes this checkpoint in time: shrink it (fewer optimizer states) or add nodes"}
}

test_lost_work_fix_is_the_longest_passing_interval if {
	inp := json.patch(_base, [
		_set("/manifest/budget/max_wall_clock_hours", 200),
		_set("/manifest/checkpoint/interval_steps", 1000),
	])
	fixes := [v.fix | some v in checkpoint.deny with input as inp]

	# solved for the deny threshold: 2 × (0.1 × 50676 × 3600 / 64 − 600 − 306.44) s at 720 s
	# per step = 789.3 steps; for the warning 2 × (0.02 × …) = 155.8 steps
	fixes == ["lower checkpoint.interval_steps to at most 789 (at most 155 also clears the warning)"]

	# the named interval clears the deny, one step more does not
	at := json.patch(inp, [_set("/manifest/checkpoint/interval_steps", 789)])
	_lost_work_levels(at) == {"warn"}
	above := json.patch(inp, [_set("/manifest/checkpoint/interval_steps", 790)])
	_lost_work_levels(above) == {"deny"}
}

_lost_work_levels(inp) := {level |
	some level, findings in {"deny": checkpoint.deny, "warn": checkpoint.warn} with input as inp
	some v in findings
	v.code == "CHECKPOINT_LOST_WORK_HIGH"
}

# 16,384 GPUs (the Llama 3 scale): no interval keeps the warning away, but a
# 19-step interval (410 s) clears the deny: 2 × (0.1 × 50676 × 3600 / 16384 −
# 600 − 300.13) s at 21.6 s per step. The model solved for the warn fraction
# said "no interval is short enough".
test_lost_work_fix_at_16384_gpus_names_an_interval_that_clears_the_deny if {
	inp := json.patch(_base, [_set("/manifest/hardware/nodes", 2048)])
	fixes := {v.fix | some v in checkpoint.deny with input as inp; v.code == "CHECKPOINT_LOST_WORK_HIGH"}
	fixes == {"lower checkpoint.interval_steps to at most 19"}
	_lost_work_levels(json.patch(inp, [_set("/manifest/checkpoint/interval_steps", 19)])) == {"warn"}
	_lost_work_levels(json.patch(inp, [_set("/manifest/checkpoint/interval_steps", 20)])) == {"deny"}
}

# When even a one-step interval loses too much, the fix names the detection
# and restart fields (both declarable) and the most GPUs that would pass.
test_lost_work_fix_without_an_interval_names_restart_and_gpus if {
	inp := json.patch(_base, [
		_set("/manifest/hardware/nodes", 2048),
		_set("/manifest/budget/max_wall_clock_hours", 200),
	])
	fixes := {v.fix | some v in checkpoint.deny with input as inp; v.code == "CHECKPOINT_LOST_WORK_HIGH"}

	# a step is 720 s: 360 + 600 + 300.13 s per failure > 0.1 × 50676 × 3600 / 16384 = 1113.49 s
	# allowed; 0.1 × 50676 × 3600 / 1260.13 = 14477 GPUs
	fixes == {concat("", [
		"no interval is short enough: a one-step interval loses 1260.13 s per failure (half of a 720 s step,",
		" detection 600 s, resume 300.13 s), above the 1113.49 s that 16384 GPUs may lose; lower",
		" checkpoint.failure_detection_seconds or checkpoint.restart_overhead_seconds,",
		" use a faster storage tier, or use at most 14477 GPUs",
	])}
}

test_restart_overhead_is_declarable if {
	checkpoint.estimates.checkpoint_resume_seconds == 306.44 with input as _base # 300 s (bundle) + 6.44 s read
	inp := json.patch(_base, [_set("/manifest/checkpoint/restart_overhead_seconds", 60)])
	checkpoint.estimates.checkpoint_resume_seconds == 66.44 with input as inp
}

test_detection_default_and_declared if {
	checkpoint.detection_seconds == 600 with input as _base
	inp := json.patch(_base, [_set("/manifest/checkpoint/failure_detection_seconds", 100)])
	checkpoint.detection_seconds == 100 with input as inp
}

test_max_tokens_sets_the_steps if {
	# 524,288,000 tokens at 64 × 8192 per step = 1000 steps, the same interval
	inp := json.patch(_base, [
		{"op": "remove", "path": "/manifest/objective/max_steps"},
		_set("/manifest/objective/max_tokens", 524288000),
	])
	checkpoint.interval_seconds == 10800 with input as inp
}

_codes(inp) := {v.code | some v in checkpoint.deny with input as inp}

# A store outside the booking's (here the bundle's stores for us-east-1) is refused.
test_store_outside_the_booking_is_refused if {
	_codes(_base) == set()
	inp := json.patch(_base, [_set("/manifest/checkpoint/storage_uri", "s3://someone-elses-bucket/llama3-8b/")])
	_codes(inp) == {"CHECKPOINT_STORE_NOT_BOOKED"}

	# a bucket named like a store's prefix is not under it
	alike := json.patch(_base, [_set("/manifest/checkpoint/storage_uri", "s3://ito-checkpoints-fake/x/")])
	_codes(alike) == {"CHECKPOINT_STORE_NOT_BOOKED"}
}

# The entitlement's checkpoint_stores name the booking's own stores, in place of the bundle's.
test_entitlement_names_the_booking_stores if {
	own := json.patch(_base, [_set("/entitlement/checkpoint_stores", [{"uri_prefix": "s3://acct-42-ckpt/", "region": "us-east-1"}])])
	_codes(own) == {"CHECKPOINT_STORE_NOT_BOOKED"} # the bundle's s3://ito-checkpoints/ is not this booking's
	mine := json.patch(own, [_set("/manifest/checkpoint/storage_uri", "s3://acct-42-ckpt/run/")])
	_codes(mine) == set()
	none := json.patch(_base, [_set("/entitlement/region", "ap-south-1")])
	fixes := {v.fix | some v in checkpoint.deny with input as none}
	fixes == {"ask the desk for a booking that names a checkpoint store (entitlement checkpoint_stores)"}
}

# A store fixes its region and tier: the manifest cannot declare others.
test_store_region_and_tier_are_the_stores if {
	remote := json.patch(_base, [_set("/manifest/checkpoint/storage_region", "eu-west-1")])
	messages := {v.message | some v in checkpoint.deny with input as remote}
	messages == {`store "s3://ito-checkpoints/" is in region "us-east-1", not the declared region "eu-west-1"`}
	euw1 := json.patch(remote, [_set("/manifest/checkpoint/storage_uri", "s3://ito-checkpoints-euw1/llama3-8b/")])
	_codes(euw1) == set()
	fsx := json.patch(_base, [
		_set("/manifest/checkpoint/storage_uri", "lustre://ito-fsx-use1/llama3-8b/"),
		_set("/manifest/checkpoint/storage_tier", "object-store-slow"),
	])
	_codes(fsx) == {"CHECKPOINT_STORE_NOT_BOOKED", "CHECKPOINT_SCHEME_TIER_MISMATCH"}
	_codes(json.patch(fsx, [_set("/manifest/checkpoint/storage_tier", "lustre")])) == set()
}

# The URI's scheme must be one the tier serves: a file:// path declared as lustre is refused.
test_scheme_must_match_the_tier if {
	stores := [{"uri_prefix": "file:///fsx/", "region": "us-east-1"}]
	local := json.patch(_base, [
		_set("/entitlement/checkpoint_stores", stores),
		_set("/manifest/checkpoint/storage_uri", "file:///fsx/llama3-8b/"),
		_set("/manifest/checkpoint/storage_tier", "lustre"),
	])
	_codes(local) == {"CHECKPOINT_SCHEME_TIER_MISMATCH"}
	gs := json.patch(_base, [_set("/manifest/checkpoint/storage_tier", "gcs-standard")])
	_codes(gs) == {"CHECKPOINT_SCHEME_TIER_MISMATCH"} # s3:// is not served by gcs-standard
}

# The quota is the booking's: what its live runs keep counts against it. The
# base keeps 2 × 120 GiB; 200 GiB quota is exceeded alone, 1000 only with 800 held.
test_quota_is_summed_over_the_booking_live_runs if {
	quota := json.patch(_base, [_set("/entitlement/storage_quota_gib", 1000)])
	_codes(quota) == set()
	checkpoint.estimates.checkpoint_needed_gib == 240 with input as quota
	checkpoint.estimates.checkpoint_quota_gib == 1000 with input as quota
	held := json.patch(quota, [_set("/ledger/booking", {
		"held_gpus": 0, "live_runs": [], "live_run_count": 0, "released": false,
		"held_checkpoint_gib": 800,
	})])
	{v.code: v.message | some v in checkpoint.deny with input as held} == {"CHECKPOINT_CAPACITY_EXCEEDED": concat("", [
		"keeping 2 checkpoints of 120 GiB needs 240 GiB; with the 800 GiB the booking's live runs keep,",
		" above the 1000 GiB quota",
	])}
	fits := json.patch(held, [_set("/ledger/booking/held_checkpoint_gib", 760)])
	_codes(fits) == set()
}

# ---------------------------------------------------------------------------
# Signed telemetry (the entitlement's telemetry claim)

_telemetry(claim) := json.patch(_base, [_set("/entitlement/telemetry", claim)])

# measured 200 s before now (and before the token's iat), over a week
_fresh := {"measured_at": 1764403000, "window_seconds": 604800}

test_base_goodput_from_bundle_data if {
	e := checkpoint.estimates with input as _base
	e.checkpoint_lost_fraction == 0.0022 # 64 × 6306.44 s / 3600 / 50676
	e.expected_goodput == 0.9978
	e.checkpoint_failure_rate_source == "bundle"
	e.checkpoint_write_bandwidth_source == "bundle"
	checkpoint.telemetry_status == "none" with input as _base
}

# The bundle's rate (one failure per 50676 GPU-hours) admits the base run;
# the booking's measured 0.001 interruptions per GPU-hour (one per 1000)
# loses 64 × 6306.44 / 3600 / 1000 = 11.21 % of it: above the 10 % deny.
test_telemetry_failure_rate_flips_lost_work if {
	_lost_work_levels(_base) == set()
	inp := _telemetry(object.union(_fresh, {"interruptions_per_gpu_hour": 0.001}))
	checkpoint.telemetry_status == "used" with input as inp
	e := checkpoint.estimates with input as inp
	e.checkpoint_lost_fraction == 0.1121
	e.expected_goodput == 0.8879
	e.checkpoint_failure_rate_source == "telemetry"
	e.checkpoint_write_bandwidth_source == "bundle"
	_lost_work_levels(inp) == {"deny"}

	# solved with the measured rate: 2 × (0.1 × 1000 × 3600 / 64 − 600 − 306.44) s at 21.6 s per step = 436.9;
	# for the warning 2 × (0.02 × …) = 20.2
	[v.fix | some v in checkpoint.deny with input as inp] == [
		"lower checkpoint.interval_steps to at most 436 (at most 20 also clears the warning)",
	]
	[v.message | some v in checkpoint.deny with input as inp] == [concat("", [
		"a failure loses 6306.44 s of 64 GPUs (interval 10800 s, detection 600 s, resume 306.44 s): 11.21 % of the",
		" run is expected lost at one failure per 1000 GPU-hours (the booking's signed telemetry)",
	])]
}

# A measured write bandwidth replaces the storage table's for its tier only:
# 128.85 GB at 8 nodes × 0.1 GB/s = 161.06 s instead of 6.44 s.
test_telemetry_write_bandwidth_per_tier if {
	slow := _telemetry(object.union(_fresh, {"checkpoint_write_gbytes_per_s_per_node": {"s3-standard": 0.1}}))
	e := checkpoint.estimates with input as slow
	e.checkpoint_write_seconds == 161.06
	e.checkpoint_write_bandwidth_source == "telemetry"
	e.checkpoint_failure_rate_source == "bundle"
	other := _telemetry(object.union(_fresh, {"checkpoint_write_gbytes_per_s_per_node": {"lustre": 0.1}}))
	checkpoint.estimates.checkpoint_write_seconds == 6.44 with input as other
	checkpoint.estimates.checkpoint_write_bandwidth_source == "bundle" with input as other
}

# A claim that is not used leaves the model on bundle data (the entitlement
# gate denies it).
test_unused_telemetry_is_bundle_data[name] if {
	some name, tc in {
		"stale": {"claim": object.union(_fresh, {"measured_at": 1764316799, "interruptions_per_gpu_hour": 0.001})},
		"malformed": {"claim": object.union(_fresh, {"interruptions_per_gpu_hour": 0})},
	}
	inp := _telemetry(tc.claim)
	checkpoint.telemetry_status == name with input as inp
	checkpoint.estimates.checkpoint_failure_rate_source == "bundle" with input as inp
	checkpoint.estimates.checkpoint_lost_fraction == 0.0022 with input as inp
}

# estimates is one object when every figure is there: the same keys and
# values as the per-key rules
test_estimates_are_the_per_key_rules if {
	est := checkpoint.estimates with input as _base
	est == {k: v | some k, v in checkpoint._estimates} with input as _base
	count(est) == 14
}
