package ito.admission_test

import data.ito.admission

# the llama3-8b example manifest (fixtures/manifests/llama3-8b.json; the Go test keeps
# this copy identical) with matching entitlement, confirmation and ledger facts
_base := data.ito.testdata.base.input

_set(path, value) := {"op": "add", "path": path, "value": value}

_remove(path) := {"op": "remove", "path": path}

_action(act, run_id) := [
	_set("/request/action", act),
	_set("/request/run_id", run_id),
	_set("/manifest", {}),
	_set("/manifest_digest", ""),
	_set("/verification/manifest_signature", {"verified": false, "key_id": ""}),
	_set("/confirmation/act", act),
	_set("/confirmation/run_id", run_id),
	_set("/confirmation/manifest_digest", ""),
	_set("/confirmation/cost_usd", "0.00"),
]

test_llama3_8b_is_allowed if {
	d := admission.decision with input as _base
	d.allow == true
	d.violations == []
	d.warnings == []
	d.estimates.world_size == 64
	d.estimates.total_cost_usd == "963.80"
}

test_decision_codes[name] if {
	some name, tc in _cases
	d := admission.decision with input as json.patch(_base, tc.patch)
	got := [v.code | some v in d.violations]
	print(name, "got", got)
	got == tc.want
	want_allow := count(tc.want) == 0
	d.allow == want_allow
}

# codes in decision order (sorted by code, then message)
_cases := {
	"valid create": {"patch": [], "want": []},
	"valid cancel": {"patch": _action("train.cancel", "run_1"), "want": []},
	"valid cleanup": {"patch": _action("train.cleanup", "run_1"), "want": []},
	"valid release": {"patch": _action("booking.release", ""), "want": []},
	"cleanup that releases the booking": {
		"patch": array.concat(_action("train.cleanup", "run_1"), [_set("/request/releases_booking", true)]),
		"want": ["CLEANUP_RELEASE_NOT_CONFIRMED"],
	},
	"cancel does not run the manifest gates": {
		"patch": array.concat(_action("train.cancel", "run_1"), [_set("/manifest", {"name": "x"})]),
		"want": [],
	},
	"unknown action": {
		"patch": [_set("/request/action", "train.delete"), _set("/confirmation/act", "train.delete")],
		"want": ["ACTION_UNKNOWN"],
	},
	"action missing": {"patch": [_remove("/request/action")], "want": ["ACTION_UNKNOWN"]},
	"idempotency key reused": {
		"patch": [_set("/ledger/idempotency", {"seen": true, "same_request": false})],
		"want": ["IDEMPOTENCY_KEY_CONFLICT"],
	},
	"caller unverified": {"patch": [_set("/verification/caller/verified", false)], "want": ["CALLER_UNVERIFIED"]},
	"caller without account": {
		"patch": [_set("/caller/account", ""), _set("/entitlement/sub", ""), _set("/confirmation/sub", "")],
		"want": ["CALLER_ACCOUNT_MISSING", "CONFIRMATION_ACCOUNT_MISMATCH", "ENTITLEMENT_ACCOUNT_MISMATCH"],
	},
	"nothing verified": {
		"patch": [
			_set("/verification/caller/verified", false), _set("/verification/manifest_signature/verified", false),
			_set("/verification/entitlement/verified", false), _set("/verification/confirmation/verified", false),
		],
		"want": ["CALLER_UNVERIFIED", "CONFIRMATION_UNVERIFIED", "ENTITLEMENT_UNVERIFIED", "MANIFEST_SIGNATURE_UNVERIFIED"],
	},
	"fp8 on A100 over budget": {
		"patch": [_set("/manifest/parallelism/precision", "fp8"), _set("/manifest/budget/ceiling_usd", "900.00")],
		"want": ["BUDGET_CEILING_EXCEEDED", "FP8_UNSUPPORTED_GPU"],
	},
	"empty input": {
		"patch": [{"op": "replace", "path": "", "value": {}}],
		"want": ["ACTION_UNKNOWN", "CALLER_ACCOUNT_MISSING", "CALLER_UNVERIFIED"],
	},
}

