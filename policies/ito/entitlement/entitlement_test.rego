package ito.entitlement_test

import data.ito.entitlement

# a valid train.create input: the llama3-8b example with matching facts
_base := data.ito.testdata.base.input

_codes(inp) := {v.code | some v in entitlement.deny with input as inp}

_set(path, value) := {"op": "add", "path": path, "value": value}

_cancel := [
	_set("/request/action", "train.cancel"),
	_set("/request/run_id", "run_1"),
	_set("/manifest", {}),
	_set("/manifest_digest", ""),
]

test_entitlement_codes[name] if {
	some name, tc in _cases
	got := _codes(json.patch(_base, tc.patch))
	print(name, "got", got)
	got == tc.want
}

_cases := {
	"valid": {"patch": [], "want": set()},
	"valid at the freshness limit": {"patch": [_set("/entitlement/iat", 1764402900)], "want": set()},
	"valid at the term start": {"patch": [_set("/entitlement/term/start", 1764403200)], "want": set()},
	"valid for cancel without a manifest": {"patch": _cancel, "want": set()},
	"unverified": {
		"patch": [_set("/verification/entitlement/verified", false)],
		"want": {"ENTITLEMENT_UNVERIFIED"},
	},
	"verification missing": {
		"patch": [{"op": "remove", "path": "/verification/entitlement"}],
		"want": {"ENTITLEMENT_UNVERIFIED"},
	},
	"verified is a string": {
		"patch": [_set("/verification/entitlement/verified", "true")],
		"want": {"ENTITLEMENT_UNVERIFIED"},
	},
	"expired booking": {"patch": [_set("/entitlement/booking_state", "expired")], "want": {"ENTITLEMENT_BOOKING_NOT_COMPLETED"}},
	"revoked booking": {"patch": [_set("/entitlement/booking_state", "revoked")], "want": {"ENTITLEMENT_BOOKING_NOT_COMPLETED"}},
	"released booking": {"patch": [_set("/entitlement/booking_state", "released")], "want": {"ENTITLEMENT_BOOKING_NOT_COMPLETED"}},
	"incomplete booking": {
		"patch": [_set("/entitlement/booking_state", "incomplete")],
		"want": {"ENTITLEMENT_BOOKING_NOT_COMPLETED"},
	},
	"not training eligible": {
		"patch": [_set("/entitlement/training_eligible", false)],
		"want": {"ENTITLEMENT_NOT_TRAINING_ELIGIBLE"},
	},
	"training eligible missing": {
		"patch": [{"op": "remove", "path": "/entitlement/training_eligible"}],
		"want": {"ENTITLEMENT_NOT_TRAINING_ELIGIBLE"},
	},
	"stale by one second": {"patch": [_set("/entitlement/iat", 1764402899)], "want": {"ENTITLEMENT_STALE"}},
	"issued in the future": {"patch": [_set("/entitlement/iat", 1764403261)], "want": {"ENTITLEMENT_STALE"}},
	# The clock leeway (input.leeway_seconds, 30 here) is the one tolerance,
	# the same Go applied: ±1 s around each boundary.
	"iat at now plus the leeway": {"patch": [_set("/entitlement/iat", 1764403230)], "want": set()},
	"iat one second past the leeway": {"patch": [_set("/entitlement/iat", 1764403231)], "want": {"ENTITLEMENT_STALE"}},
	"exp one second inside the leeway": {"patch": [_set("/entitlement/exp", 1764403171)], "want": set()},
	"exp at now minus the leeway": {"patch": [_set("/entitlement/exp", 1764403170)], "want": {"ENTITLEMENT_EXPIRED"}},
	"no leeway given": {
		"patch": [{"op": "remove", "path": "/leeway_seconds"}, _set("/entitlement/exp", 1764403200)],
		"want": {"ENTITLEMENT_EXPIRED"},
	},
	"leeway of another type": {"patch": [_set("/leeway_seconds/entitlement", "30")], "want": {"ENTITLEMENT_STALE", "ENTITLEMENT_EXPIRED"}},
	"iat missing": {"patch": [{"op": "remove", "path": "/entitlement/iat"}], "want": {"ENTITLEMENT_STALE"}},
	"expired now, no leeway": {
		"patch": [_set("/entitlement/exp", 1764403200), _set("/leeway_seconds/entitlement", 0)],
		"want": {"ENTITLEMENT_EXPIRED"},
	},
	"exp is a string": {"patch": [_set("/entitlement/exp", "1764403700")], "want": {"ENTITLEMENT_EXPIRED"}},
	"other booking": {"patch": [_set("/entitlement/booking_id", "bk_02")], "want": {"ENTITLEMENT_BOOKING_MISMATCH"}},
	"empty booking ids": {
		"patch": [_set("/entitlement/booking_id", ""), _set("/request/booking_id", "")],
		"want": {"ENTITLEMENT_BOOKING_MISMATCH"},
	},
	"other account": {"patch": [_set("/entitlement/sub", "acct_43")], "want": {"ENTITLEMENT_ACCOUNT_MISMATCH"}},
	"empty accounts": {
		"patch": [_set("/entitlement/sub", ""), _set("/caller/account", "")],
		"want": {"ENTITLEMENT_ACCOUNT_MISMATCH"},
	},
	"other gpu type": {"patch": [_set("/entitlement/gpu/type", "H100-SXM-80GB")], "want": {"ENTITLEMENT_TOPOLOGY_MISMATCH"}},
	"fewer nodes": {"patch": [_set("/entitlement/gpu/nodes", 4)], "want": {"ENTITLEMENT_TOPOLOGY_MISMATCH"}},
	"run on part of the booked nodes": {"patch": [_set("/entitlement/gpu/nodes", 16)], "want": set()},
	"other gpus per node": {"patch": [_set("/entitlement/gpu/gpus_per_node", 4)], "want": {"ENTITLEMENT_TOPOLOGY_MISMATCH"}},
	"gpu claim missing": {
		"patch": [{"op": "remove", "path": "/entitlement/gpu"}],
		"want": {"ENTITLEMENT_TOPOLOGY_MISMATCH"},
	},
	"other region": {"patch": [_set("/entitlement/region", "eu-west-1")], "want": {"ENTITLEMENT_REGION_MISMATCH"}},
	"other fabric": {"patch": [_set("/entitlement/fabric/type", "roce-v2-400g")], "want": {"ENTITLEMENT_FABRIC_MISMATCH"}},
	"before the term": {"patch": [_set("/entitlement/term/start", 1764403201)], "want": {"ENTITLEMENT_OUTSIDE_TERM"}},
	"at the term end": {"patch": [_set("/entitlement/term/end", 1764403200)], "want": {"ENTITLEMENT_OUTSIDE_TERM"}},
	"term missing": {"patch": [{"op": "remove", "path": "/entitlement/term"}], "want": {"ENTITLEMENT_OUTSIDE_TERM"}},
	"price with a comma": {"patch": [_set("/entitlement/price_per_gpu_hour_usd", "2,49")], "want": {"ENTITLEMENT_PRICE_MALFORMED"}},
	"price as a number": {"patch": [_set("/entitlement/price_per_gpu_hour_usd", 2.49)], "want": {"ENTITLEMENT_PRICE_MALFORMED"}},
	"price missing": {
		"patch": [{"op": "remove", "path": "/entitlement/price_per_gpu_hour_usd"}],
		"want": {"ENTITLEMENT_PRICE_MALFORMED"},
	},
	"cancel ignores the manifest topology": {
		"patch": array.concat(_cancel, [_set("/entitlement/gpu/nodes", 1), _set("/entitlement/region", "eu-west-1")]),
		"want": set(),
	},
	"cancel still needs a booking that completed once": {
		"patch": array.concat(_cancel, [_set("/entitlement/booking_state", "incomplete")]),
		"want": {"ENTITLEMENT_BOOKING_NOT_COMPLETED"},
	},
	"no entitlement at all": {
		"patch": [{"op": "remove", "path": "/entitlement"}],
		"want": {
			"ENTITLEMENT_BOOKING_NOT_COMPLETED", "ENTITLEMENT_NOT_TRAINING_ELIGIBLE", "ENTITLEMENT_STALE",
			"ENTITLEMENT_EXPIRED", "ENTITLEMENT_BOOKING_MISMATCH", "ENTITLEMENT_ACCOUNT_MISMATCH",
			"ENTITLEMENT_OUTSIDE_TERM", "ENTITLEMENT_PRICE_MALFORMED", "ENTITLEMENT_TOPOLOGY_MISMATCH",
			"ENTITLEMENT_REGION_MISMATCH", "ENTITLEMENT_FABRIC_MISMATCH",
		},
	},
	"now missing": {
		"patch": [{"op": "remove", "path": "/now"}],
		"want": {"ENTITLEMENT_STALE", "ENTITLEMENT_EXPIRED", "ENTITLEMENT_OUTSIDE_TERM"},
	},
}

test_booking_state_named_in_message if {
	inp := json.patch(_base, [_set("/entitlement/booking_state", "revoked")])
	some v in entitlement.deny with input as inp
	v.message == `booking "bk_01" is in state "revoked", not "completed"`
	v.gate == "entitlement"
	v.fix != ""
}

test_topology_names_each_field if {
	inp := json.patch(_base, [_set("/entitlement/gpu/nodes", 4), _set("/entitlement/gpu/type", "H100-SXM-80GB")])
	messages := {v.message | some v in entitlement.deny with input as inp}
	messages == {
		`manifest hardware nodes is 8 but the booking has 4`,
		`manifest hardware gpu_type is "A100-80GB" but the booking has "H100-SXM-80GB"`,
	}
}
