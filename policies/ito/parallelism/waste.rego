# The waste rules: layouts that run but waste the booking (bubble, communication, overprovisioning).
# Part of package ito.parallelism (see parallelism.rego for the model and its inputs).
package ito.parallelism

import data.ito.lib

# ---------------------------------------------------------------------------
# Waste rules

# METADATA
# title: Pipeline bubble too large
# description: The idle pipeline share (pp−1)/(v·m + pp−1) is above the deny threshold (bundle data, 0.50).
# custom:
#   code: PP_BUBBLE_TOO_LARGE
#   gate: parallelism
#   fix: Computed per deny - more microbatches per step, interleaved stages, or fewer pipeline stages.
deny contains v if {
	_bubble_too_large_at(_f.bubble)
	v := lib.violation_fix(rego.metadata.rule(), _bubble_message(_cfg.bubble_deny_above), _with_fix(_bubble_fix))
}

# METADATA
# title: Pipeline bubble large
# description: The idle pipeline share (pp−1)/(v·m + pp−1) is above the warn threshold (bundle data, 0.20).
# custom:
#   code: PP_BUBBLE_TOO_LARGE
#   gate: parallelism
#   level: warn
#   fix: Raise microbatches per step (global batch) or interleave stages (virtual_stages).
warn contains v if {
	bubble := _f.bubble
	bubble > _cfg.bubble_warn_above
	bubble <= _cfg.bubble_deny_above
	v := lib.violation_fix(rego.metadata.rule(), _bubble_message(_cfg.bubble_warn_above), _bubble_fix)
}

_bubble_message(limit) := sprintf("pipeline bubble %v (pp=%d, v=%d, m=%d) is above %v", [
	_f.rounded.bubble, _layout.pp, _layout.v, _f.microbatches, limit,
])

_bubble_fix := sprintf(
	concat("", [
		"raise microbatches per step to ≥ %d (global batch ≥ %d)",
		" or interleave stages (virtual_stages)",
	]),
	[
		m, m * _f.batch_unit,
	],
) if {
	t := _cfg.bubble_warn_above
	m := ceil((((_layout.pp - 1) * (1 - t)) / (t * _layout.v)) - 1e-9)
}

# METADATA
# title: Data parallel communication-bound
# description: Gradient sync time over compute time R = T_comm/T_comp is above the deny threshold (bundle data, 2).
# custom:
#   code: DP_COMM_BOUND
#   gate: parallelism
#   fix: Use a faster fabric, raise tokens per GPU (global batch), or keep data parallel inside nodes (more tp/pp).
deny contains v if {
	_comm_bound_at(_f.comm_ratio)
	v := lib.violation_fix(
		rego.metadata.rule(),
		_comm_message(_cfg.dp_comm_deny_above),
		_with_fix("use a faster fabric, or raise tokens per GPU (global batch)"),
	)
}

# METADATA
# title: Data parallel communication-heavy
# description: Gradient sync time over compute time R = T_comm/T_comp is above the warn threshold (bundle data, 1).
# custom:
#   code: DP_COMM_BOUND
#   gate: parallelism
#   level: warn
#   fix: Use a faster fabric, raise tokens per GPU (global batch), or keep data parallel inside nodes (more tp/pp).
warn contains v if {
	ratio := _f.comm_ratio
	ratio > _cfg.dp_comm_warn_above
	ratio <= _cfg.dp_comm_deny_above
	v := lib.violation(rego.metadata.rule(), _comm_message(_cfg.dp_comm_warn_above))
}

_comm_message(limit) := sprintf("gradient sync takes %v s per step against %v s of compute (R = %v > %v) over %s", [
	lib.round2(_f.comm_seconds), lib.round2(_f.compute_seconds),
	_f.rounded.comm_ratio, limit, _hw.fabric,
])

# METADATA
# title: Too few tokens per GPU
# description: Tokens per GPU per step gbs·s/W below the deny threshold (bundle data, 128) leave matmuls too small.
# custom:
#   code: TOKENS_PER_GPU_TOO_SMALL
#   gate: parallelism
#   fix: Computed per deny - no layout changes tokens per GPU; a larger global batch or fewer GPUs does.
deny contains v if {
	_tokens_too_few_at(_f.tokens_per_gpu)
	v := lib.violation_fix(
		rego.metadata.rule(),
		_tokens_message(_cfg.tokens_per_gpu_deny_below),
		_with_fix(_tokens_fix),
	)
}

# METADATA
# title: Few tokens per GPU
# description: Tokens per GPU per step gbs·s/W below the warn threshold (bundle data, 512).
# custom:
#   code: TOKENS_PER_GPU_TOO_SMALL
#   gate: parallelism
#   level: warn
#   fix: Raise global_batch_size, or use fewer GPUs.
warn contains v if {
	tokens := _f.tokens_per_gpu
	tokens < _cfg.tokens_per_gpu_warn_below
	tokens >= _cfg.tokens_per_gpu_deny_below
	v := lib.violation_fix(rego.metadata.rule(), _tokens_message(_cfg.tokens_per_gpu_warn_below), _tokens_fix)
}

_tokens_message(limit) := sprintf("%v tokens per GPU per step (global batch %d × sequence %d / %d GPUs) is below %v", [
	lib.round2(_f.tokens_per_gpu), _gbs, _seq, _f.world_size, limit,
])

_tokens_fix := sprintf("raise global_batch_size to ≥ %d, or use fewer GPUs", [
	lib.ceil_div(_cfg.tokens_per_gpu_warn_below * _f.world_size, _seq),
])

