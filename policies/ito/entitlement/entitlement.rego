# METADATA
# title: Entitlement gate
# description: >-
#   The booking entitlement (a token from the canonical backend, verified in Go)
#   must be verified, completed, training-eligible, fresh, unexpired, inside its
#   term, and for the caller's account and booking. For train.create the
#   booked topology, region and fabric must match the manifest's hardware.
#   An optional telemetry claim (measured interruption rate, checkpoint write
#   bandwidth) must be well-formed, within bounds and fresh wherever the
#   training gates run.
#   Every check is written so that a missing or ill-typed claim denies.
package ito.entitlement

import data.ito.checkpoint
import data.ito.lib

_cfg := data.ito.config.entitlement

_now := lib.value_at(input, ["now"], null)

# METADATA
# title: Entitlement not verified
# description: Go did not establish the entitlement token's signature (defense in depth).
# custom:
#   code: ENTITLEMENT_UNVERIFIED
#   gate: entitlement
#   fix: Present an entitlement token signed by the canonical backend's entitlement key.
deny contains v if {
	not input.verification.entitlement.verified == true
	v := lib.violation(rego.metadata.rule(), "the entitlement token's signature was not verified")
}

# METADATA
# title: Booking not completed
# description: >-
#   The booking must be in state "completed" (not expired, revoked, released or
#   incomplete). train.cancel and train.cleanup may also act on an expired,
#   released or revoked booking: a run must always be stoppable and cleanable.
# custom:
#   code: ENTITLEMENT_BOOKING_NOT_COMPLETED
#   gate: entitlement
#   fix: Complete the booking first; an expired, revoked, released or incomplete booking cannot host runs.
deny contains v if {
	not input.entitlement.booking_state == "completed"
	not _is_teardown_state_ok
	state := lib.value_at(input, ["entitlement", "booking_state"], null)
	v := lib.violation(rego.metadata.rule(), sprintf("booking %v is in state %v, not \"completed\"", [
		lib.show(lib.value_at(input, ["entitlement", "booking_id"], null)),
		lib.show(state),
	]))
}

# METADATA
# title: Booking not training-eligible
# description: The entitlement's training_eligible claim must be true.
# custom:
#   code: ENTITLEMENT_NOT_TRAINING_ELIGIBLE
#   gate: entitlement
#   fix: Book capacity that is eligible for training, or ask the desk to enable training on this booking.
deny contains v if {
	not input.entitlement.training_eligible == true
	not lib.is_teardown
	v := lib.violation(rego.metadata.rule(), "the booking is not eligible for training (training_eligible is not true)")
}

# METADATA
# title: Entitlement stale
# description: >-
#   The entitlement must be fresh, now - iat <= max_age_seconds (bundle data),
#   and not issued further in the future than the clock leeway
#   (iat - now <= leeway_seconds.entitlement).
# custom:
#   code: ENTITLEMENT_STALE
#   gate: entitlement
#   fix: Fetch a fresh entitlement token from the canonical backend and retry.
deny contains v if {
	not _is_fresh
	v := lib.violation(rego.metadata.rule(), sprintf(
		"the entitlement was issued at %v, which is not within %v seconds before now (%v)",
		[lib.show(lib.value_at(input, ["entitlement", "iat"], null)), _cfg.max_age_seconds, lib.show(_now)],
	))
}

_is_fresh if {
	is_number(input.now)
	is_number(input.entitlement.iat)

	# the clock leeway Go verified the token with (trust.entitlement.leeway); absent, none
	leeway := object.get(input, ["leeway_seconds", "entitlement"], 0)
	is_number(leeway)
	input.now - input.entitlement.iat <= data.ito.config.entitlement.max_age_seconds
	input.entitlement.iat - input.now <= leeway
}

# METADATA
# title: Entitlement expired
# description: >-
#   The entitlement's exp, plus the clock leeway, must be after now
#   (exp + leeway_seconds.entitlement > now), as Go verified it.
# custom:
#   code: ENTITLEMENT_EXPIRED
#   gate: entitlement
#   fix: Fetch a fresh entitlement token from the canonical backend and retry.
deny contains v if {
	not _is_unexpired
	v := lib.violation(rego.metadata.rule(), sprintf("the entitlement expired (exp %v, now %v)", [
		lib.show(lib.value_at(input, ["entitlement", "exp"], null)),
		lib.show(_now),
	]))
}

_is_unexpired if {
	is_number(input.entitlement.exp)

	# the clock leeway Go verified the token with (trust.entitlement.leeway); absent, none
	leeway := object.get(input, ["leeway_seconds", "entitlement"], 0)
	is_number(leeway)
	input.entitlement.exp + leeway > input.now
}

