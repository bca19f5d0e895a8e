package ito.booking_test

import data.ito.booking

_base := data.ito.testdata.base.input

_set(path, value) := {"op": "add", "path": path, "value": value}

_usage(held, runs, released) := _set("/ledger/booking", {
	"held_gpus": held, "live_runs": runs,
	"live_run_count": count(runs), "released": released,
})

_run := {"run_id": "run_01aaaaaaaaaaaaaaaaaaaaaaaa", "gpus": 32, "live_until": 1764500000}

# base: 8 nodes × 8 GPUs booked, the run takes all 64.
_cases := {
	"nothing held (the base input)": {"patch": [], "want": set()},
	"empty booking": {"patch": [_usage(0, [], false)], "want": set()},
	"one GPU held": {"patch": [_usage(1, [], false)], "want": {"BOOKING_CAPACITY_EXCEEDED"}},
	"own run holds half": {"patch": [_usage(32, [_run], false)], "want": {"BOOKING_CAPACITY_EXCEEDED"}},
	"half the booking for a run on half": {
		"patch": [
			_usage(32, [_run], false),
			_set("/manifest/hardware/nodes", 4),
		],
		"want": set(),
	},
	"released": {"patch": [_usage(0, [], true)], "want": {"BOOKING_RELEASED"}},
	"cancel is not counted": {
		"patch": [_usage(64, [], true), _set("/request/action", "train.cancel")],
		"want": set(),
	},
}

test_booking_codes[name] if {
	some name, tc in _cases
	inp := json.patch(_base, tc.patch)
	got := {v.code | some v in booking.deny with input as inp}
	print(name, "got", got)
	got == tc.want
}

test_capacity_message_names_own_runs if {
	inp := json.patch(_base, [_usage(32, [_run], false)])
	some v in booking.deny with input as inp
	v.message == "the booking's 64 GPUs cannot hold 64 more: 32 are held by live runs: run_01aaaaaaaaaaaaaaaaaaaaaaaa (32 GPUs)"
}

test_capacity_message_without_own_runs if {
	inp := json.patch(_base, [_usage(8, [], false)])
	some v in booking.deny with input as inp
	v.message == "the booking's 64 GPUs cannot hold 64 more: 8 are held by live runs (none of them this account's)"
}

test_estimates if {
	e := booking.estimates with input as json.patch(_base, [_usage(8, [], false)])
	e == {"booked_gpus": 64, "held_gpus": 8, "run_grace_seconds": 3600}
}

# A missing fact leaves out its key (Go always sends ledger.booking for
# train.create; schemas/input.json requires it).
test_estimates_without_facts if {
	e := booking.estimates with input as {"request": {"action": "train.create"}}
	e == {"run_grace_seconds": 3600}
}

# 20 live runs of this account: 16 named (as Go sends them), the rest counted.
_many := [{"run_id": sprintf("run_%02d", [i]), "gpus": 1, "live_until": 1764500000} | some i in numbers.range(1, 16)]

test_capacity_message_bounds_named_runs if {
	inp := json.patch(_base, [_set("/ledger/booking", {"held_gpus": 20, "live_runs": _many, "live_run_count": 20, "released": false})])
	some v in booking.deny with input as inp
	v.message == concat("", [
		"the booking's 64 GPUs cannot hold 64 more: 20 are held by live runs: ",
		"run_01 (1 GPUs), run_02 (1 GPUs), run_03 (1 GPUs), run_04 (1 GPUs), run_05 (1 GPUs), run_06 (1 GPUs), ",
		"run_07 (1 GPUs), run_08 (1 GPUs), run_09 (1 GPUs), run_10 (1 GPUs), run_11 (1 GPUs), run_12 (1 GPUs), ",
		"run_13 (1 GPUs), run_14 (1 GPUs), run_15 (1 GPUs), run_16 (1 GPUs) and 4 more of this account's",
	])
}

test_capacity_message_with_count_of_named if {
	inp := json.patch(_base, [_set("/ledger/booking", {"held_gpus": 32, "live_runs": [_run], "live_run_count": 1, "released": false})])
	some v in booking.deny with input as inp
	v.message == "the booking's 64 GPUs cannot hold 64 more: 32 are held by live runs: run_01aaaaaaaaaaaaaaaaaaaaaaaa (32 GPUs)"
}

