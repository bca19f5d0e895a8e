package ito.entitlement_test

import data.ito.entitlement

_teardown(act, patch) := json.patch(data.ito.testdata.base.input, array.concat(
	[
		{"op": "add", "path": "/request/action", "value": act},
		{"op": "add", "path": "/request/run_id", "value": "run_01"},
		{"op": "add", "path": "/manifest", "value": {}},
		{"op": "add", "path": "/manifest_digest", "value": ""},
	],
	patch,
))

_ent_codes(inp) := {v.code | some v in entitlement.deny with input as inp}

_after_term := [
	{"op": "add", "path": "/entitlement/booking_state", "value": "expired"},
	{"op": "add", "path": "/entitlement/training_eligible", "value": false},
	{"op": "add", "path": "/entitlement/term/end", "value": 1764400001},
]

# A run can be cancelled or cleaned up after its booking ended.
test_teardown_after_term_allowed[act] if {
	some act in ["train.cancel", "train.cleanup"]
	_ent_codes(_teardown(act, _after_term)) == set()
}

# Creating a run or releasing the booking still needs a live, completed booking.
test_other_actions_after_term_denied[act] if {
	some act in ["train.create", "booking.release"]
	codes := _ent_codes(_teardown(act, _after_term))
	{"ENTITLEMENT_BOOKING_NOT_COMPLETED", "ENTITLEMENT_OUTSIDE_TERM"} & codes == {
		"ENTITLEMENT_BOOKING_NOT_COMPLETED", "ENTITLEMENT_OUTSIDE_TERM",
	}
}

# Teardown never precedes the term, and an incomplete booking has no run.
test_teardown_before_term_or_incomplete_denied if {
	_ent_codes(_teardown("train.cancel", [{"op": "add", "path": "/entitlement/term/start", "value": 1864400000}])) == {
		"ENTITLEMENT_OUTSIDE_TERM",
	}
	_ent_codes(_teardown("train.cleanup", [{"op": "add", "path": "/entitlement/booking_state", "value": "incomplete"}])) == {
		"ENTITLEMENT_BOOKING_NOT_COMPLETED",
	}
}