# METADATA
# title: Entitlement for another booking
# description: The entitlement's booking_id must equal the request's booking_id.
# custom:
#   code: ENTITLEMENT_BOOKING_MISMATCH
#   gate: entitlement
#   fix: Use the entitlement issued for the booking named in the request.
deny contains v if {
	not _is_same_booking
	v := lib.violation(rego.metadata.rule(), "the entitlement is for a different booking than the request")
}

_is_same_booking if {
	is_string(input.entitlement.booking_id)
	input.entitlement.booking_id != ""
	input.entitlement.booking_id == input.request.booking_id
}

# METADATA
# title: Entitlement for another account
# description: The entitlement's subject must be the authenticated caller's account.
# custom:
#   code: ENTITLEMENT_ACCOUNT_MISMATCH
#   gate: entitlement
#   fix: Call with an identity of the account that holds the booking.
deny contains v if {
	not _is_same_account
	v := lib.violation(rego.metadata.rule(), "the entitlement belongs to a different account than the caller")
}

_is_same_account if {
	is_string(input.entitlement.sub)
	input.entitlement.sub != ""
	input.entitlement.sub == input.caller.account
}

# METADATA
# title: Outside the booking term
# description: >-
#   Now must lie within the booking term, term.start <= now < term.end;
#   train.cancel and train.cleanup only need term.start <= now.
# custom:
#   code: ENTITLEMENT_OUTSIDE_TERM
#   gate: entitlement
#   fix: Submit the run while the booking term is running.
deny contains v if {
	not _is_within_term
	v := lib.violation(rego.metadata.rule(), sprintf("now (%v) is outside the booking term [%v, %v)", [
		lib.show(_now),
		lib.show(lib.value_at(input, ["entitlement", "term", "start"], null)),
		lib.show(lib.value_at(input, ["entitlement", "term", "end"], null)),
	]))
}

_is_within_term if {
	is_number(input.entitlement.term.start)
	is_number(input.entitlement.term.end)
	input.entitlement.term.start <= input.now
	input.now < input.entitlement.term.end
}

# Teardown may come after the term ended, never before it started.
_is_within_term if {
	lib.is_teardown
	is_number(input.entitlement.term.start)
	is_number(input.entitlement.term.end)
	input.entitlement.term.start <= input.now
}

# Teardown may act on a booking that ended.
_is_teardown_state_ok if {
	input.entitlement.booking_state in {"expired", "released", "revoked"}
	lib.is_teardown
}

# METADATA
# title: Booking price malformed
# description: price_per_gpu_hour_usd must be a plain decimal USD string (at most 6 decimals).
# custom:
#   code: ENTITLEMENT_PRICE_MALFORMED
#   gate: entitlement
#   fix: The canonical backend must issue price_per_gpu_hour_usd as a decimal string such as "2.49".
deny contains v if {
	not _has_price
	v := lib.violation(rego.metadata.rule(), "price_per_gpu_hour_usd is not a plain decimal USD string")
}

# lib.micro_usd's grammar: defined exactly when this matches
_has_price if {
	is_string(input.entitlement.price_per_gpu_hour_usd)
	regex.match(`^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,6}))?$`, input.entitlement.price_per_gpu_hour_usd)
}

# METADATA
# title: Booked topology does not carry the manifest
# description: >-
#   For train.create, the booked gpu type and gpus per node must equal the
#   manifest's hardware, and the run's nodes must not exceed the booked nodes
#   (a booking's GPUs are shared by its runs; the booking gate counts them).
# custom:
#   code: ENTITLEMENT_TOPOLOGY_MISMATCH
#   gate: entitlement
#   fix: Set hardware.gpu_type, nodes and gpus_per_node to what the booking provides.
deny contains v if {
	input.request.action == "train.create"
	not _topology_matches
	some field in ["type", "nodes", "gpus_per_node"]
	not _topology_field_matches(field)
	v := lib.violation(rego.metadata.rule(), sprintf("manifest hardware %v is %v but the booking has %v", [
		_manifest_field[field],
		lib.show(lib.value_at(input, ["manifest", "hardware", _manifest_field[field]], null)),
		lib.show(lib.value_at(input, ["entitlement", "gpu", field], null)),
	]))
}

_manifest_field := {"type": "gpu_type", "nodes": "nodes", "gpus_per_node": "gpus_per_node"}

# every field matches (_topology_field_matches of each, in one body)
_topology_matches if {
	input.entitlement.gpu.type == input.manifest.hardware.gpu_type
	input.entitlement.gpu.gpus_per_node == input.manifest.hardware.gpus_per_node
	booked := input.entitlement.gpu.nodes
	nodes := input.manifest.hardware.nodes
	is_number(booked)
	booked >= 1
	booked == floor(booked)
	is_number(nodes)
	nodes >= 1
	nodes == floor(nodes)
	nodes <= booked
}

