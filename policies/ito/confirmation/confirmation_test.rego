package ito.confirmation_test

import data.ito.confirmation

_base := data.ito.testdata.base.input

_codes(inp) := {v.code | some v in confirmation.deny with input as inp}

_set(path, value) := {"op": "add", "path": path, "value": value}

_remove(path) := {"op": "remove", "path": path}

_action(act, run_id) := [
	_set("/request/action", act),
	_set("/request/run_id", run_id),
	_set("/manifest", {}),
	_set("/manifest_digest", ""),
	_set("/confirmation/act", act),
	_set("/confirmation/run_id", run_id),
	_set("/confirmation/manifest_digest", ""),
	_set("/confirmation/cost_usd", "0.00"),
]

test_confirmation_codes[name] if {
	some name, tc in _cases
	got := _codes(json.patch(_base, tc.patch))
	print(name, "got", got)
	got == tc.want
}

# the base run is estimated at 963.80 USD, 2.12 of it expected lost work (see ito.budget_test)
_cases := {
	"valid": {"patch": [], "want": set()},
	"cost exactly the estimate": {"patch": [_set("/confirmation/cost_usd", "963.80")], "want": set()},
	"valid cancel": {"patch": _action("train.cancel", "run_1"), "want": set()},
	"valid cleanup": {"patch": _action("train.cleanup", "run_1"), "want": set()},
	"valid release": {"patch": _action("booking.release", ""), "want": set()},
	"unverified": {"patch": [_set("/verification/confirmation/verified", false)], "want": {"CONFIRMATION_UNVERIFIED"}},
	"replayed": {"patch": [_set("/ledger/confirmation_consumed", true)], "want": {"CONFIRMATION_REPLAYED"}},
	"consumed fact missing": {"patch": [_remove("/ledger/confirmation_consumed")], "want": {"CONFIRMATION_REPLAYED"}},
	"confirmed for cancel, used for create": {
		"patch": [_set("/confirmation/act", "train.cancel")],
		"want": {"CONFIRMATION_ACTION_MISMATCH"},
	},
	"act missing": {"patch": [_remove("/confirmation/act")], "want": {"CONFIRMATION_ACTION_MISMATCH"}},
	"other account": {"patch": [_set("/confirmation/sub", "acct_43")], "want": {"CONFIRMATION_ACCOUNT_MISMATCH"}},
	"other booking": {"patch": [_set("/confirmation/booking_id", "bk_02")], "want": {"CONFIRMATION_BOOKING_MISMATCH"}},
	"other manifest": {
		"patch": [_set("/confirmation/manifest_digest", concat("", ["sha256:", concat("", ["ef" | some _ in numbers.range(1, 32)])]))],
		"want": {"CONFIRMATION_MANIFEST_MISMATCH"},
	},
	"both digests empty": {
		"patch": [_set("/confirmation/manifest_digest", ""), _set("/manifest_digest", "")],
		"want": {"CONFIRMATION_MANIFEST_MISMATCH"},
	},
	"cancel of another run": {
		"patch": array.concat(_action("train.cancel", "run_1"), [_set("/confirmation/run_id", "run_2")]),
		"want": {"CONFIRMATION_RUN_MISMATCH"},
	},
	"cancel without a run": {"patch": _action("train.cancel", ""), "want": {"CONFIRMATION_RUN_MISMATCH"}},
	"cleanup without a run": {"patch": _action("train.cleanup", ""), "want": {"CONFIRMATION_RUN_MISMATCH"}},
	"release with a run mismatch": {
		"patch": array.concat(_action("booking.release", ""), [_set("/confirmation/run_id", "run_2")]),
		"want": {"CONFIRMATION_RUN_MISMATCH"},
	},
	"cleanup that releases the booking": {
		"patch": array.concat(_action("train.cleanup", "run_1"), [_set("/request/releases_booking", true)]),
		"want": {"CLEANUP_RELEASE_NOT_CONFIRMED"},
	},
	"cleanup with releases_booking missing": {
		"patch": array.concat(_action("train.cleanup", "run_1"), [_remove("/request/releases_booking")]),
		"want": {"CLEANUP_RELEASE_NOT_CONFIRMED"},
	},
	"lifetime one second too long": {
		"patch": [_set("/confirmation/iat", 1764403000), _set("/confirmation/exp", 1764403901)],
		"want": {"CONFIRMATION_LIFETIME_TOO_LONG"},
	},
	"iat missing": {"patch": [_remove("/confirmation/iat")], "want": {"CONFIRMATION_LIFETIME_TOO_LONG"}},
	"expired now, no leeway": {
		"patch": [_set("/confirmation/iat", 1764402600), _set("/confirmation/exp", 1764403200), _set("/leeway_seconds/confirmation", 0)],
		"want": {"CONFIRMATION_EXPIRED"},
	},
	# The clock leeway (30 here) is the one tolerance, as Go applied it.
	"exp one second inside the leeway": {
		"patch": [_set("/confirmation/iat", 1764402571), _set("/confirmation/exp", 1764403171)],
		"want": set(),
	},
	"exp at now minus the leeway": {
		"patch": [_set("/confirmation/iat", 1764402570), _set("/confirmation/exp", 1764403170)],
		"want": {"CONFIRMATION_EXPIRED"},
	},
	# a clock is part of the check: without one the confirmation is not unexpired
	"now missing": {"patch": [_remove("/now")], "want": {"CONFIRMATION_EXPIRED"}},
	"now a string": {"patch": [_set("/now", "1764403200")], "want": {"CONFIRMATION_EXPIRED"}},
	"cost with a currency sign": {"patch": [_set("/confirmation/cost_usd", "$1000")], "want": {"CONFIRMATION_COST_MALFORMED"}},
	"cost missing": {"patch": [_remove("/confirmation/cost_usd")], "want": {"CONFIRMATION_COST_MALFORMED"}},
	"cost one cent below the estimate": {
		"patch": [_set("/confirmation/cost_usd", "963.79")],
		"want": {"CONFIRMATION_COST_BELOW_ESTIMATE"},
	},
	# a desk confirms the price with the expected lost work: the booked compute alone is short
	"cost covering all but the expected lost work": {
		"patch": [_set("/confirmation/cost_usd", "961.68")],
		"want": {"CONFIRMATION_COST_BELOW_ESTIMATE"},
	},
	"cancel is not priced": {
		"patch": array.concat(_action("train.cancel", "run_1"), [_set("/confirmation/cost_usd", "0")]),
		"want": set(),
	},
	"no confirmation at all": {
		"patch": [_remove("/confirmation")],
		"want": {
			"CONFIRMATION_ACTION_MISMATCH", "CONFIRMATION_ACCOUNT_MISMATCH", "CONFIRMATION_BOOKING_MISMATCH",
			"CONFIRMATION_MANIFEST_MISMATCH", "CONFIRMATION_LIFETIME_TOO_LONG", "CONFIRMATION_EXPIRED",
			"CONFIRMATION_COST_MALFORMED",
		},
	},
}

test_cost_below_estimate_message if {
	inp := json.patch(_base, [_set("/confirmation/cost_usd", "500")])
	[v.message | some v in confirmation.deny with input as inp] == [
		"the confirmation covers 500 USD; the run is estimated at 963.80 USD (2.12 USD of it expected lost work)",
	]
}

# A booking.release confirmation names no run: a missing run_id claim is "".
test_release_without_run_id_claim if {
	inp := json.patch(_base, array.concat(_action("booking.release", ""), [_remove("/confirmation/run_id")]))
	_codes(inp) == set()
}

# A cancel whose confirmation names no run is still for another run.
test_cancel_without_run_id_claim if {
	inp := json.patch(_base, array.concat(_action("train.cancel", "run_01"), [_remove("/confirmation/run_id")]))
	_codes(inp) == {"CONFIRMATION_RUN_MISMATCH"}
}
