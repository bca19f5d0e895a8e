package ito.budget_test

import data.ito.budget

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

# base: 64 GPUs × 6 h × 2.49 = 956.16; storage ceil(120 GiB) × 2 × 0.023 × 1 month = 5.52; total 961.68
_cases := {
	"valid": {"patch": [], "want": set()},
	"ceiling exactly the total": {"patch": [_set("/manifest/budget/ceiling_usd", "961.68")], "want": set()},
	"ceiling one cent short": {"patch": [_set("/manifest/budget/ceiling_usd", "961.67")], "want": {"BUDGET_CEILING_EXCEEDED"}},
	"incremental limit exactly the storage": {"patch": [_set("/manifest/budget/max_incremental_usd", "5.52")], "want": set()},
	"incremental limit below the storage": {
		"patch": [_set("/manifest/budget/max_incremental_usd", "5.51")],
		"want": {"BUDGET_INCREMENTAL_EXCEEDED"},
	},
	"run ends five hours past the term": {
		"patch": [_set("/entitlement/term/end", 1764406800)],
		"want": {"BUDGET_INCREMENTAL_EXCEEDED"},
		"warn": {"BUDGET_RUN_PAST_TERM"},
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
	"zero hours": {"patch": [_set("/manifest/budget/max_wall_clock_hours", 0)], "want": {"BUDGET_HOURS_MALFORMED"}},
	"price malformed": {
		"patch": [_set("/entitlement/price_per_gpu_hour_usd", "2.49 USD")],
		"want": {"BUDGET_ESTIMATE_UNAVAILABLE"},
	},
	"nodes as a string": {"patch": [_set("/manifest/hardware/nodes", "8")], "want": {"BUDGET_ESTIMATE_UNAVAILABLE"}},
	"no checkpoint policy costs no storage": {"patch": [_remove("/manifest/checkpoint")], "want": set()},
	"checkpoint retention zero": {"patch": [_set("/manifest/checkpoint/retention", 0)], "want": {"BUDGET_ESTIMATE_UNAVAILABLE"}},
	"term end missing": {"patch": [_remove("/entitlement/term/end")], "want": {"BUDGET_ESTIMATE_UNAVAILABLE"}},
}

test_base_estimates if {
	budget.estimates == {
		"gpu_hours": "384.00",
		"compute_cost_micro_usd": 956160000,
		"compute_cost_usd": "956.16",
		"storage_cost_micro_usd": 5520000,
		"storage_cost_usd": "5.52",
		"total_cost_micro_usd": 961680000,
		"total_cost_usd": "961.68",
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
		"rounded up to the micro-USD and the cent": {
			"patch": [
				_set("/manifest/hardware/nodes", 1), _set("/manifest/hardware/gpus_per_node", 1),
				_set("/manifest/budget/max_wall_clock_hours", 0.01), _set("/entitlement/price_per_gpu_hour_usd", "0.000001"),
			],
			"compute": 1,
			"usd": "0.01",
		},
	}
	inp := json.patch(_base, tc.patch)
	budget.compute_micro_usd == tc.compute with input as inp
	budget.estimates.compute_cost_usd == tc.usd with input as inp
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
		"the run adds an estimated 802.32 USD beyond the booking (18000 s past the term end, storage 5.52), above the limit of 100.00 USD",
	]
}

test_ceiling_fix if {
	inp := json.patch(_base, [_set("/manifest/budget/ceiling_usd", "900")])
	[v.fix | some v in budget.deny with input as inp] == [
		"raise budget.ceiling_usd to at least 961.68, or lower max_wall_clock_hours (384.00 GPU-hours at 2.49 USD)",
	]
}