_topology_field_matches(field) if {
	field != "nodes"
	input.entitlement.gpu[field] == input.manifest.hardware[_manifest_field[field]]
}

# both counts (lib.is_count), the run's within the booking's
_topology_field_matches("nodes") if {
	booked := input.entitlement.gpu.nodes
	nodes := input.manifest.hardware.nodes
	is_number(booked)
	booked >= 1
	booked == floor(booked)
	is_number(nodes)
	nodes >= 1
	nodes == floor(nodes)
	nodes <= booked
}

# METADATA
# title: Booked region differs from the manifest
# description: For train.create, the booking's region must equal hardware.region.
# custom:
#   code: ENTITLEMENT_REGION_MISMATCH
#   gate: entitlement
#   fix: Set hardware.region to the booking's region, or book capacity in the region you need.
deny contains v if {
	input.request.action == "train.create"
	not _is_same_region
	v := lib.violation(rego.metadata.rule(), sprintf("manifest region %v differs from the booking's region %v", [
		lib.show(lib.value_at(input, ["manifest", "hardware", "region"], null)),
		lib.show(lib.value_at(input, ["entitlement", "region"], null)),
	]))
}

_is_same_region if {
	is_string(input.entitlement.region)
	input.entitlement.region == input.manifest.hardware.region
}

# METADATA
# title: Booked fabric differs from the manifest
# description: For train.create, the booking's fabric type must equal hardware.fabric.
# custom:
#   code: ENTITLEMENT_FABRIC_MISMATCH
#   gate: entitlement
#   fix: Set hardware.fabric to the booking's fabric type.
deny contains v if {
	input.request.action == "train.create"
	not _is_same_fabric
	v := lib.violation(rego.metadata.rule(), sprintf("manifest fabric %v differs from the booking's fabric %v", [
		lib.show(lib.value_at(input, ["manifest", "hardware", "fabric"], null)),
		lib.show(lib.value_at(input, ["entitlement", "fabric", "type"], null)),
	]))
}

_is_same_fabric if {
	is_string(input.entitlement.fabric.type)
	input.entitlement.fabric.type == input.manifest.hardware.fabric
}

# METADATA
# title: Booking telemetry malformed
# description: >-
#   For train.create and train.stage.advance: the entitlement's telemetry
#   claim must be an object of measured_at (unix seconds, at or before the
#   token's iat), window_seconds (at least telemetry.min_window_seconds),
#   and interruptions_per_gpu_hour and/or
#   checkpoint_write_gbytes_per_s_per_node ({tier of the storage table:
#   GB/s}), each number within the bounds of
#   data.ito.config.checkpoint.telemetry. Malformed telemetry is never
#   replaced by the bundle's data: the backend's measurement is wrong.
# custom:
#   code: ENTITLEMENT_TELEMETRY_MALFORMED
#   gate: entitlement
#   fix: >-
#     The canonical backend must issue telemetry as docs/architecture.md
#     (Claims) describes, with values within the bundle's bounds, or leave
#     the claim out (bundle data is then used).
deny contains v if {
	input.request.action in {"train.create", "train.stage.advance"}
	checkpoint.telemetry_status == "malformed"
	v := lib.violation(rego.metadata.rule(), sprintf(
		concat("", [
			"the entitlement's telemetry claim is malformed or out of bounds (interruptions_per_gpu_hour %v..%v,",
			" checkpoint_write_gbytes_per_s_per_node %v..%v for tiers of the storage table, window_seconds >= %v,",
			" measured_at <= iat)",
		]),
		[
			_telemetry_cfg.interruptions_per_gpu_hour.min, _telemetry_cfg.interruptions_per_gpu_hour.max,
			_telemetry_cfg.write_gbytes_per_s_per_node.min, _telemetry_cfg.write_gbytes_per_s_per_node.max,
			_telemetry_cfg.min_window_seconds,
		],
	))
}

_telemetry_cfg := data.ito.config.checkpoint.telemetry

# METADATA
# title: Booking telemetry stale
# description: >-
#   For train.create and train.stage.advance: the entitlement's telemetry
#   was measured more than telemetry.max_age_seconds (bundle data, a day)
#   before now. Stale telemetry is denied, not replaced by bundle data: a
#   backend without a fresh measurement leaves the claim out.
# custom:
#   code: ENTITLEMENT_TELEMETRY_STALE
#   gate: entitlement
#   fix: The canonical backend must send telemetry measured within the bundle's max age, or leave the claim out.
deny contains v if {
	input.request.action in {"train.create", "train.stage.advance"}
	checkpoint.telemetry_status == "stale"
	v := lib.violation(rego.metadata.rule(), sprintf(
		"the entitlement's telemetry was measured %d s before now, above the %d s limit",
		[input.now - input.entitlement.telemetry.measured_at, _telemetry_cfg.max_age_seconds],
	))
}