# An input with more than 16 runs (not what Go sends) still names 16.
test_capacity_message_names_at_most_16 if {
	runs := array.concat(_many, [{"run_id": "run_17", "gpus": 1, "live_until": 1764500000}])
	inp := json.patch(_base, [_set("/ledger/booking", {"held_gpus": 17, "live_runs": runs, "live_run_count": 17, "released": false})])
	some v in booking.deny with input as inp
	endswith(v.message, "run_16 (1 GPUs) and 1 more of this account's")
}

# A stage advance into a stage larger than the run: the run grows when the
# booking has the difference free. Base: the run holds 64 GPUs (8 nodes ×
# 8); the booking here has 16 nodes (128 GPUs); the stage asks for `nodes`.
_advance(nodes, run_gpus, held) := json.patch(_base, [
	_set("/request/action", "train.stage.advance"),
	_set("/request/run_id", "run_01"),
	_set("/request/stage", "long_context"),
	_set("/entitlement/gpu/nodes", 16),
	_set("/manifest/stage_settings", {"long_context": {"hardware": {"nodes": nodes}}}),
	_set("/ledger/run", {"state": "live", "stage": "pretrain", "manifest_digest": _base.manifest_digest, "gpus": run_gpus}),
	_usage(held, [], false),
])

_stage_denies(inp) := [v | some v in booking.deny with input as inp; v.code == "STAGE_WORLD_SIZE_EXCEEDS_RUN"]

test_stage_world_size[name] if {
	some name, tc in {
		"grows with room: the booking has the 64 more free": {"nodes": 16, "run": 64, "held": 64, "denied": false},
		"grows into exactly the free GPUs": {"nodes": 12, "run": 64, "held": 96, "denied": false},
		"grows without room": {"nodes": 16, "run": 64, "held": 96, "denied": true},
		"fewer GPUs: the run keeps its own": {"nodes": 4, "run": 64, "held": 128, "denied": false},
		"as many as the run holds": {"nodes": 8, "run": 64, "held": 128, "denied": false},
		"within what an earlier stage grew the run to": {"nodes": 16, "run": 128, "held": 128, "denied": false},
	}
	got := _stage_denies(_advance(tc.nodes, tc.run, tc.held))
	print(name, "got", got)
	count(got) == 1 == tc.denied
}

test_stage_grow_without_room_names_the_figures if {
	[v] := _stage_denies(_advance(16, 64, 96))
	v.message == concat("", [
		"stage \"long_context\" needs 128 GPUs (16 nodes × 8); the run holds 64 and the booking has 32 free ",
		"(128 booked, 96 held by live runs)",
	])
	v.fix == concat("", [
		"free 32 more GPUs of the booking (cancel or clean up another of its runs, or wait until one ends), ",
		"or set the stage's hardware.nodes (stage_settings) to at most 12",
	])
	v.gate == "booking"
}

# Without ledger.run.gpus the run holds its manifest's world size (64).
test_stage_grow_run_gpus_default_to_the_manifest_s if {
	inp := json.patch(_advance(16, 64, 96), [{"op": "remove", "path": "/ledger/run/gpus"}])
	[v] := _stage_denies(inp)
	startswith(v.message, "stage \"long_context\" needs 128 GPUs (16 nodes × 8); the run holds 64 ")
}

# Without the booking's usage a grow is denied (fail closed).
test_stage_grow_without_usage_is_denied if {
	inp := json.patch(_advance(16, 64, 64), [{"op": "remove", "path": "/ledger/booking"}])
	[v] := _stage_denies(inp)
	v.message == concat("", [
		"stage \"long_context\" needs 128 GPUs (16 nodes × 8); the run holds 64 and the booking has no known free ",
		"(the booking's usage is unknown)",
	])
	endswith(v.fix, "to at most 8")
}

# The other booking rules are train.create's: a full booking does not deny
# an advance that needs no more GPUs.
test_stage_advance_is_not_held_to_create_capacity if {
	inp := _advance(8, 64, 128)
	{v.code | some v in booking.deny with input as inp} == set()
}
