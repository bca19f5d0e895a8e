package ito.datachecks_test

import data.ito.datachecks

_base := data.ito.testdata.base.input

_set(path, value) := {"op": "add", "path": path, "value": value}

_custom := "s3://acme-data/custom-web-2026-10/"

_digest := concat("", ["sha256:", concat("", ["ab" | some _ in numbers.range(1, 32)])])

test_catalog_dataset_is_not_custom if {
	datachecks.custom_datasets == [] with input as _base
}

test_run_tokens_is_the_smaller_limit if {
	# 1000 steps × 64 × 8192 = 524,288,000 tokens, below max_tokens 1e12
	datachecks.run_tokens == 524288000 with input as json.patch(_base, [_set("/manifest/objective/max_tokens", 1000000000000)])
}

test_small_run_on_custom_data_needs_no_ladder if {
	inp := json.patch(_base, [
		_set("/manifest/data/0/uri", _custom),
		_set("/manifest/data/0/dedup", {"method": "minhash-lsh", "ratio": 0.1, "report_digest": _digest}),
	])
	datachecks.custom_datasets == [0] with input as inp
	count(datachecks.deny) == 0 with input as inp
}

test_unverified_ladder_decision_is_not_counted if {
	inp := json.patch(_base, [
		_set("/manifest/objective/max_steps", 2000),
		_set("/manifest/data/0/uri", _custom),
		_set("/manifest/data/0/digest", _digest),
		_set("/manifest/data/0/dedup", {"method": "minhash-lsh", "ratio": 0.1, "report_digest": _digest}),
		_set("/eval_reports", [{"verified": false, "key_id": "k", "claims": {
			"kind": "ladder_decision", "dataset_digest": _digest, "outcome": "proceed", "iat": _base.now,
		}}]),
	])
	{v.code | some v in datachecks.deny with input as inp} == {"DATA_LADDER_DECISION_MISSING"}
}

test_dedup_ratio_must_be_below_one if {
	inp := json.patch(_base, [
		_set("/manifest/data/0/uri", _custom),
		_set("/manifest/data/0/dedup", {"method": "minhash-lsh", "ratio": 1, "report_digest": _digest}),
	])
	{v.code | some v in datachecks.deny with input as inp} == {"DATA_DEDUP_MISSING"}
}
