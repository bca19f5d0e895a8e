# The estimates the decision reports.
# Part of package ito.parallelism (see parallelism.rego for the model and its inputs).
package ito.parallelism

import data.ito.lib

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
estimates := {k: v | some k, v in _estimates}

_estimates["world_size"] := _world_size

_estimates["dp"] := _dp(_layout)

_estimates["tp"] := _layout.tp

_estimates["pp"] := _layout.pp

_estimates["cp"] := _layout.cp

_estimates["ep"] := _layout.ep

_estimates["etp"] := _layout.etp

_estimates["expert_data_parallel"] := _edp(_layout) if _has_moe

_estimates["expert_bytes_per_param"] := lib.round2(_expert_bytes_per_param(_layout)) if _has_moe

_estimates["virtual_stages"] := _layout.v

_estimates["pipeline_schedule"] := _layout.schedule

_estimates["microbatches"] := _microbatches(_layout)

_estimates["tokens_per_gpu"] := _tokens_per_gpu(_layout)

_estimates["bytes_per_param"] := lib.round2(_bytes_per_param(_layout))

_estimates["model_states_gb_per_gpu"] := lib.round2(_states_gb(_layout))

_estimates["activations_gb_per_gpu"] := lib.round2(_activations_gb(_layout))

_estimates["memory_gb_per_gpu"] := lib.round2(_memory_gb(_layout))

_estimates["gpu_memory_gb"] := _gpu.memory_gb

_estimates["bubble_fraction"] := lib.round2(_bubble(_layout))

_estimates["dp_comm_compute_ratio"] := lib.round2(_comm_ratio(_layout))

_estimates["fix_layout"] := _fix_layout if count(deny) > 0
