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

# Go sets input.ledger.booking for every train.create (admission.Input; a
# Go test holds every builder to schemas/input.json, which requires it).
_booking := input.ledger.booking

_world_size := input.manifest.hardware.nodes * input.manifest.hardware.gpus_per_node if {
	lib.is_count(input.manifest.hardware.nodes)
	lib.is_count(input.manifest.hardware.gpus_per_node)
}

_booked := input.entitlement.gpu.nodes * input.entitlement.gpu.gpus_per_node if {
	lib.is_count(input.entitlement.gpu.nodes)
	lib.is_count(input.entitlement.gpu.gpus_per_node)
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
	lib.is_train_create
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
# title: Stage needs more GPUs than the run holds
# description: >-
#   A train.stage.advance enters a stage whose world size (its effective
#   manifest's hardware.nodes × hardware.gpus_per_node, lib.train_manifest)
#   is larger than the run's: the world size of the manifest the run was
#   admitted with (its digest is the run's, RUN_MANIFEST_MISMATCH
#   otherwise), which is what the run holds on the booking. A stage keeps
#   within the GPUs its run holds: a stage advance never takes more of
#   the booking, so it cannot race a train.create for them. A stage may
#   use fewer; the run still holds its own until it ends.
# custom:
#   code: STAGE_WORLD_SIZE_EXCEEDS_RUN
#   gate: booking
#   fix: >-
#     Computed per deny - set the stage's hardware.nodes (stage_settings) to at
#     most the run's, or create a new run with the larger world size.
deny contains v if {
	input.request.action == "train.stage.advance"
	stage := lib.train_manifest
	lib.is_count(stage.hardware.nodes)
	lib.is_count(stage.hardware.gpus_per_node)
	stage_size := stage.hardware.nodes * stage.hardware.gpus_per_node
	stage_size > _world_size
	v := lib.violation_fix(
		rego.metadata.rule(), sprintf(
			"stage %s needs %d GPUs (%d nodes × %d); the run holds %d",
			[lib.show(input.request.stage), stage_size, stage.hardware.nodes, stage.hardware.gpus_per_node, _world_size],
		),
		sprintf(
			"set the stage's hardware.nodes (stage_settings) to at most %d, the run's, %s",
			[input.manifest.hardware.nodes, "or create a new run with the larger world size"],
		),
	)
}

# METADATA
# title: Booking released
# description: No run is admitted on a booking a booking.release admission released.
# custom:
#   code: BOOKING_RELEASED
#   gate: booking
#   fix: Book again; a released booking does not come back.
deny contains v if {
	lib.is_train_create
	_booking.released == true
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
