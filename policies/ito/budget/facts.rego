# The money model: what a train.create costs (the formulas of the package METADATA).
# Part of package ito.budget (see budget.rego for the checks).
package ito.budget

import data.ito.checkpoint
import data.ito.lib

# The checks read the amounts from _f: Go's input.facts.budget
# (gatekeeper/trainfacts with gatekeeper/booking's policy money, computed
# once per decision from this bundle's data), or, for an input without
# facts (opa test, opa eval), facts_reference, the formulas below.
# TestFactsMatchReference holds Go's facts byte-identical to facts_reference.
_f := f if {
	f := input.facts.budget
} else := facts_reference if {
	not input.facts
}

# METADATA
# title: Budget facts (Rego reference)
# description: >-
#   The amounts by the formulas below: what Go computes as input.facts.budget
#   (policies/README.md names the Go function of each). Keys are absent when
#   an amount is undefined.
facts_reference := {k: v | some k, v in _reference}

_reference["world_size"] := _world_size

_reference["centi_hours"] := _centi_hours

_reference["price_micro_usd"] := _price

_reference["ceiling_micro_usd"] := _ceiling

_reference["max_incremental_micro_usd"] := _max_incremental

_reference["compute_micro_usd"] := _compute_micro_usd

_reference["booked_compute_micro_usd"] := _booked_compute_micro_usd

_reference["lost_centi_gpu_hours"] := _lost_centi_gpu_hours

_reference["lost_work_micro_usd"] := _lost_work_micro_usd

_reference["storage_micro_usd"] := _storage_micro_usd

_reference["egress_gib"] := _egress_gib

_reference["egress_micro_usd"] := _egress_micro_usd

_reference["total_micro_usd"] := _total_micro_usd

_reference["past_term_seconds"] := _past_term_seconds

_reference["incremental_micro_usd"] := _incremental_micro_usd

_reference["gpu_hours"] := lib.centi_string(_world_size * _centi_hours)

_reference["lost_gpu_hours"] := lib.centi_string(_lost_centi_gpu_hours)

_reference["compute_usd"] := lib.usd(_compute_micro_usd)

_reference["lost_work_usd"] := lib.usd(_lost_work_micro_usd)

_reference["storage_usd"] := lib.usd(_storage_micro_usd)

_reference["egress_usd"] := lib.usd(_egress_micro_usd)

_reference["total_usd"] := lib.usd(_total_micro_usd)

_reference["incremental_usd"] := lib.usd(_incremental_micro_usd)

_world_size := _m.hardware.nodes * _m.hardware.gpus_per_node if {
	lib.is_count(_m.hardware.nodes)
	lib.is_count(_m.hardware.gpus_per_node)
}

_centi_hours := lib.centi(_m.budget.max_wall_clock_hours)

_price := lib.micro_usd(input.entitlement.price_per_gpu_hour_usd)

_storage_price := lib.micro_usd(_cfg.storage_price_per_gib_month_usd)

_egress_price := lib.micro_usd(_cfg.egress_price_per_gib_usd)

_ceiling := lib.micro_usd(_m.budget.ceiling_usd)

_max_incremental := lib.micro_usd(_m.budget.max_incremental_usd)

_booked_compute_micro_usd := lib.ceil_cent(lib.ceil_div((_world_size * _centi_hours) * _price, 100))

# the GPU-hours (in hundredths, rounded up) the checkpoint model expects the
# run to lose to failures: W × hours × lost_fraction; they are paid for
_lost_centi_gpu_hours := ceil((_world_size * _centi_hours) * checkpoint.facts_reference.lost_fraction)

_lost_work_micro_usd := lib.ceil_cent(lib.ceil_div(_lost_centi_gpu_hours * _price, 100))

_compute_micro_usd := _booked_compute_micro_usd + _lost_work_micro_usd

_months := max([1, lib.ceil_div(_centi_hours, _cfg.hours_per_month * 100)])

_storage_micro_usd := lib.ceil_cent(((gib_months * _m.checkpoint.retention) * _storage_price) + remote) if {
	_is_storage_priceable
	gib_months := ceil(_m.checkpoint.size_estimate_gib) * _months
	remote := checkpoint.facts_reference.remote_write_gib * _egress_price
}

_storage_micro_usd := 0 if not _m.checkpoint

_is_storage_priceable if {
	is_number(_m.checkpoint.size_estimate_gib)
	_m.checkpoint.size_estimate_gib >= 0
	lib.is_count(_m.checkpoint.retention)
}

# ---------------------------------------------------------------------------
# Egress: training data pulled from another region than the booking's

_booking_region := r if {
	r := input.entitlement.region
	is_string(r)
}

_datasets := d if {
	d := _m.data
	is_array(d)
}

# a dataset whose region is not a string is remote too (fail closed); undefined
# (not empty) when data is not an array
_remote_datasets := remote if {
	datasets := _datasets
	remote := [d |
		some d in datasets
		not lib.value_at(d, ["region"], null) == _booking_region
	]
}

_remote_tokens := sum([t |
	some d in _remote_datasets
	t := _token_count(d)
])

_token_count(d) := d.tokens if lib.is_count(d.tokens)

_is_remote_priceable if {
	every d in _remote_datasets {
		_token_count(d)
	}
}

_run_token_limits contains t if {
	t := _m.objective.max_tokens
	lib.is_count(t)
}

_run_token_limits contains (steps * gbs) * seq if {
	steps := _m.objective.max_steps
	gbs := _m.objective.global_batch_size
	seq := _m.objective.sequence_length
	lib.is_count(steps)
	lib.is_count(gbs)
	lib.is_count(seq)
}

_egress_tokens := 0 if {
	_booking_region
	count(_remote_datasets) == 0
}

_egress_tokens := min([min(_run_token_limits), _remote_tokens]) if {
	_booking_region
	count(_remote_datasets) > 0
	_is_remote_priceable
	count(_run_token_limits) > 0
}

_egress_gib := lib.ceil_div(_egress_tokens * _cfg.bytes_per_token, 1073741824)

_egress_micro_usd := lib.ceil_cent(_egress_gib * _egress_price)

_total_micro_usd := (_compute_micro_usd + _storage_micro_usd) + _egress_micro_usd

_past_term_seconds := max([0, (input.now + (_centi_hours * 36)) - input.entitlement.term.end]) if {
	is_number(input.now)
	is_number(input.entitlement.term.end)
}

_past_term_micro_usd := lib.ceil_cent(lib.ceil_div((_world_size * _past_term_seconds) * _price, 3600))

_incremental_micro_usd := (_past_term_micro_usd + _storage_micro_usd) + _egress_micro_usd
