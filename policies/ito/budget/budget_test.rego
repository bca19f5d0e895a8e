package ito.budget_test

import data.ito.budget
import data.ito.lib

_base := data.ito.testdata.base.input

_set(path, value) := {"op": "add", "path": path, "value": value}

_remove(path) := {"op": "remove", "path": path}

test_budget_codes[name] if {
	some name, tc in _cases
	inp := json.patch(_base, tc.patch)
	got := {v.code | some v in budget.deny with input as inp}
	warned := {v.code | some v in budget.warn with input as inp}
	print(name, "got", got, "warned", warned)
	got == tc.want
	warned == object.get(tc, "warn", set())
}

# base: 64 GPUs × 6 h × 2.49 = 956.16, plus the GPU-hours expected lost to
# failures: 384 GPU-hours × lost_fraction 0.0022124 (64 × 6306.44 s / 3600 /
# 50676) = 0.8496 → 0.85 GPU-hours × 2.49 = 2.1165 → 2.12; compute 958.28;
# storage ceil(120 GiB) × 2 × 0.023 × 1 month = 5.52; total 963.80
_cases := {
	"valid": {"patch": [], "want": set()},
	"ceiling exactly the total": {"patch": [_set("/manifest/budget/ceiling_usd", "963.80")], "want": set()},
	"ceiling one cent short": {"patch": [_set("/manifest/budget/ceiling_usd", "963.79")], "want": {"BUDGET_CEILING_EXCEEDED"}},
	"ceiling covering the booked compute but not the lost work": {
		"patch": [_set("/manifest/budget/ceiling_usd", "961.68")],
		"want": {"BUDGET_CEILING_EXCEEDED"},
	},
	"incremental limit exactly the storage": {"patch": [_set("/manifest/budget/max_incremental_usd", "5.52")], "want": set()},
	"incremental limit below the storage": {
		"patch": [_set("/manifest/budget/max_incremental_usd", "5.51")],
		"want": {"BUDGET_INCREMENTAL_EXCEEDED"},
	},
	"run ends five hours past the term": {
		"patch": [_set("/entitlement/term/end", 1764406800)],
		"want": {"BUDGET_INCREMENTAL_EXCEEDED", "BUDGET_RUN_PAST_TERM"},
	},
	"run ends exactly at the term end": {"patch": [_set("/entitlement/term/end", 1764424800)], "want": set()},
	"ceiling with thousands separator": {
		"patch": [_set("/manifest/budget/ceiling_usd", "2,000.00")],
		"want": {"BUDGET_MONEY_MALFORMED"},
	},
	"incremental limit as a number": {
		"patch": [_set("/manifest/budget/max_incremental_usd", 100)],
		"want": {"BUDGET_MONEY_MALFORMED"},
	},
	"budget missing": {
		"patch": [_remove("/manifest/budget")],
		"want": {"BUDGET_MONEY_MALFORMED", "BUDGET_HOURS_MALFORMED", "BUDGET_ESTIMATE_UNAVAILABLE"},
	},
	"hours with three decimals": {
		"patch": [_set("/manifest/budget/max_wall_clock_hours", 6.125)],
		"want": {"BUDGET_HOURS_MALFORMED", "BUDGET_ESTIMATE_UNAVAILABLE"},
	},
	"hours as a string": {
		"patch": [_set("/manifest/budget/max_wall_clock_hours", "6")],
		"want": {"BUDGET_HOURS_MALFORMED", "BUDGET_ESTIMATE_UNAVAILABLE"},
	},
	# no seconds per step: the lost work, so the compute, is unknown
	"zero hours": {
		"patch": [_set("/manifest/budget/max_wall_clock_hours", 0)],
		"want": {"BUDGET_HOURS_MALFORMED", "BUDGET_ESTIMATE_UNAVAILABLE"},
	},
	"price malformed": {
		"patch": [_set("/entitlement/price_per_gpu_hour_usd", "2.49 USD")],
		"want": {"BUDGET_ESTIMATE_UNAVAILABLE"},
	},
	"nodes as a string": {"patch": [_set("/manifest/hardware/nodes", "8")], "want": {"BUDGET_ESTIMATE_UNAVAILABLE"}},
	# no storage cost, but the work a failure loses is unknown (the manifest gate denies it too)
	"no checkpoint policy: lost work unknown": {
		"patch": [_remove("/manifest/checkpoint")],
		"want": {"BUDGET_ESTIMATE_UNAVAILABLE"},
	},
	"checkpoint retention zero": {"patch": [_set("/manifest/checkpoint/retention", 0)], "want": {"BUDGET_ESTIMATE_UNAVAILABLE"}},
	"term end missing": {"patch": [_remove("/entitlement/term/end")], "want": {"BUDGET_ESTIMATE_UNAVAILABLE"}},
}

