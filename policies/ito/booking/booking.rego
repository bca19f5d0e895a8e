# METADATA
# title: Booking gate
# description: >-
#   The booking as one economic object. Its GPUs (entitlement gpu.nodes ×
#   gpu.gpus_per_node) are shared by its live runs: a run holds its world
#   size (hardware.nodes × hardware.gpus_per_node) from its train.create
#   admission until a cancel, cleanup or booking release admission, or its
#   declared wall-clock end plus the run grace (data.ito.config.booking).
#   Go reads the booking's current usage from the ledger into
#   input.ledger.booking; the ledger decides the same rule again inside the
#   commit transaction, so two racing admissions can never both take the
#   last GPUs.
package ito.booking

import data.ito.lib

# Go sets input.ledger.booking for every train.create and
# train.stage.advance (admission.Input; a Go test holds every builder to
# schemas/input.json, which requires it).
_booking := input.ledger.booking

# (both counts: lib.is_count written out)
_world_size := nodes * gpus_per_node if {
	nodes := input.manifest.hardware.nodes
	is_number(nodes)
	nodes >= 1
	nodes == floor(nodes)
	gpus_per_node := input.manifest.hardware.gpus_per_node
	is_number(gpus_per_node)
	gpus_per_node >= 1
	gpus_per_node == floor(gpus_per_node)
}

# (both counts: lib.is_count written out)
_booked := nodes * gpus_per_node if {
	nodes := input.entitlement.gpu.nodes
	is_number(nodes)
	nodes >= 1
	nodes == floor(nodes)
	gpus_per_node := input.entitlement.gpu.gpus_per_node
	is_number(gpus_per_node)
	gpus_per_node >= 1
	gpus_per_node == floor(gpus_per_node)
}

# METADATA
# title: GPUs held on the booking
# description: GPUs the booking's live runs hold at input.now (input.ledger.booking.held_gpus).
held_gpus := h if {
	h := _booking.held_gpus
	is_number(h)
}

# METADATA
# title: Booking capacity exceeded
# description: >-
#   For train.create, the GPUs held by the booking's live runs plus this
#   run's world size must not exceed the booking's GPUs. The message names
#   the account's own live runs holding them (at most 16, then how many
#   more).
# custom:
#   code: BOOKING_CAPACITY_EXCEEDED
#   gate: booking
#   fix: Cancel or clean up one of the named runs, or wait until one ends, then ask again.
deny contains v if {
	input.request.action == "train.create"
	_world_size <= _booked # a run larger than the booking is ENTITLEMENT_TOPOLOGY_MISMATCH
	held_gpus + _world_size > _booked
	v := lib.violation(rego.metadata.rule(), sprintf(
		"the booking's %d GPUs cannot hold %d more: %d are held by live runs%s",
		[_booked, _world_size, held_gpus, _runs_text],
	))
}

# At most 16 of the account's live runs are named (Go sends no more: the
# largest, then the soonest to end); live_run_count counts them all.
_named := array.slice(_booking.live_runs, 0, 16)

_live_run_count := n if {
	n := _booking.live_run_count
	is_number(n)
}

_runs_text := concat("", [
	": ",
	concat(", ", [sprintf("%s (%d GPUs)", [r.run_id, r.gpus]) | some r in _named]),
	_more_text,
]) if {
	count(_named) > 0
}

_runs_text := " (none of them this account's)" if count(_named) == 0

_more_text := sprintf(" and %d more of this account's", [_live_run_count - count(_named)]) if {
	_live_run_count > count(_named)
} else := ""

