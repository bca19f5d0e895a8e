# METADATA
# title: Confirmation gate
# description: >-
#   A human-confirmed, single-use confirmation token (verified in Go) must be
#   verified, unconsumed, short-lived, unexpired, and scoped to exactly this
#   action, account, booking and manifest (train.create) or run (cancel,
#   cleanup, release); for train.create it must cover the estimated cost.
#   A cleanup never releases the booking: that needs a booking.release
#   confirmation of its own.
package ito.confirmation

import data.ito.budget
import data.ito.lib

_cfg := data.ito.config.confirmation

_now := lib.value_at(input, ["now"], null)

_action := lib.value_at(input, ["request", "action"], null)

# METADATA
# title: Confirmation not verified
# description: Go did not establish the confirmation token's signature (defense in depth).
# custom:
#   code: CONFIRMATION_UNVERIFIED
#   gate: confirmation
#   fix: Have the confirmation authority deposit a signed confirmation and pass its reference.
deny contains v if {
	not input.verification.confirmation.verified == true
	v := lib.violation(rego.metadata.rule(), "the confirmation token's signature was not verified")
}

# METADATA
# title: Confirmation already used
# description: A confirmation is single-use; the ledger says this one was consumed by an earlier allow.
# custom:
#   code: CONFIRMATION_REPLAYED
#   gate: confirmation
#   fix: Obtain a new confirmation; each one authorizes exactly one action.
deny contains v if {
	not input.ledger.confirmation_consumed == false
	v := lib.violation(rego.metadata.rule(), "the confirmation was already consumed by an earlier admission")
}

# METADATA
# title: Confirmation for another action
# description: The confirmation's act must equal the request's action.
# custom:
#   code: CONFIRMATION_ACTION_MISMATCH
#   gate: confirmation
#   fix: Obtain a confirmation for the action you are requesting.
deny contains v if {
	not _is_same_action
	v := lib.violation(rego.metadata.rule(), sprintf("the confirmation authorizes %v, not %v", [
		lib.show(lib.value_at(input, ["confirmation", "act"], null)),
		lib.show(_action),
	]))
}

_is_same_action if {
	is_string(input.confirmation.act)
	input.confirmation.act == input.request.action
}

# METADATA
# title: Confirmation for another account
# description: The confirmation's subject must be the authenticated caller's account.
# custom:
#   code: CONFIRMATION_ACCOUNT_MISMATCH
#   gate: confirmation
#   fix: Use a confirmation issued to the caller's account.
deny contains v if {
	not _is_same_account
	v := lib.violation(rego.metadata.rule(), "the confirmation was issued to a different account than the caller")
}

_is_same_account if {
	is_string(input.confirmation.sub)
	input.confirmation.sub != ""
	input.confirmation.sub == input.caller.account
}

# METADATA
# title: Confirmation for another booking
# description: The confirmation's booking_id must equal the request's booking_id.
# custom:
#   code: CONFIRMATION_BOOKING_MISMATCH
#   gate: confirmation
#   fix: Use the confirmation issued for the booking named in the request.
deny contains v if {
	not _is_same_booking
	v := lib.violation(rego.metadata.rule(), "the confirmation is for a different booking than the request")
}

_is_same_booking if {
	is_string(input.confirmation.booking_id)
	input.confirmation.booking_id != ""
	input.confirmation.booking_id == input.request.booking_id
}

# METADATA
# title: Confirmation for another manifest
# description: >-
#   For train.create, the confirmation's manifest_digest must equal the
#   digest of the submitted manifest bytes.
# custom:
#   code: CONFIRMATION_MANIFEST_MISMATCH
#   gate: confirmation
#   fix: Get the exact manifest you submit confirmed; any byte change needs a new confirmation.
deny contains v if {
	input.request.action == "train.create"
	not _is_same_manifest
	v := lib.violation(rego.metadata.rule(), "the confirmation was issued for a different manifest (digest differs)")
}

# lib.is_digest inline
_is_same_manifest if {
	regex.match(`^sha256:[0-9a-f]{64}$`, input.manifest_digest)
	input.confirmation.manifest_digest == input.manifest_digest
}

# METADATA
# title: Confirmation for another run
# description: >-
#   For every action but train.create, the confirmation's run_id must equal
#   request.run_id; cancel, cleanup, stage advance and restart must name a run.
# custom:
#   code: CONFIRMATION_RUN_MISMATCH
#   gate: confirmation
#   fix: Use the confirmation issued for the run you are cancelling or cleaning up.
deny contains v if {
	not input.request.action == "train.create"
	some message in _run_problems
	v := lib.violation(rego.metadata.rule(), message)
}

# A confirmation without run_id is for no run (booking.release): "".
_run_problems contains "the confirmation is for a different run than the request" if {
	not object.get(input.confirmation, "run_id", "") == input.request.run_id
}

_run_problems contains sprintf("%v must name the run it acts on (request.run_id is empty)", [lib.show(_action)]) if {
	lib.acts_on_run(_action)
	not _has_run_id
}

_has_run_id if {
	is_string(input.request.run_id)
	input.request.run_id != ""
}

