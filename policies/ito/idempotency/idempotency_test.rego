package ito.idempotency_test

import data.ito.idempotency

_base := data.ito.testdata.base.input

_codes(inp) := {v.code | some v in idempotency.deny with input as inp}

_set(path, value) := {"op": "add", "path": path, "value": value}

test_idempotency_codes[name] if {
	some name, tc in _cases
	got := _codes(json.patch(_base, tc.patch))
	print(name, "got", got)
	got == tc.want
}

_cases := {
	"new key": {"patch": [], "want": set()},
	"same request again": {
		"patch": [_set("/ledger/idempotency", {"seen": true, "same_request": true})],
		"want": set(),
	},
	"key reused for another request": {
		"patch": [_set("/ledger/idempotency", {"seen": true, "same_request": false})],
		"want": {"IDEMPOTENCY_KEY_CONFLICT"},
	},
	"ledger facts missing": {
		"patch": [{"op": "remove", "path": "/ledger/idempotency"}],
		"want": {"IDEMPOTENCY_KEY_CONFLICT"},
	},
	"seen is a string": {
		"patch": [_set("/ledger/idempotency/seen", "false")],
		"want": {"IDEMPOTENCY_KEY_CONFLICT"},
	},
	"seen without same_request": {
		"patch": [_set("/ledger/idempotency", {"seen": true})],
		"want": {"IDEMPOTENCY_KEY_CONFLICT"},
	},
	"empty key": {"patch": [_set("/request/idempotency_key", "")], "want": {"IDEMPOTENCY_KEY_INVALID"}},
	"key with a space": {"patch": [_set("/request/idempotency_key", "run 1")], "want": {"IDEMPOTENCY_KEY_INVALID"}},
	"key too long": {
		"patch": [_set("/request/idempotency_key", concat("", ["k" | some _ in numbers.range(1, 129)]))],
		"want": {"IDEMPOTENCY_KEY_INVALID"},
	},
	"key of 128": {
		"patch": [_set("/request/idempotency_key", concat("", ["k" | some _ in numbers.range(1, 128)]))],
		"want": set(),
	},
	"key missing": {
		"patch": [{"op": "remove", "path": "/request/idempotency_key"}],
		"want": {"IDEMPOTENCY_KEY_INVALID"},
	},
}

test_conflict_messages[name] if {
	some name, tc in {
		"conflict": {
			"ledger": {"seen": true, "same_request": false},
			"want": "the idempotency key was already used for a different request",
		},
		"missing": {
			"ledger": {},
			"want": "the idempotency ledger facts (seen, same_request) are missing or not booleans",
		},
	}
	inp := json.patch(_base, [_set("/ledger/idempotency", tc.ledger)])
	[v.message | some v in idempotency.deny with input as inp] == [tc.want]
}
