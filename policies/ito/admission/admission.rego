# METADATA
# title: Admission
# description: >-
#   Aggregates the gates into the one decision Go evaluates
#   (data.ito.admission.decision). train.create runs every gate;
#   train.cancel, train.cleanup and booking.release run entitlement (its
#   manifest-independent checks), confirmation and idempotency;
#   train.stage.advance and train.restart run those and the lifecycle gate;
#   the advance also the manifest gate, for the manifest it carries again,
#   and the parallelism (with memory), budget, checkpoint and booking gates
#   on the effective manifest of the stage it enters (lib.train_manifest);
#   an unknown action is denied. Violations and warnings are sorted by code, then
#   message; allow is true iff there are no violations.
package ito.admission

import data.ito.booking
import data.ito.budget
import data.ito.checkpoint
import data.ito.confirmation
import data.ito.datachecks
import data.ito.datasets
import data.ito.entitlement
import data.ito.idempotency
import data.ito.lib
import data.ito.lifecycle
import data.ito.manifest
import data.ito.parallelism
import data.ito.rlvr

# METADATA
# title: Admission decision
# description: >-
#   {"allow": bool, "violations": [...], "warnings": [...], "estimates": {...}[,
#   "halt": {"failed_evals": [...]}]}; violations and warnings are {code, gate,
#   message[, fix]} sorted by code, then message; halt (a deny only) is the
#   lifecycle gate's: the run's eval gate failed and Go halts the run. Shape
#   documented in docs/policy-input.md.
# entrypoint: true
decision := object.union(
	{
		"allow": count(violations) == 0,
		"violations": violations,
		"warnings": warnings,
		"estimates": estimates,
	},
	_halt,
)

_halt := {"halt": lifecycle.halt} if {
	_is_known_action
	lifecycle.halt
}

else := {}

# METADATA
# title: Violations, sorted
# description: Every gate's deny findings for this action, sorted by code then message.
violations := _sorted(_violations)

# METADATA
# title: Warnings, sorted
# description: Every gate's warn findings for this action, sorted by code then message.
warnings := _sorted(_warnings)

# METADATA
# title: Estimates
# description: >-
#   The budget, parallelism, booking and checkpoint gates' estimates for
#   train.create; the lifecycle gate's restart budget for a train.restart of
#   a run with a checkpoint plan; for a stage advance, the checkpoint
#   gate's estimates of the stage it enters (its expected goodput and
#   where the failure rate came from); for a create or a stage advance
#   into a stage with a report deadline, stage_report_deadline_seconds
#   (the lifecycle gate's stage_estimates); empty otherwise.
estimates := object.union_n([
	parallelism.estimates, budget.estimates, booking.estimates, checkpoint.estimates, lifecycle.stage_estimates,
]) if {
	input.request.action == "train.create"
}

estimates := object.union(checkpoint.estimates, lifecycle.stage_estimates) if {
	input.request.action == "train.stage.advance"
}

estimates := lifecycle.estimates if {
	input.request.action == "train.restart"
	lifecycle.estimates
}

estimates := {} if {
	not input.request.action == "train.create"
	not input.request.action == "train.stage.advance"
	not _restart_estimates
}

_is_advance if input.request.action == "train.stage.advance"

_restart_estimates if {
	input.request.action == "train.restart"
	lifecycle.estimates
}

_sorted(findings) := [f | some t in sort([[f.code, f.message, f] | some f in findings]); f := t[2]]

# a key of the action table (input.request.action in lib.actions, without building that set)
_is_known_action if {
	_ = data.ito.config.actions[input.request.action]
}

# (lib.is_train_create and lib.runs_training_gates are written out below: a
# comparison on input costs less than a reference to another rule)
_violations contains v if {
	_is_known_action
	some v in entitlement.deny
}

_violations contains v if {
	_is_known_action
	some v in confirmation.deny
}

_violations contains v if {
	_is_known_action
	some v in idempotency.deny
}

# One rule per gate: a union of several gates' sets is undefined as a whole
# when any one of them is missing, which would silently drop every gate in it.
# Go also refuses to activate a bundle that lacks a gate (policy.New).
_violations contains v if {
	input.request.action in {"train.create", "train.stage.advance"}
	some v in budget.deny
}

_violations contains v if {
	input.request.action in {"train.create", "train.stage.advance"}
	some v in booking.deny
}

_violations contains v if {
	input.request.action == "train.create"
	some v in datasets.deny
}

_violations contains v if {
	input.request.action in {"train.create", "train.stage.advance"}
	some v in parallelism.deny
}

_violations contains v if {
	_has_manifest
	some v in manifest.deny
}

_violations contains v if {
	input.request.action in {"train.create", "train.stage.advance"}
	some v in checkpoint.deny
}

_violations contains v if {
	input.request.action == "train.create"
	some v in datachecks.deny
}

_violations contains v if {
	input.request.action == "train.create"
	some v in rlvr.deny
}

_violations contains v if {
	_is_known_action
	some v in lifecycle.deny
}

# the actions that carry a manifest: create, and a stage advance (the run's manifest again)
_has_manifest if lib.is_train_create

_has_manifest if _is_advance

_violations contains v if some v in deny

_warnings contains v if {
	input.request.action in {"train.create", "train.stage.advance"}
	some v in budget.warn
}

_warnings contains v if {
	input.request.action == "train.create"
	some v in datasets.warn
}

_warnings contains v if {
	input.request.action in {"train.create", "train.stage.advance"}
	some v in parallelism.warn
}

_warnings contains v if {
	input.request.action in {"train.create", "train.stage.advance"}
	some v in checkpoint.warn
}

# METADATA
# title: Unknown action
# description: >-
#   request.action is not train.create, train.cancel, train.cleanup,
#   booking.release, train.stage.advance or train.restart.
# custom:
#   code: ACTION_UNKNOWN
#   gate: admission
#   fix: >-
#     Send one of the actions train.create, train.stage.advance, train.restart,
#     train.cancel, train.cleanup, booking.release.
deny contains v if {
	not _is_known_action
	v := lib.violation(rego.metadata.rule(), sprintf("action %s is not one this gatekeeper admits", [
		lib.show(lib.value_at(input, ["request", "action"], null)),
	]))
}

# METADATA
# title: Caller not verified
# description: Go did not establish the caller's bearer token (defense in depth).
# custom:
#   code: CALLER_UNVERIFIED
#   gate: admission
#   fix: Authenticate with a bearer token from a configured identity provider.
deny contains v if {
	not input.verification.caller.verified == true
	v := lib.violation(rego.metadata.rule(), "the caller's identity was not verified")
}

# METADATA
# title: Caller has no account
# description: The verified caller must carry a non-empty account; account scoping of every token depends on it.
# custom:
#   code: CALLER_ACCOUNT_MISSING
#   gate: admission
#   fix: Use a caller identity that is bound to an account.
deny contains v if {
	not _has_account
	v := lib.violation(rego.metadata.rule(), "the caller has no account")
}

_has_account if {
	is_string(input.caller.account)
	input.caller.account != ""
}