# METADATA
# title: Stage needs more GPUs than the run holds and the booking has free
# description: >-
#   A train.stage.advance enters a stage whose world size (its effective
#   manifest's hardware.nodes × hardware.gpus_per_node, lib.train_manifest)
#   is larger than the GPUs the run holds (input.ledger.run.gpus: its
#   train.create's world size, or what an earlier stage grew it to; the
#   world size of the manifest the run was admitted with when the fact is
#   absent). The run grows to the stage's world size only when the booking
#   has the difference free: its GPUs (entitlement gpu.nodes ×
#   gpu.gpus_per_node) less the GPUs its live runs hold
#   (input.ledger.booking.held_gpus, the run's own included), the facts
#   train.create's capacity rule reads. Without those facts the advance is
#   denied. The ledger checks the difference again inside the commit,
#   serialized with every train.create on the booking, and grows the run's
#   record there; a run never shrinks: a stage may use fewer GPUs, and the
#   run still holds its own until it ends.
# custom:
#   code: STAGE_WORLD_SIZE_EXCEEDS_RUN
#   gate: booking
#   fix: >-
#     Computed per deny - free the missing GPUs of the booking (cancel or
#     clean up another of its runs, or wait until one ends) and ask again, or
#     set the stage's hardware.nodes (stage_settings) to at most what the run
#     and the free GPUs hold.
deny contains v if {
	input.request.action == "train.stage.advance"
	stage := lib.train_manifest
	lib.is_count(stage.hardware.nodes)
	lib.is_count(stage.hardware.gpus_per_node)
	stage_size := stage.hardware.nodes * stage.hardware.gpus_per_node
	stage_size > _run_gpus
	not _grow_fits(stage_size - _run_gpus)
	v := lib.violation_fix(
		rego.metadata.rule(), sprintf(
			"stage %s needs %d GPUs (%d nodes × %d); the run holds %d and the booking has %s free%s",
			[
				lib.show(input.request.stage), stage_size, stage.hardware.nodes, stage.hardware.gpus_per_node,
				_run_gpus, _free_text, _usage_text,
			],
		),
		sprintf(
			"free %d more GPUs of the booking (cancel or clean up another of its runs, or wait until one ends), %s %d",
			[
				(stage_size - _run_gpus) - _free_or_zero,
				"or set the stage's hardware.nodes (stage_settings) to at most",
				floor((_run_gpus + _free_or_zero) / stage.hardware.gpus_per_node),
			],
		),
	)
}

# The GPUs the run holds: the ledger's (a stage advance may have grown
# it), else the world size of the manifest it was admitted with (the
# least it can hold: a run never shrinks).
_run_gpus := g if {
	g := input.ledger.run.gpus
	lib.is_count(g)
} else := _world_size

# The booking's GPUs no live run holds; undefined without the facts.
_free_gpus := _booked - held_gpus

_grow_fits(more) if more <= _free_gpus

_free_or_zero := max([_free_gpus, 0]) if is_number(_free_gpus)

else := 0

_free_text := sprintf("%d", [_free_gpus]) if is_number(_free_gpus)

else := "no known"

_usage_text := sprintf(" (%d booked, %d held by live runs)", [_booked, held_gpus]) if {
	is_number(_free_gpus)
} else := " (the booking's usage is unknown)"

# METADATA
# title: Booking released
# description: No run is admitted on a booking a booking.release admission released.
# custom:
#   code: BOOKING_RELEASED
#   gate: booking
#   fix: Book again; a released booking does not come back.
deny contains v if {
	input.ledger.booking.released == true
	input.request.action == "train.create"
	v := lib.violation(rego.metadata.rule(), "the booking was released; no run is admitted on it")
}

# METADATA
# title: Booking estimates
# description: >-
#   held_gpus and booked_gpus for the decision's estimates, and
#   run_grace_seconds, which Go adds to the run's declared end to know how
#   long it holds its GPUs at most.
estimates := {k: v | some k, v in _estimates}

# One rule per key: a missing fact leaves out its key, never the whole object.
_estimates["booked_gpus"] := _booked

_estimates["held_gpus"] := held_gpus

_estimates["run_grace_seconds"] := data.ito.config.booking.run_grace_seconds