test_sorted_by_code_then_message if {
	inp := json.patch(_base, [
		_set("/manifest/data/-", object.union(_base.manifest.data[0], {"license": "zz-proprietary"})),
		_set("/manifest/data/-", object.union(_base.manifest.data[0], {"license": "aa-proprietary"})),
		_set("/verification/caller/verified", false),
	])
	d := admission.decision with input as inp
	[[v.code, v.message] | some v in d.violations] == [
		["CALLER_UNVERIFIED", "the caller's identity was not verified"],
		["DATA_LICENSE_NOT_ALLOWED", `dataset data[1] has license "zz-proprietary", which is not on the allow-list`],
		["DATA_LICENSE_NOT_ALLOWED", `dataset data[2] has license "aa-proprietary", which is not on the allow-list`],
	]
	d.allow == false
}

test_warnings_do_not_deny if {
	d := admission.decision with input as json.patch(_base, [
		{"op": "add", "path": "/manifest/checkpoint/storage_region", "value": "eu-west-1"},
		{"op": "add", "path": "/manifest/checkpoint/storage_uri", "value": "s3://ito-checkpoints-euw1/llama3-8b/"},
	])
	d.allow == true
	[v.code | some v in d.warnings] == ["CHECKPOINT_REGION_REMOTE"]
}

test_estimates_only_for_create if {
	d := admission.decision with input as json.patch(_base, _action("train.cancel", "run_1"))
	d.estimates == {}
}

test_decision_shape[name] if {
	some name, tc in _cases
	d := admission.decision with input as json.patch(_base, tc.patch)
	object.keys(d) == {"allow", "violations", "warnings", "estimates"}
	is_boolean(d.allow)
	is_object(d.estimates)
	every v in array.concat(d.violations, d.warnings) {
		object.keys(v) - {"fix"} == {"code", "gate", "message"}
		regex.match(`^[A-Z][A-Z0-9_]*$`, v.code)
		v.message != ""
	}
}

# Every fixture manifest (fixtures/manifests) against its expected outcome
# (fixtures/cases/policy-cases.json). The Go test in policies/ builds these inputs
# into testdata and keeps them in sync (go test ./policies -update).
# (several test rules, so that none runs long: each deny searches a fix)
test_fixture_cases_1[name] if {
	some name, tc in _split(_fixtures, 3, 0)
	_assert_fixture(name, tc)
}

test_fixture_cases_2[name] if {
	some name, tc in _split(_fixtures, 3, 1)
	_assert_fixture(name, tc)
}

test_fixture_cases_3[name] if {
	some name, tc in _split(_fixtures, 3, 2)
	_assert_fixture(name, tc)
}

_fixtures := {tc.manifest: tc | some tc in data.ito.testdata.fixtures.cases}

_assert_fixture(name, tc) if {
	d := admission.decision with input as tc.input
	got := {"allow": d.allow, "violations": [v.code | some v in d.violations], "warnings": [v.code | some v in d.warnings]}
	print(name, got)
	got == {"allow": tc.allow, "violations": tc.codes, "warnings": tc.warnings}
}

# One case per policy code and level (fixtures/cases/code-cases.json, copied
# into testdata by the Go test): the base input changed by a JSON patch, with
# the exact decision codes. The Go test also fails when a documented code is
# produced by no case. The fix search is stubbed: these cases are about codes.
test_code_cases_1[name] if {
	some name, tc in _split(_code_cases, 8, 0)
	_assert_code_case(name, tc)
}

test_code_cases_2[name] if {
	some name, tc in _split(_code_cases, 8, 1)
	_assert_code_case(name, tc)
}

