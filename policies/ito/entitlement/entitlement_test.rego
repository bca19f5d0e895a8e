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

# ---------------------------------------------------------------------------
# The telemetry claim: well-formed, within the bundle's bounds
# (data.ito.config.checkpoint.telemetry) and fresh, wherever the training
# gates run. Base: now 1764403200, iat 1764403100, max age 86400 s.

_telemetry(claim) := [_set("/entitlement/telemetry", claim)]

_tel := {"measured_at": 1764403000, "window_seconds": 604800, "interruptions_per_gpu_hour": 0.0002}

_with(fields) := object.union(_tel, fields)

_without(key) := object.remove(_tel, [key])

test_telemetry_codes[name] if {
	some name, tc in _telemetry_cases
	got := _codes(json.patch(_base, tc.patch))
	print(name, "got", got)
	got == tc.want
}

_malformed := {"ENTITLEMENT_TELEMETRY_MALFORMED"}

_telemetry_cases := {
	"absent": {"patch": [], "want": set()},
	"a failure rate": {"patch": _telemetry(_tel), "want": set()},
	"a write bandwidth only": {
		"patch": _telemetry(object.union(_without("interruptions_per_gpu_hour"), {
			"checkpoint_write_gbytes_per_s_per_node": {"s3-standard": 1.5, "lustre": 4},
		})),
		"want": set(),
	},
	"rate at the lower bound": {"patch": _telemetry(_with({"interruptions_per_gpu_hour": 0.000001})), "want": set()},
	"rate at the upper bound": {"patch": _telemetry(_with({"interruptions_per_gpu_hour": 0.01})), "want": set()},
	"measured exactly at iat": {"patch": _telemetry(_with({"measured_at": 1764403100})), "want": set()},
	"exactly the max age old": {"patch": _telemetry(_with({"measured_at": 1764316800})), "want": set()},
	"window exactly the minimum": {"patch": _telemetry(_with({"window_seconds": 3600})), "want": set()},
	"null": {"patch": _telemetry(null), "want": _malformed},
	"a string": {"patch": _telemetry("0.0002"), "want": _malformed},
	"no measurement": {"patch": _telemetry(_without("interruptions_per_gpu_hour")), "want": _malformed},
	"an unknown field": {"patch": _telemetry(_with({"gpu_hours_between_failures": 5000})), "want": _malformed},
	"rate zero": {"patch": _telemetry(_with({"interruptions_per_gpu_hour": 0})), "want": _malformed},
	"rate below the bound": {"patch": _telemetry(_with({"interruptions_per_gpu_hour": 0.0000009})), "want": _malformed},
	"rate above the bound (per GPU-day?)": {
		"patch": _telemetry(_with({"interruptions_per_gpu_hour": 0.011})),
		"want": _malformed,
	},
	"rate as a string": {"patch": _telemetry(_with({"interruptions_per_gpu_hour": "0.0002"})), "want": _malformed},
	"measured after iat": {"patch": _telemetry(_with({"measured_at": 1764403101})), "want": _malformed},
	"measured_at a fraction": {"patch": _telemetry(_with({"measured_at": 1764403000.5})), "want": _malformed},
	"measured_at missing": {"patch": _telemetry(_without("measured_at")), "want": _malformed},
	"window below the minimum": {"patch": _telemetry(_with({"window_seconds": 3599})), "want": _malformed},
	"window missing": {"patch": _telemetry(_without("window_seconds")), "want": _malformed},
	"bandwidth of an unknown tier": {
		"patch": _telemetry(_with({"checkpoint_write_gbytes_per_s_per_node": {"s3-express": 2}})),
		"want": _malformed,
	},
	"bandwidth map empty": {
		"patch": _telemetry(_with({"checkpoint_write_gbytes_per_s_per_node": {}})),
		"want": _malformed,
	},
	"bandwidth above the bound": {
		"patch": _telemetry(_with({"checkpoint_write_gbytes_per_s_per_node": {"s3-standard": 101}})),
		"want": _malformed,
	},
	"bandwidth not a map": {
		"patch": _telemetry(_with({"checkpoint_write_gbytes_per_s_per_node": 2.5})),
		"want": _malformed,
	},
	"one second past the max age": {
		"patch": _telemetry(_with({"measured_at": 1764316799})),
		"want": {"ENTITLEMENT_TELEMETRY_STALE"},
	},
	"malformed and stale: malformed": {
		"patch": _telemetry(_with({"measured_at": 1764316799, "interruptions_per_gpu_hour": 1})),
		"want": _malformed,
	},
	# a teardown never reads the telemetry
	"malformed on a cancel": {"patch": array.concat(_cancel, _telemetry(null)), "want": set()},
	"stale on a cancel": {"patch": array.concat(_cancel, _telemetry(_with({"measured_at": 1}))), "want": set()},
}

test_telemetry_messages if {
	stale := json.patch(_base, _telemetry(_with({"measured_at": 1764316799})))
	[v.message | some v in entitlement.deny with input as stale] == [
		"the entitlement's telemetry was measured 86401 s before now, above the 86400 s limit",
	]
	malformed := json.patch(_base, _telemetry(null))
	[v.message | some v in entitlement.deny with input as malformed] == [concat("", [
		"the entitlement's telemetry claim is malformed or out of bounds (interruptions_per_gpu_hour 1e-06..0.01,",
		" checkpoint_write_gbytes_per_s_per_node 0.01..100 for tiers of the storage table, window_seconds >= 3600,",
		" measured_at <= iat)",
	])]
}