test_base_estimates if {
	budget.estimates == {
		"gpu_hours": "384.00",
		"compute_cost_micro_usd": 958280000,
		"compute_cost_usd": "958.28",
		"lost_gpu_hours": "0.85",
		"lost_work_cost_micro_usd": 2120000,
		"lost_work_cost_usd": "2.12",
		"storage_cost_micro_usd": 5520000,
		"storage_cost_usd": "5.52",
		"egress_gib": 0,
		"egress_cost_micro_usd": 0,
		"egress_cost_usd": "0.00",
		"total_cost_micro_usd": 963800000,
		"total_cost_usd": "963.80",
		"incremental_cost_micro_usd": 5520000,
		"incremental_cost_usd": "5.52",
		"past_term_seconds": 0,
	} with input as _base
}

test_exact_money[name] if {
	some name, tc in {
		# OPA's float arithmetic: 3 * 2.49 * 16 = 119.520000000000000004
		"3 GPUs × 16 h × 2.49": {
			"patch": [_set("/manifest/hardware/nodes", 1), _set("/manifest/hardware/gpus_per_node", 3), _set("/manifest/budget/max_wall_clock_hours", 16)],
			"compute": 119520000,
			"usd": "119.52",
		},
		"fractional hours": {
			"patch": [_set("/manifest/budget/max_wall_clock_hours", 6.5)],
			"compute": 1035840000,
			"usd": "1035.84",
		},
		# 16 GPUs × 3 h: the same product the other way round
		"16 GPUs × 3 h × 2.49": {
			"patch": [_set("/manifest/hardware/nodes", 2), _set("/manifest/budget/max_wall_clock_hours", 3)],
			"compute": 119520000,
			"usd": "119.52",
		},
		"rounded up to the cent, never down": {
			"patch": [
				_set("/manifest/hardware/nodes", 1), _set("/manifest/hardware/gpus_per_node", 1),
				_set("/manifest/budget/max_wall_clock_hours", 0.01), _set("/entitlement/price_per_gpu_hour_usd", "0.000001"),
			],
			"compute": 10000,
			"usd": "0.01",
		},
		"a fraction of a cent rounds up": {
			"patch": [
				_set("/manifest/hardware/nodes", 1), _set("/manifest/hardware/gpus_per_node", 3),
				_set("/manifest/budget/max_wall_clock_hours", 0.01), _set("/entitlement/price_per_gpu_hour_usd", "2.49"),
			],
			# 3 × 0.01 h × 2.49 = 0.0747 USD
			"compute": 80000,
			"usd": "0.08",
		},
	}
	inp := json.patch(_base, tc.patch)

	# the booked part of the compute (the lost work is test_lost_work's)
	booked := budget.facts_reference.booked_compute_micro_usd with input as inp
	booked == tc.compute
	lib.usd(booked) == tc.usd
}

# The GPU-hours expected lost to failures are paid for at the booking's
# price: ceil(W × centi-hours × lost_fraction) × price / 100, rounded up to
# the cent, inside the compute cost (and so the total a confirmation must
# cover). Signed telemetry moves it: 0.001 interruptions per GPU-hour is a
# failure every 1000 GPU-hours, 50.676 times the bundle's rate.
test_lost_work[name] if {
	some name, tc in {
		# 384 GPU-hours × 0.0022124 = 0.8496 → 0.85 GPU-hours × 2.49 = 2.1165 → 2.12
		"bundle failure rate": {"patch": [], "lost": "0.85", "micro": 2120000, "compute": 958280000},
		# lost_fraction = 64 × 6306.44 / 3600 × 0.001 = 0.112115 → 384 × 0.112115 = 43.0520 → 43.06 GPU-hours
		# × 2.49 = 107.2194 → 107.22
		"telemetry failure rate": {
			"patch": [_set("/entitlement/telemetry", {
				"measured_at": 1764403000, "window_seconds": 604800,
				"interruptions_per_gpu_hour": 0.001,
			})],
			"lost": "43.06", "micro": 107220000, "compute": 1063380000,
		},
		# 1 GPU × 6 h: lost_fraction 1 × 6351.54 / 3600 / 50676 = 0.0000348; 600 centi-GPU-hours × that = 0.021
		# → 0.01 GPU-hours × 2.49 = 0.0249 → 0.03
		"a sliver rounds up to a hundredth of a GPU-hour": {
			"patch": [
				_set("/manifest/hardware/nodes", 1), _set("/manifest/hardware/gpus_per_node", 1),
				_set("/manifest/budget/max_wall_clock_hours", 6),
			],
			"lost": "0.01", "micro": 30000, "compute": 14970000,
		},
	}
	inp := json.patch(_base, tc.patch)
	budget.estimates.lost_gpu_hours == tc.lost with input as inp
	budget.lost_work_micro_usd == tc.micro with input as inp
	budget.compute_micro_usd == tc.compute with input as inp
	budget.compute_micro_usd == budget.facts_reference.booked_compute_micro_usd + tc.micro with input as inp
}

