# The figures of the manifest's own layout that the rules read, and their Rego reference.
# Part of package ito.parallelism (see parallelism.rego for the model and its inputs).
package ito.parallelism

import data.ito.lib

# The rules read the manifest's layout and its figures from _f: Go's
# input.facts.parallelism (gatekeeper/trainfacts, computed once per
# decision from this bundle's data), or, for an input without facts (opa
# test, opa eval), facts_reference, the formulas of this package applied to
# the manifest's layout. The fix search evaluates the same formulas on its
# candidates. TestFactsMatchReference holds Go's facts byte-identical to
# facts_reference.
_f := f if {
	f := input.facts.parallelism
} else := facts_reference if {
	not input.facts
}

# the manifest's layout as the rules see it
_layout := _f.layout

# METADATA
# title: Parallelism facts (Rego reference)
# description: >-
#   The manifest's layout and its figures, by this package's formulas: what
#   Go computes as input.facts.parallelism (policies/README.md names the Go
#   function of each). Keys are absent when a figure is undefined.
facts_reference := {k: v | some k, v in _reference}

_reference["layout"] := _manifest_layout

_reference["world_size"] := _world_size

_reference["dp"] := _dp(_manifest_layout)

_reference["batch_unit"] := _batch_unit(_manifest_layout)

_reference["microbatches"] := _microbatches(_manifest_layout)

_reference["tokens_per_gpu"] := _tokens_per_gpu(_manifest_layout)

_reference["bytes_per_param"] := _bytes_per_param(_manifest_layout)

_reference["expert_bytes_per_param"] := _expert_bytes_per_param(_manifest_layout)

_reference["expert_data_parallel"] := _edp(_manifest_layout)

_reference["params_per_gpu"] := _params_per_gpu(_manifest_layout)

_reference["dense_params_per_gpu"] := _dense_local(_manifest_layout.tp, _manifest_layout.pp)

_reference["expert_params_per_gpu"] := _expert_local(_manifest_layout.pp, _manifest_layout.ep, _manifest_layout.etp)

_reference["model_states_gb"] := _states_gb(_manifest_layout)

_reference["activations_gb"] := _activations_gb(_manifest_layout)

_reference["memory_gb"] := _memory_gb(_manifest_layout)

_reference["bubble"] := _bubble(_manifest_layout)

_reference["comm_seconds"] := _comm_seconds(_manifest_layout)

_reference["compute_seconds"] := _compute_seconds(_manifest_layout)

_reference["comm_ratio"] := _comm_ratio(_manifest_layout)

_reference["stage_imbalance"] := _stage_imbalance(_manifest_layout)

# the figures the decision's estimates show, rounded to 2 decimals (lib.round2)
_reference["rounded"] := {k: v | some k, v in _rounded}

_rounded["bytes_per_param"] := lib.round2(_bytes_per_param(_manifest_layout))

_rounded["expert_bytes_per_param"] := lib.round2(_expert_bytes_per_param(_manifest_layout))

_rounded["model_states_gb"] := lib.round2(_states_gb(_manifest_layout))

_rounded["activations_gb"] := lib.round2(_activations_gb(_manifest_layout))

_rounded["memory_gb"] := lib.round2(_memory_gb(_manifest_layout))

_rounded["bubble"] := lib.round2(_bubble(_manifest_layout))

_rounded["comm_ratio"] := lib.round2(_comm_ratio(_manifest_layout))

# the model states on 1/overprovision_factor of the data-parallel ranks (OVERPROVISIONED_SMALL_MODEL)
_reference["overprovision_states_gb"] := states * _schedule_states_factor(l.schedule) if {
	l := _manifest_layout
	states := _states_gb_at(_dp(l) / _cfg.overprovision_factor, l.tp, l.pp, l.cp, l.ep, l.etp, l.zero_stage)
}
