package ito.lib_test

import data.ito.lib

test_micro_usd[name] if {
	some name, tc in {
		"whole": {"in": "1000", "want": 1000000000},
		"cents": {"in": "2.49", "want": 2490000},
		"one decimal": {"in": "2.5", "want": 2500000},
		"six decimals": {"in": "0.000001", "want": 1},
		"zero": {"in": "0", "want": 0},
		"zero cents": {"in": "0.00", "want": 0},
		"leading zero fraction": {"in": "0.05", "want": 50000},
		"large": {"in": "999999999999.999999", "want": 999999999999999999},
	}
	lib.micro_usd(tc.in) == tc.want
}

test_micro_usd_malformed[name] if {
	some name, s in {
		"seven decimals": "2.4900001",
		"negative": "-1.00",
		"plus": "+1.00",
		"exponent": "1e3",
		"comma": "2,49",
		"thousands": "1,000.00",
		"currency": "$10",
		"space": " 10",
		"leading zero": "010.00",
		"trailing dot": "10.",
		"leading dot": ".5",
		"empty": "",
		"thirteen digits": "1000000000000",
		"number": 2.49,
		"null": null,
	}
	not lib.micro_usd(s)
}

# 3 × 16 h × 2.49 is 119.52 exactly; OPA's float arithmetic gives 119.520000000000000004
test_money_is_exact if {
	(3 * 1600) * lib.micro_usd("2.49") == 11952000000
	lib.usd(lib.ceil_div((3 * 1600) * lib.micro_usd("2.49"), 100)) == "119.52"
}

test_ceil_cent[name] if {
	some name, tc in {
		"zero": {"in": 0, "want": 0},
		"whole cents": {"in": 1240000, "want": 1240000},
		"one micro-dollar over": {"in": 1240001, "want": 1250000},
		"one micro-dollar": {"in": 1, "want": 10000},
	}
	lib.ceil_cent(tc.in) == tc.want
}

test_centi[name] if {
	some name, tc in {
		"integer": {"in": 6, "want": 600},
		"one decimal": {"in": 6.5, "want": 650},
		"two decimals": {"in": 12.25, "want": 1225},
		"small": {"in": 0.01, "want": 1},
	}
	lib.centi(tc.in) == tc.want
}

test_centi_malformed[name] if {
	some name, x in {"three decimals": 6.125, "string": "6", "negative": -1, "exponent": 1e21, "null": null}
	not lib.centi(x)
}

test_usd_rounds_up[name] if {
	some name, tc in {
		"exact": {"in": 956160000, "want": "956.16"},
		"one micro over": {"in": 956160001, "want": "956.17"},
		"one micro": {"in": 1, "want": "0.01"},
		"zero": {"in": 0, "want": "0.00"},
		"large": {"in": 123456789012345678, "want": "123456789012.35"},
	}
	lib.usd(tc.in) == tc.want
}

test_ceil_div[name] if {
	some name, tc in {
		"exact": {"a": 10, "b": 5, "want": 2},
		"round up": {"a": 11, "b": 5, "want": 3},
		"zero": {"a": 0, "b": 7, "want": 0},
	}
	lib.ceil_div(tc.a, tc.b) == tc.want
}

# Beyond 2^63 Rego's `/` is a 64-bit float: the quotients below are what exact
# integer arithmetic gives (checked with Python's //), not the float's.
test_div_floor_exact_at_any_size[name] if {
	some name, tc in {
		"small": {"a": 11, "b": 5, "floor": 2, "ceil": 3},
		"2^63 - 1": {"a": 9223372036854775807, "b": 100, "floor": 92233720368547758, "ceil": 92233720368547759},
		"2^63": {"a": 9223372036854775808, "b": 100, "floor": 92233720368547758, "ceil": 92233720368547759},
		"2^63 + 99": {"a": 9223372036854775907, "b": 100, "floor": 92233720368547759, "ceil": 92233720368547760},
		"2^64 + 1": {"a": 18446744073709551617, "b": 3, "floor": 6148914691236517205, "ceil": 6148914691236517206},
		"10^32 + 12345": {
			"a": 100000000000000000000000000012345, "b": 100,
			"floor": 1000000000000000000000000000123, "ceil": 1000000000000000000000000000124,
		},
		"29 digits by 3600": {
			"a": 98765432109876543210987654321, "b": 3600,
			"floor": 27434842252743484225274348, "ceil": 27434842252743484225274349,
		},
		"2^100 - 1 by 2^30": {
			"a": 1267650600228229401496703205375, "b": 1073741824,
			"floor": 1180591620717411303423, "ceil": 1180591620717411303424,
		},
		"2^120 + 7 by 7": {
			"a": 1329227995784915872903807060280344583, "b": 7,
			"floor": 189889713683559410414829580040049226, "ceil": 189889713683559410414829580040049227,
		},
	}
	lib.div_floor(tc.a, tc.b) == tc.floor
	lib.ceil_div(tc.a, tc.b) == tc.ceil
}

test_centi_string_large if {
	lib.centi_string(89702399999999999910297600) == "897023999999999999102976.00"
	lib.usd(89702399999999999910297600000001) == "89702399999999999910297600.01"
}