test_storage_months[name] if {
	some name, tc in {
		"one month minimum": {"hours": 1, "months": 1},
		"exactly one month": {"hours": 730, "months": 1},
		"just over a month": {"hours": 730.01, "months": 2},
		"a year": {"hours": 8760, "months": 12},
	}
	inp := json.patch(_base, [_set("/manifest/budget/max_wall_clock_hours", tc.hours)])

	# 120 GiB × 2 retained × 0.023 USD = 5.52 USD per month
	budget.storage_micro_usd == 5520000 * tc.months with input as inp
}

test_past_term_incremental if {
	inp := json.patch(_base, [_set("/entitlement/term/end", 1764406800)])

	# 5 h past the term: 64 × 5 × 2.49 = 796.80, plus 5.52 storage
	budget.past_term_seconds == 18000 with input as inp
	budget.incremental_micro_usd == 802320000 with input as inp
	[v.message | some v in budget.deny with input as inp] == [
		"the run adds an estimated 802.32 USD beyond the booking (18000 s past the term end, storage 5.52, egress 0.00), above the limit of 100.00 USD",
		"at its wall-clock limit the run ends 18000 s after the booking term",
	]
}

test_ceiling_fix if {
	inp := json.patch(_base, [_set("/manifest/budget/ceiling_usd", "900")])
	[v.fix | some v in budget.deny with input as inp] == [
		"raise budget.ceiling_usd to at least 963.80, or lower max_wall_clock_hours (384.00 GPU-hours at 2.49 USD)",
	]
}

test_storage_rounds_up_to_the_cent if {
	# 105 GiB × 1 × 0.023 = 2.415 USD
	inp := json.patch(_base, [_set("/manifest/checkpoint/size_estimate_gib", 105), _set("/manifest/checkpoint/retention", 1)])
	budget.storage_micro_usd == 2420000 with input as inp
}

# The base run reads 1000 steps × 64 × 8192 = 524,288,000 tokens; × 4 bytes = 1.95 GiB -> 2 GiB × 0.09 USD.
test_egress[name] if {
	some name, tc in {
		"every dataset in the booking's region": {"patch": [], "gib": 0, "egress": 0},
		"remote dataset, bounded by the run's tokens": {
			"patch": [_set("/manifest/data/0/region", "eu-west-1")],
			"gib": 2, "egress": 180000,
		},
		"remote dataset, bounded by max_tokens": {
			"patch": [_set("/manifest/data/0/region", "eu-west-1"), _set("/manifest/objective/max_tokens", 1000000000000)],
			"gib": 2, "egress": 180000,
		},
		"remote dataset smaller than the run": {
			"patch": [_set("/manifest/data/0/region", "eu-west-1"), _set("/manifest/data/0/tokens", 268435456)],
			"gib": 1, "egress": 90000,
		},
		"max_tokens below the steps": {
			"patch": [
				_set("/manifest/data/0/region", "eu-west-1"),
				_set("/manifest/objective/max_tokens", 2684354560), _set("/manifest/objective/max_steps", 100000),
			],
			"gib": 10, "egress": 900000,
		},
		"only the remote one of two datasets": {
			"patch": [{"op": "add", "path": "/manifest/data/-", "value": object.union(
				_base.manifest.data[0],
				{"region": "eu-west-1", "tokens": 536870912},
			)}],
			"gib": 2, "egress": 180000,
		},
	}
	inp := json.patch(_base, tc.patch)
	budget.estimates.egress_gib == tc.gib with input as inp
	budget.egress_micro_usd == tc.egress with input as inp
	budget.total_micro_usd == (budget.compute_micro_usd + 5520000) + tc.egress with input as inp
	budget.incremental_micro_usd == 5520000 + tc.egress with input as inp
}