# METADATA
# title: Cleanup would release the booking
# description: >-
#   A train.cleanup that asks to release the booking is refused; releasing
#   needs a booking.release confirmation.
# custom:
#   code: CLEANUP_RELEASE_NOT_CONFIRMED
#   gate: confirmation
#   fix: Clean up without releases_booking, then release the booking with its own booking.release confirmation.
deny contains v if {
	input.request.action == "train.cleanup"
	not input.request.releases_booking == false
	v := lib.violation(
		rego.metadata.rule(),
		"a cleanup cannot release the booking; that needs a booking.release confirmation",
	)
}

# METADATA
# title: Confirmation lives too long
# description: The confirmation's lifetime exp - iat must not exceed max_lifetime_seconds (bundle data).
# custom:
#   code: CONFIRMATION_LIFETIME_TOO_LONG
#   gate: confirmation
#   fix: Have the confirmation authority issue confirmations with a shorter lifetime.
deny contains v if {
	not _is_short_lived
	v := lib.violation(rego.metadata.rule(), sprintf("the confirmation's lifetime (exp %v - iat %v) exceeds %v s", [
		lib.show(lib.value_at(input, ["confirmation", "exp"], null)),
		lib.show(lib.value_at(input, ["confirmation", "iat"], null)),
		_cfg.max_lifetime_seconds,
	]))
}

_is_short_lived if {
	is_number(input.confirmation.iat)
	is_number(input.confirmation.exp)
	input.confirmation.exp - input.confirmation.iat <= data.ito.config.confirmation.max_lifetime_seconds
}

# METADATA
# title: Confirmation expired
# description: >-
#   The confirmation's exp, plus the clock leeway, must be after now
#   (exp + leeway_seconds.confirmation > now), as Go verified it.
# custom:
#   code: CONFIRMATION_EXPIRED
#   gate: confirmation
#   fix: Obtain a new confirmation and submit before it expires.
deny contains v if {
	not _is_unexpired
	v := lib.violation(rego.metadata.rule(), sprintf("the confirmation expired (exp %v, now %v)", [
		lib.show(lib.value_at(input, ["confirmation", "exp"], null)),
		lib.show(_now),
	]))
}

# without a clock (input.now not a number) nothing is unexpired: OPA orders
# every number above null, so a bare comparison would pass
_is_unexpired if {
	is_number(input.now)
	is_number(input.confirmation.exp)

	# the clock leeway Go verified the token with (trust.confirmation.leeway); absent, none
	leeway := object.get(input, ["leeway_seconds", "confirmation"], 0)
	is_number(leeway)
	input.confirmation.exp + leeway > input.now
}

# METADATA
# title: Confirmed cost malformed
# description: cost_usd must be a plain decimal USD string (at most 6 decimals).
# custom:
#   code: CONFIRMATION_COST_MALFORMED
#   gate: confirmation
#   fix: The confirmation authority must issue cost_usd as a decimal string such as "1000.00".
deny contains v if {
	not _has_cost
	v := lib.violation(rego.metadata.rule(), "the confirmation's cost_usd is not a plain decimal USD string")
}

# lib.micro_usd's grammar: defined exactly when this matches
_has_cost if {
	is_string(input.confirmation.cost_usd)
	regex.match(`^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,6}))?$`, input.confirmation.cost_usd)
}

# METADATA
# title: Confirmed cost below the estimate
# description: >-
#   For train.create, the confirmed cost_usd must be at least the budget
#   gate's estimated total cost, whose compute includes the GPU-hours
#   expected lost to failures (the ledger re-checks the same at commit).
# custom:
#   code: CONFIRMATION_COST_BELOW_ESTIMATE
#   gate: confirmation
#   fix: >-
#     Get a confirmation for at least the estimated cost (expected lost work
#     included), or shrink the run (hours, GPUs, checkpoints).
deny contains v if {
	input.request.action == "train.create"
	confirmed := lib.micro_usd(input.confirmation.cost_usd)
	confirmed < budget.total_micro_usd
	v := lib.violation(rego.metadata.rule(), sprintf(
		"the confirmation covers %s USD; the run is estimated at %s USD (%s USD of it expected lost work)",
		[input.confirmation.cost_usd, lib.usd(budget.total_micro_usd), lib.usd(budget.lost_work_micro_usd)],
	))
}

# METADATA
# title: Restart confirmation for another checkpoint
# description: >-
#   A train.restart confirmation names the checkpoint step a human agreed to
#   restart from (checkpoint_step); it must equal request.checkpoint_step.
#   The create confirmation never implies a restart: its act differs.
# custom:
#   code: CONFIRMATION_CHECKPOINT_MISMATCH
#   gate: confirmation
#   fix: Get a train.restart confirmation for the checkpoint step you restart from.
deny contains v if {
	input.request.action == "train.restart"
	not _is_same_checkpoint
	v := lib.violation(rego.metadata.rule(), sprintf(
		"the confirmation is for checkpoint step %s, the restart asks for %s",
		[
			lib.show(lib.value_at(input, ["confirmation", "checkpoint_step"], null)),
			lib.show(lib.value_at(input, ["request", "checkpoint_step"], null)),
		],
	))
}

_is_same_checkpoint if {
	is_number(input.confirmation.checkpoint_step)
	input.confirmation.checkpoint_step >= 0
	input.confirmation.checkpoint_step == input.request.checkpoint_step
}