test_show[name] if {
	some name, tc in {
		"string": {"in": "us-east-1", "want": `"us-east-1"`},
		"number": {"in": 8, "want": "8"},
		"null": {"in": null, "want": "null"},
		"bool": {"in": true, "want": "true"},
		"aws key": {"in": "AKIAIOSFODNN7EXAMPLE", "want": "(withheld)"},
		"long": {"in": concat("", ["x" | some _ in numbers.range(1, 65)]), "want": "(withheld)"},
		"url with userinfo": {"in": "https://u:p@h/", "want": "(withheld)"},
		"object": {"in": {"a": 1}, "want": "(withheld)"},
	}
	lib.show(tc.in) == tc.want
}

test_violation_fix_from_metadata if {
	lib.violation({"custom": {"code": "X", "gate": "g", "fix": "f"}}, "m") == {"code": "X", "gate": "g", "message": "m", "fix": "f"}
	lib.violation({"custom": {"code": "X", "gate": "g"}}, "m") == {"code": "X", "gate": "g", "message": "m"}
}

test_value_at[name] if {
	some name, tc in {
		"nested": {"doc": {"a": {"b": 1}}, "path": ["a", "b"], "want": 1},
		"missing": {"doc": {"a": {}}, "path": ["a", "b"], "want": "default"},
		"not an object": {"doc": "a string", "path": ["a"], "want": "default"},
	}
	lib.value_at(tc.doc, tc.path, "default") == tc.want
}

test_is_count[name] if {
	some name, tc in {
		"one": {"in": 1, "want": true},
		"zero": {"in": 0, "want": false},
		"fraction": {"in": 1.5, "want": false},
		"string": {"in": "1", "want": false},
	}
	_is_count(tc.in) == tc.want
}

_is_count(x) if lib.is_count(x)

else := false

# the constant patterns of scaled are the ones its documentation describes, for 1..6 places
test_decimal_patterns[places] if {
	some places in numbers.range(1, 6)
	lib._decimal_patterns[places] == sprintf(`^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,%d}))?$`, [places])
	lib._units[places] == to_number(concat("", ["1", substring("000000", 0, places)]))
}

test_scaled_places[name] if {
	some name, tc in {
		"one place": {"s": "2.5", "places": 1, "want": 25},
		"three places": {"s": "0.023", "places": 3, "want": 23},
		"padded": {"s": "7.1", "places": 4, "want": 71000},
		"whole": {"s": "12", "places": 5, "want": 1200000},
	}
	lib.scaled(tc.s, tc.places) == tc.want
}

test_scaled_malformed[name] if {
	some name, tc in {
		"too many places": {"s": "2.55", "places": 1},
		"no places": {"s": "2", "places": 0},
		"seven places": {"s": "2", "places": 7},
	}
	not lib.scaled(tc.s, tc.places)
}

# The effective manifest of a stage: its settings merged over the manifest
# (nested objects again), stage_settings dropped, objective.stage the stage.
test_stage_manifest if {
	m := {
		"objective": {"stage": "pretrain", "sequence_length": 8192, "global_batch_size": 64},
		"parallelism": {"tensor": 1, "context": 1, "pipeline_split": {"embedding_stage": true}},
		"stage_settings": {"long_context": {
			"objective": {"sequence_length": 32768},
			"parallelism": {"context": 4, "pipeline_split": {"loss_stage": true}},
		}},
	}
	lib.stage_manifest(m, "long_context") == {
		"objective": {"stage": "long_context", "sequence_length": 32768, "global_batch_size": 64},
		"parallelism": {"tensor": 1, "context": 4, "pipeline_split": {"embedding_stage": true, "loss_stage": true}},
	}
	lib.stage_manifest(m, "sft") == {
		"objective": {"stage": "sft", "sequence_length": 8192, "global_batch_size": 64},
		"parallelism": {"tensor": 1, "context": 1, "pipeline_split": {"embedding_stage": true}},
	}
}

test_train_manifest_is_the_stage_s_for_an_advance_only if {
	m := {"objective": {"stage": "pretrain"}, "stage_settings": {"sft": {"objective": {"max_steps": 5}}}}
	lib.train_manifest == m with input as {"request": {"action": "train.create", "stage": "sft"}, "manifest": m}
	lib.train_manifest == {"objective": {"stage": "sft", "max_steps": 5}} with input as {
		"request": {"action": "train.stage.advance", "stage": "sft"},
		"manifest": m,
	}
}

# The action helpers read the bundle's action table (equal to Go's api.Actions by test).
test_action_helpers if {
	lib.actions == {
		"train.create", "train.stage.advance", "train.restart", "train.cancel", "train.cleanup",
		"booking.release",
	}
	{a | some a in lib.actions; lib.steps_run(a)} == {"train.stage.advance", "train.restart"}
	{a | some a in lib.actions; lib.acts_on_run(a)} == {
		"train.stage.advance", "train.restart", "train.cancel", "train.cleanup",
	}
	{a | some a in lib.actions; lib.runs_training_gates with input.request.action as a} == {
		"train.create", "train.stage.advance",
	}
}

# micro_usd writes scaled(s, 6) out (no call per amount): the two agree on
# well-formed amounts and on every malformed one.
test_micro_usd_is_scaled_to_six_places[s] if {
	some s in [
		"0", "0.0", "1", "2.49", "2.5", "0.000001", "999999999999", "999999999999.999999", "1000000000000",
		"0.0000001", "01", "1.", ".5", "-1", "1e3", "+1", " 1", "1,000", "$1", "", 1, null,
	]
	_or_undefined_micro(s) == _or_undefined_scaled(s)
}

_or_undefined_micro(s) := n if n := lib.micro_usd(s)

else := "undefined"

_or_undefined_scaled(s) := n if n := lib.scaled(s, 6)

else := "undefined"