test_egress_codes[name] if {
	some name, tc in {
		"egress pushes the incremental cost over the limit": {
			"patch": [_set("/manifest/data/0/region", "eu-west-1"), _set("/manifest/budget/max_incremental_usd", "5.69")],
			"want": {"BUDGET_INCREMENTAL_EXCEEDED"},
		},
		"egress exactly within the limit": {
			"patch": [_set("/manifest/data/0/region", "eu-west-1"), _set("/manifest/budget/max_incremental_usd", "5.70")],
			"want": set(),
		},
		"booking region unknown": {
			"patch": [_remove("/entitlement/region")],
			"want": {"BUDGET_ESTIMATE_UNAVAILABLE"},
		},
		"remote dataset without a token count": {
			"patch": [_set("/manifest/data/0/region", "eu-west-1"), _set("/manifest/data/0/tokens", "many")],
			"want": {"BUDGET_ESTIMATE_UNAVAILABLE"},
		},
		"remote dataset without a run length": {
			"patch": [_set("/manifest/data/0/region", "eu-west-1"), _remove("/manifest/objective/max_steps")],
			"want": {"BUDGET_ESTIMATE_UNAVAILABLE"},
		},
		"dataset region not a string counts as remote": {
			"patch": [_set("/manifest/data/0/region", 7), _set("/manifest/budget/max_incremental_usd", "5.69")],
			"want": {"BUDGET_INCREMENTAL_EXCEEDED"},
		},
		"data not an array": {"patch": [_set("/manifest/data", {"uri": "x"})], "want": {"BUDGET_ESTIMATE_UNAVAILABLE"}},
		"egress price malformed in bundle data": {
			"patch": [_set("/manifest/data/0/region", "eu-west-1")],
			"price": "0,09",
			"want": {"BUDGET_ESTIMATE_UNAVAILABLE"},
		},
	}
	inp := json.patch(_base, tc.patch)
	price := object.get(tc, "price", "0.09")
	got := {v.code | some v in budget.deny} with input as inp with data.ito.config.budget.egress_price_per_gib_usd as price
	print(name, got)
	got == tc.want
}

test_ceiling_message_names_egress if {
	inp := json.patch(_base, [
		_set("/manifest/data/0/region", "eu-west-1"),
		_set("/manifest/budget/ceiling_usd", "963.97"),
	])
	[v.message | some v in budget.deny with input as inp] == [concat("", [
		"the run is estimated at 963.98 USD (compute 958.28, of which 2.12 for 0.85 GPU-hours expected lost to failures,",
		" + storage 5.52 + egress 0.18), above the ceiling of 963.97 USD",
	])]
}

# The largest run the manifest schema accepts (100 000 nodes × 1 024 GPUs,
# 8 760 h) at the dearest price a money string can hold: every amount is
# exact integer arithmetic (Python: -(-102400000 * 876000 * 999999999999999999 // 100)
# for the booked compute; its lost work, 397004462163603536160 hundredths of a
# GPU-hour at lost_fraction 4.4 million, adds
# -(-397004462163603536160 * 999999999999999999 // 100) rounded up to the cent),
# and the run is denied as over the ceiling, not failed.
test_money_exact_at_the_schema_limits if {
	inp := json.patch(_base, [
		_set("/manifest/hardware/nodes", 100000),
		_set("/manifest/hardware/gpus_per_node", 1024),
		_set("/manifest/budget/max_wall_clock_hours", 8760),
		_set("/manifest/budget/ceiling_usd", "999999999999.999999"),
		_set("/manifest/budget/max_incremental_usd", "999999999999.999999"),
		_set("/entitlement/price_per_gpu_hour_usd", "999999999999.999999"),
	])
	budget.facts_reference.booked_compute_micro_usd == 897023999999999999102976000000 with input as inp
	budget.lost_work_micro_usd == 3970044621636035357629955378363970000 with input as inp
	budget.compute_micro_usd == 3970045518660035357629954481339970000 with input as inp
	est := budget.estimates with input as inp
	est.gpu_hours == "897024000000.00"
	est.compute_cost_usd == "3970045518660035357629954481339.97"
	{v.code | some v in budget.deny with input as inp} == {"BUDGET_CEILING_EXCEEDED", "BUDGET_INCREMENTAL_EXCEEDED", "BUDGET_RUN_PAST_TERM"}
}

# estimates is one object when every figure is there: the same keys and
# values as the per-key rules
test_estimates_are_the_per_key_rules if {
	est := budget.estimates with input as _base
	est == {k: v | some k, v in budget._estimates} with input as _base
	count(est) == 16
}