# METADATA
# title: Memory estimate far above GPU memory
# description: >-
#   States + activations + overhead exceed 1.5 × GPU memory with activation
#   checkpointing off. The activation estimate is ±30-50%, so this denies only
#   far beyond the limit.
# custom:
#   code: MEMORY_ESTIMATE_EXCEEDS_GPU
#   gate: parallelism
#   fix: Turn on activation checkpointing (full), lower micro_batch_size, or add tensor/context parallelism.
deny contains v if {
	_memory_far_exceeds_at(_layout.checkpointing, _f.memory_gb)
	limit := _cfg.memory_deny_fraction_without_checkpointing * _gpu.memory_gb
	v := lib.violation_fix(
		rego.metadata.rule(),
		_memory_message(limit),
		_with_fix("turn on activation checkpointing, lower micro_batch_size, or add tensor/context parallelism"),
	)
}

# METADATA
# title: Memory estimate above GPU memory
# description: States + activations + overhead exceed 0.92 × GPU memory (an estimate, ±30-50% on activations).
# custom:
#   code: MEMORY_ESTIMATE_EXCEEDS_GPU
#   gate: parallelism
#   level: warn
#   fix: >-
#     Turn on activation checkpointing (selective or full), lower
#     micro_batch_size, or add tensor/context parallelism.
warn contains v if {
	limit := _cfg.memory_warn_fraction * _gpu.memory_gb
	_f.memory_gb > limit
	not _memory_far_exceeds_at(_layout.checkpointing, _f.memory_gb)
	v := lib.violation(rego.metadata.rule(), _memory_message(limit))
}

_memory_message(limit) := sprintf("estimated %v GB per GPU (states %v + activations %v + overhead %v) > %v GB on %s", [
	_f.rounded.memory_gb, _f.rounded.model_states_gb, _f.rounded.activations_gb,
	_cfg.memory_overhead_gb, lib.round2(limit), _hw.gpu_type,
])

# METADATA
# title: Tensor-parallel group straddles the NVLink domain
# description: The NVLink domain is not a multiple of tp, so some TP groups span NVLink and the network.
# custom:
#   code: TP_GROUP_STRADDLES_DOMAIN
#   gate: parallelism
#   level: warn
#   fix: Use a tp that divides the NVLink domain (e.g. 1, 2, 4 or 8 on 8-GPU nodes).
warn contains v if {
	tp := _layout.tp
	tp <= _domain
	_domain % tp != 0
	v := lib.violation(
		rego.metadata.rule(),
		sprintf("tp=%d does not divide the NVLink domain of %d GPUs", [tp, _domain]),
	)
}

# METADATA
# title: Expert parallel crosses the NVLink domain
# description: ep exceeds the NVLink domain, so the expert all-to-all crosses nodes.
# custom:
#   code: EP_EXCEEDS_NVLINK_DOMAIN
#   gate: parallelism
#   level: warn
#   fix: Keep ep within the NVLink domain, or expect all-to-all over the network to dominate.
warn contains v if {
	_layout.ep > _domain
	v := lib.violation(rego.metadata.rule(), sprintf("ep=%d exceeds the NVLink domain of %d GPUs", [_layout.ep, _domain]))
}

# METADATA
# title: Context parallel on short sequences
# description: cp > 1 with sequences shorter than 8192 tokens (bundle data); CP pays off from about 8K tokens.
# custom:
#   code: CP_ON_SHORT_SEQ
#   gate: parallelism
#   level: warn
#   fix: Use cp=1 and spend the GPUs on data parallel instead.
warn contains v if {
	_layout.cp > 1
	_seq < _cfg.context_parallel_min_sequence
	v := lib.violation(rego.metadata.rule(), sprintf("cp=%d for sequence length %d (< %d)", [
		_layout.cp, _seq, _cfg.context_parallel_min_sequence,
	]))
}

# METADATA
# title: Small model on many GPUs
# description: >-
#   The model states would fit on 8× fewer GPUs and each GPU computes less
#   than 1 s per optimizer step (T_comp = 6·P_act·tokens per GPU / (0.4 ·
#   peak FLOPS), 8 with full recompute; bundle data): more DP adds
#   communication, not useful work. Tokens per GPU alone is not the test: the
#   production Llama 3 405B layout runs ~1k tokens per GPU at ~6 s per step.
# custom:
#   code: OVERPROVISIONED_SMALL_MODEL
#   gate: parallelism
#   level: warn
#   fix: Use about 1/8 of the GPUs, or raise global_batch_size.
warn contains v if {
	factor := _cfg.overprovision_factor
	dp := _f.dp
	dp >= factor
	seconds := _f.compute_seconds
	seconds < _cfg.overprovision_compute_seconds_below
	_f.overprovision_states_gb <= _states_budget_gb
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf(
			concat("", [
				"model states would fit on %d GPUs (1/%d of %d) and each GPU computes only %v s per step",
				" (%v tokens per GPU) < %v s",
			]),
			[
				lib.ceil_div(_f.world_size, factor), factor, _f.world_size, lib.round2(seconds),
				lib.round2(_f.tokens_per_gpu), _cfg.overprovision_compute_seconds_below,
			],
		),
		sprintf("use about %d GPUs, or raise global_batch_size to ≥ %d", [
			lib.ceil_div(_f.world_size, factor),
			ceil((_gbs * _cfg.overprovision_compute_seconds_below) / seconds),
		]),
	)
}