test_code_cases_3[name] if {
	some name, tc in _split(_code_cases, 8, 2)
	_assert_code_case(name, tc)
}

test_code_cases_4[name] if {
	some name, tc in _split(_code_cases, 8, 3)
	_assert_code_case(name, tc)
}

test_code_cases_5[name] if {
	some name, tc in _split(_code_cases, 8, 4)
	_assert_code_case(name, tc)
}

test_code_cases_6[name] if {
	some name, tc in _split(_code_cases, 8, 5)
	_assert_code_case(name, tc)
}

test_code_cases_7[name] if {
	some name, tc in _split(_code_cases, 8, 6)
	_assert_code_case(name, tc)
}

test_code_cases_8[name] if {
	some name, tc in _split(_code_cases, 8, 7)
	_assert_code_case(name, tc)
}

_code_cases := {tc.name: tc | some tc in data.ito.testdata.codes.cases}

_assert_code_case(name, tc) if {
	inp := json.patch(_base, tc.patch)
	d := admission.decision with input as inp with data.ito.parallelism._fix as {"on_booked_hardware": false}
	got := {"allow": d.allow, "violations": [v.code | some v in d.violations], "warnings": [v.code | some v in d.warnings]}
	print(name, got)
	got == {"allow": count(tc.codes) == 0, "violations": tc.codes, "warnings": tc.warnings}
}

test_code_cases_are_loaded if count(data.ito.testdata.codes.cases) >= 70

# part k of n of a case table, by the sorted case names
_split(cases, n, k) := {name: cases[name] | some i, name in sort(object.keys(cases)); i % n == k}

# An ill-typed field (which Go's schema validation refuses first) still gets a
# coded deny from policy, never a builtin error: the Go test runs these with
# builtin errors raised, as the server evaluates.
test_ill_typed_fields_are_coded[name] if {
	some name, tc in {
		"nodes as a string": {"path": "/manifest/hardware/nodes", "value": "8", "code": "MANIFEST_FIELD_INVALID"},
		"tensor as a string": {"path": "/manifest/parallelism/tensor", "value": "1", "code": "MANIFEST_FIELD_INVALID"},
		"parameters null": {"path": "/manifest/model/parameters", "value": null, "code": "MANIFEST_FIELD_INVALID"},
		"parallelism a string": {"path": "/manifest/parallelism", "value": "fsdp", "code": "MANIFEST_FIELD_INVALID"},
		"moe a list": {"path": "/manifest/model/moe", "value": [], "code": "MANIFEST_FIELD_INVALID"},
		"bytes per param a string": {"path": "/manifest/parallelism/bytes_per_param", "value": "2", "code": "MANIFEST_FIELD_INVALID"},
		"license a number": {"path": "/manifest/data/0/license", "value": 1, "code": "DATA_LICENSE_NOT_ALLOWED"},
		"dataset a string": {"path": "/manifest/data/0", "value": "s3://x", "code": "MANIFEST_FIELD_INVALID"},
		"hours a string": {"path": "/manifest/budget/max_wall_clock_hours", "value": "6", "code": "BUDGET_HOURS_MALFORMED"},
		"checkpoint size a string": {"path": "/manifest/checkpoint/size_estimate_gib", "value": "1", "code": "BUDGET_ESTIMATE_UNAVAILABLE"},
		"now a string": {"path": "/now", "value": "x", "code": "ENTITLEMENT_STALE"},
		"iat a string": {"path": "/entitlement/iat", "value": "x", "code": "ENTITLEMENT_STALE"},
		"manifest a list": {"path": "/manifest", "value": [], "code": "MANIFEST_FIELD_INVALID"},
	}
	d := admission.decision with input as json.patch(_base, [_set(tc.path, tc.value)])
	d.allow == false
	tc.code in {v.code | some v in d.violations}
}

test_fixture_cases_are_loaded if count(data.ito.testdata.fixtures.cases) >= 6
