# The estimates the decision reports.
# Part of package ito.parallelism (see parallelism.rego for the model and its inputs).
package ito.parallelism

# ---------------------------------------------------------------------------
# Estimates

# METADATA
# title: Layout estimates
# description: >-
#   The numbers the rules use, for the decision's estimates: world size,
#   degrees, microbatches, tokens per GPU, memory per GPU (GB), pipeline bubble
#   and DP communication/compute ratio; with a parallelism deny, fix_layout:
#   the nearest passing layout (or the smallest GPU count that has one).
#   Absent when not computable.
estimates := object.union(
	{
		"world_size": _f.world_size, "dp": _f.dp, "tp": _layout.tp, "pp": _layout.pp, "cp": _layout.cp,
		"ep": _layout.ep, "etp": _layout.etp, "virtual_stages": _layout.v, "pipeline_schedule": _layout.schedule,
		"microbatches": _f.microbatches, "tokens_per_gpu": _f.tokens_per_gpu,
		"bytes_per_param": _f.rounded.bytes_per_param, "model_states_gb_per_gpu": _f.rounded.model_states_gb,
		"activations_gb_per_gpu": _f.rounded.activations_gb, "memory_gb_per_gpu": _f.rounded.memory_gb,
		"gpu_memory_gb": _gpu.memory_gb, "bubble_fraction": _f.rounded.bubble,
		"dp_comm_compute_ratio": _f.rounded.comm_ratio,
	},
	{k: v | some k, v in _optional_estimates},
) if _f

# with a figure missing, one rule per key (_estimates below): only its key is left out
else := {k: v | some k, v in _estimates}

# the keys of _estimates that are there only with an MoE model or a deny
_optional_estimates["expert_data_parallel"] := _estimates.expert_data_parallel

_optional_estimates["expert_bytes_per_param"] := _estimates.expert_bytes_per_param

_optional_estimates["fix_layout"] := _estimates.fix_layout

_estimates["world_size"] := _f.world_size

_estimates["dp"] := _f.dp

_estimates["tp"] := _layout.tp

_estimates["pp"] := _layout.pp

_estimates["cp"] := _layout.cp

_estimates["ep"] := _layout.ep

_estimates["etp"] := _layout.etp

_estimates["expert_data_parallel"] := _f.expert_data_parallel if _has_moe

_estimates["expert_bytes_per_param"] := _f.rounded.expert_bytes_per_param if _has_moe

_estimates["virtual_stages"] := _layout.v

_estimates["pipeline_schedule"] := _layout.schedule

_estimates["microbatches"] := _f.microbatches

_estimates["tokens_per_gpu"] := _f.tokens_per_gpu

_estimates["bytes_per_param"] := _f.rounded.bytes_per_param

_estimates["model_states_gb_per_gpu"] := _f.rounded.model_states_gb

_estimates["activations_gb_per_gpu"] := _f.rounded.activations_gb

_estimates["memory_gb_per_gpu"] := _f.rounded.memory_gb

_estimates["gpu_memory_gb"] := _gpu.memory_gb

_estimates["bubble_fraction"] := _f.rounded.bubble

_estimates["dp_comm_compute_ratio"] := _f.rounded.comm_ratio

_estimates["fix_layout"] := _fix_layout if count(deny) > 0
