# METADATA
# title: Workload gate
# description: >-
#   The Kubernetes admission webhook's decision (data.ito.workload.decision):
#   a Pod or workload object (the kinds in data.ito.tables.workloads) that
#   requests GPUs in a namespace under itogate's control must carry a valid
#   admission ticket of a live run of the namespace's account, ask for no
#   more GPUs than admitted (no Pod more than one node's), and be the one
#   workload the ticket created (or a child of it). GPUs are counted on every
#   path by the resource model of data.ito.config.workload (count.rego,
#   dra.rego); GPU access without a count is refused (access.rego); the
#   verbs and subresources that change what runs are checked (change.rego).
#   Facts only: Go verified the ticket and read the run and its binding from
#   the ledger (docs/kubernetes.md).
# scope: package
# schemas:
#   - input:
#       type: object
#       additionalProperties: false
#       required: [now, review, namespace, ticket, run, binding, object_ref]
#       properties:
#         now: {type: integer}
#         review:
#           type: object
#           additionalProperties: false
#           required: [operation, dry_run, kind, sub_resource, namespace, name, object, keys]
#           properties:
#             operation: {type: string}
#             dry_run: {type: boolean}
#             kind:
#               type: object
#               additionalProperties: false
#               properties:
#                 group: {type: string}
#                 version: {type: string}
#                 kind: {type: string}
#             sub_resource: {type: string}
#             resource:
#               type: object
#               additionalProperties: false
#               properties:
#                 group: {type: string}
#                 version: {type: string}
#                 resource: {type: string}
#             namespace: {type: string}
#             name: {type: string}
#             user: {type: string}
#             object: {type: object}
#             old_object: {type: object}
#             keys: {type: object, additionalProperties: {type: boolean}}
#             teardown: {type: boolean}
#         namespace:
#           type: object
#           additionalProperties: false
#           required: [name, account]
#           properties:
#             name: {type: string}
#             account: {type: string}
#         ticket:
#           type: object
#           additionalProperties: false
#           required: [present, changed]
#           properties:
#             present: {type: boolean}
#             verified: {type: boolean}
#             expired: {type: boolean}
#             error: {type: string}
#             claims: {type: object}
#             changed: {type: boolean}
#         run:
#           type: object
#           additionalProperties: false
#           required: [found]
#           properties:
#             found: {type: boolean}
#             account: {type: string}
#             booking_id: {type: string}
#             live: {type: boolean}
#             ended_by: {type: string}
#             state: {type: string}
#             gpus: {type: integer}
#         binding:
#           type: object
#           additionalProperties: false
#           required: [bound, identity, uids]
#           properties:
#             bound: {type: boolean}
#             identity: {type: string}
#             uids: {type: array, items: {type: string}}
#         object_ref:
#           type: object
#           additionalProperties: false
#           properties:
#             identity: {type: string}
#             uid: {type: string}
#             owner_uid: {type: string}
package ito.workload

import data.ito.lib

_table := data.ito.tables.workloads

_obj := input.review.object

# The kind's table entry ({} for kinds not in the table), by group/Kind.
_kind := object.get(_table.kinds, concat("/", [input.review.kind.group, input.review.kind.kind]), {})

_claims := object.get(input.ticket, "claims", {})

# METADATA
# title: Workload decision
# description: >-
#   {"allow": bool, "violations": [...], "warnings": [], "bind": "root"|"child"|"leaf"|"none",
#   "gpus": n}. bind tells Go what to record in the ledger after an allow that
#   is not a dry run: "root" binds the run to this object's identity (a
#   workload object or a bare Pod), "child" adds this object's uid under its
#   bound owner, "leaf" checks a controller's Pod against its owner's active
#   root without recording it, "none" records nothing (DRA claims and
#   templates, subresources, objects without GPUs).
# entrypoint: true
decision := {
	"allow": count(violations) == 0,
	"violations": violations,
	"warnings": [],
	"bind": bind,
	"gpus": gpus,
}

# METADATA
# title: Violations, sorted
# description: >-
#   Every deny finding, sorted by code then message; none for a teardown
#   UPDATE (change.rego), which changes nothing that runs.
violations := [] if {
	_teardown
} else := [f | some t in sort([[f.code, f.message, f] | some f in deny]); f := t[2]]

# METADATA
# title: Requests GPUs
# description: >-
#   True when the object asks for at least one GPU, counted or charged
#   (count.rego); only then do the ticket checks apply.
requests_gpus if {
	gpus > 0
} else if {
	some s in pod_sets
	s.claims
	s.replicas > 0
}

# The ticket checks apply to the main resource of a Pod or workload kind:
# not to a DRA claim or template (its devices are charged at the Pods that
# use it) and not to a subresource (change.rego decides those).
_gated if {
	requests_gpus
	object.get(input.review, "sub_resource", "") == ""
	not _kind.claim_sets
	not _teardown
}

# METADATA
# title: Ledger binding to record
# description: See decision.
bind := "none" if {
	not _gated
} else := "leaf" if {
	_is_child
	_kind.leaf == true
} else := "child" if {
	_is_child
} else := "root"

_is_child if input.object_ref.owner_uid != ""

_ticket_ok if {
	input.ticket.verified == true
	input.ticket.claims.action == "train.create"
}

# What the object asks for, for the messages: a count, or a DRA claim
# template charged as a whole node when no ticket tells a node's size.
_asked := sprintf("%v GPUs", [gpus]) if gpus > 0

_asked := "GPUs through a DRA claim template" if gpus == 0

# METADATA
# title: Namespace bound to no account
# description: The namespace is under itogate's control but no account is bound to it (webhook.namespaces).
# custom:
#   code: WORKLOAD_NAMESPACE_UNBOUND
#   gate: workload
#   fix: Bind the namespace to its account in the webhook configuration (webhook.namespaces).
deny contains v if {
	input.namespace.account == ""
	_gated
	v := lib.violation(
		rego.metadata.rule(),
		sprintf("namespace %v is bound to no account", [lib.show(input.review.namespace)]),
	)
}

# METADATA
# title: No admission ticket
# description: A GPU workload without the ticket annotation; every run must be admitted first.
# custom:
#   code: WORKLOAD_TICKET_MISSING
#   gate: workload
#   fix: Admit the run (POST /v1/admissions) and put data.ticket into the itogate.io/ticket annotation.
deny contains v if {
	input.ticket.present == false
	_gated
	v := lib.violation(rego.metadata.rule(), sprintf("%v requested without an admission ticket (annotation %v)", [
		_asked, _table.ticket_annotation,
	]))
}

# METADATA
# title: Admission ticket invalid
# description: >-
#   The ticket does not verify (signature, key, typ, issuer, audience, claims)
#   or was not issued for train.create.
# custom:
#   code: WORKLOAD_TICKET_INVALID
#   gate: workload
#   fix: Use the ticket exactly as itogate returned it for this run's train.create.
deny contains v if {
	input.ticket.verified == false
	not input.ticket.error == "expired"
	_gated
	v := lib.violation(rego.metadata.rule(), sprintf("the admission ticket is rejected: %v", [
		object.get(input.ticket, "error", "rejected"),
	]))
}

# METADATA
# title: Admission ticket invalid
# description: >-
#   The ticket does not verify (signature, key, typ, issuer, audience, claims)
#   or was not issued for train.create.
# custom:
#   code: WORKLOAD_TICKET_INVALID
#   gate: workload
#   fix: Use the ticket exactly as itogate returned it for this run's train.create.
deny contains v if {
	input.ticket.verified == true
	input.ticket.claims.action != "train.create"
	_gated
	v := lib.violation(rego.metadata.rule(), "the admission ticket is rejected: not issued for train.create")
}

# METADATA
# title: Admission ticket expired
# description: >-
#   The ticket's exp has passed (it lives tickets.lifetime, minutes): a
#   ticket authorizes the first bind of a run's workload only while it is
#   fresh. An object whose controller is part of the bound workload (a
#   Job's re-created Pod) is governed by the run's state instead, so a
#   short ticket never breaks a long run's replacement Pods.
# custom:
#   code: WORKLOAD_TICKET_EXPIRED
#   gate: workload
#   fix: >-
#     Renew the ticket (itogate ticket renew, POST /v1/runs/{run_id}/ticket)
#     and create the workload with the new one.
deny contains v if {
	input.ticket.expired == true
	not _bound_child
	_gated
	v := lib.violation(rego.metadata.rule(), "the admission ticket has expired; renew it")
}

# An object created by a controller that is part of the run's bound
# workload.
_bound_child if {
	input.object_ref.owner_uid != ""
	input.object_ref.owner_uid in input.binding.uids
}

# METADATA
# title: Ticket of another account
# description: The ticket's account (sub) is not the account bound to the namespace.
# custom:
#   code: WORKLOAD_ACCOUNT_MISMATCH
#   gate: workload
#   fix: Create the workload in a namespace of the account that was admitted.
deny contains v if {
	input.ticket.verified == true
	input.namespace.account != ""
	input.ticket.claims.sub != input.namespace.account
	_ticket_ok
	_gated
	v := lib.violation(rego.metadata.rule(), sprintf("the ticket is for another account than namespace %v's", [
		lib.show(input.review.namespace),
	]))
}

# METADATA
# title: Run not admitted
# description: The ledger holds no run with the ticket's run id, account and booking.
# custom:
#   code: WORKLOAD_RUN_NOT_FOUND
#   gate: workload
#   fix: Admit the run with this itogate (or its replicas' shared ledger) first.
deny contains v if {
	input.ticket.verified == true
	not _run_matches
	_ticket_ok
	_gated
	v := lib.violation(
		rego.metadata.rule(),
		sprintf("run %v is not admitted for this account and booking", [lib.show(_claims.run_id)]),
	)
}

_run_matches if {
	input.run.found == true
	input.run.account == input.ticket.claims.sub
	input.run.booking_id == input.ticket.claims.booking_id
}

# METADATA
# title: Run no longer live
# description: >-
#   The run may take no new work (the ledger's RunRecord.MayWork, the
#   predicate the admission and its commit ask too): a failed eval gate
#   halted it, its booking or entitlement was revoked, it was cancelled or
#   cleaned up, its booking was released, or its declared end has passed.
#   No new Pods or workloads for it; run.ended_by says which.
# custom:
#   code: WORKLOAD_RUN_NOT_LIVE
#   gate: workload
#   fix: >-
#     Admit a new run; a halted, revoked, cancelled or finished run creates
#     nothing (it can only be cancelled or cleaned up).
deny contains v if {
	input.run.live == false
	_gated
	_ticket_ok
	_run_matches
	v := lib.violation(rego.metadata.rule(), sprintf("run %v is not live (%v)", [
		lib.show(_claims.run_id), object.get(input.run, "ended_by", "ended"),
	]))
}

# METADATA
# title: Run revoked
# description: >-
#   The run's booking, or the entitlement it was admitted under, was revoked
#   (the ledger's run state, input.run.state): the run takes no new Pod or
#   workload, whatever its ticket; it can only be cancelled or cleaned up.
# custom:
#   code: ENTITLEMENT_REVOKED
#   gate: workload
#   fix: Cancel or clean up the run; a revoked booking or entitlement admits no new work.
deny contains v if {
	input.run.state == "revoked"
	_gated
	_ticket_ok
	_run_matches
	v := lib.violation(rego.metadata.rule(), sprintf("run %v is revoked (%v)", [
		lib.show(_claims.run_id), object.get(input.run, "ended_by", "revoked"),
	]))
}

# METADATA
# title: Run halted
# description: >-
#   A failed eval gate halted the run (the ledger's run state,
#   input.run.state; the lifecycle gate's RUN_HALTED): it takes no new Pod
#   or workload; it can only be cancelled or cleaned up. The message names
#   the failed evals.
# custom:
#   code: WORKLOAD_RUN_HALTED
#   gate: workload
#   fix: Cancel or clean up the run; a failed eval gate has no override.
deny contains v if {
	input.run.state == "halted"
	_gated
	_ticket_ok
	_run_matches
	v := lib.violation(rego.metadata.rule(), sprintf("run %v is halted (%v)", [
		lib.show(_claims.run_id), object.get(input.run, "ended_by", "halted"),
	]))
}

# METADATA
# title: More GPUs than admitted
# description: >-
#   The object asks for more GPUs in total (replicas × per Pod, a Pod naming a
#   DRA claim template charged as a whole node) than the run holds: the
#   ledger's run record (input.run.gpus), which is the ticket's world_size
#   or more once a train.stage.advance grew the run into a larger stage;
#   the ticket's world_size when the ledger has no such run.
# custom:
#   code: WORKLOAD_GPUS_EXCEED_TICKET
#   gate: workload
#   fix: >-
#     Request at most the GPUs the run holds (itogate runs get), advance the run
#     into a larger stage its booking has room for, or admit a run for more GPUs.
deny contains v if {
	input.ticket.verified == true
	gpus > _admitted_gpus
	_ticket_ok
	_gated
	v := lib.violation(rego.metadata.rule(), sprintf("%v GPUs requested%v, %v admitted", [
		gpus, _charge_note, _admitted_gpus,
	]))
}

# METADATA
# title: A Pod larger than a node
# description: One Pod asks for more GPUs than the admitted gpus_per_node.
# custom:
#   code: WORKLOAD_POD_GPUS_EXCEED_NODE
#   gate: workload
#   fix: Ask for at most gpus_per_node GPUs per Pod; spread the rest over more Pods.
deny contains v if {
	input.ticket.verified == true
	some s in pod_sets
	s.per_pod > input.ticket.claims.gpus_per_node
	_ticket_ok
	_gated
	v := lib.violation(
		rego.metadata.rule(),
		sprintf("a Pod asks for %v GPUs, a node has %v", [s.per_pod, _claims.gpus_per_node]),
	)
}

# METADATA
# title: Ticket already used by another workload
# description: >-
#   The run's ticket already created another object (the first CREATE bound
#   it); a ticket creates one workload.
# custom:
#   code: WORKLOAD_TICKET_BOUND
#   gate: workload
#   fix: Admit a new run for another workload; retry the same object under its original name.
deny contains v if {
	input.binding.bound == true
	input.object_ref.owner_uid == ""
	input.binding.identity != input.object_ref.identity
	_ticket_ok
	_gated
	bind == "root"
	v := lib.violation(rego.metadata.rule(), sprintf("the ticket of run %v already created %v", [
		lib.show(_claims.run_id), lib.show(input.binding.identity),
	]))
}

# METADATA
# title: Owner is not the ticket's workload
# description: >-
#   An object created by a controller (a Job's Pod, a JobSet's Job) whose
#   controller is not part of the workload the ticket is bound to.
# custom:
#   code: WORKLOAD_OWNER_UNBOUND
#   gate: workload
#   fix: Create the workload object itself with the ticket; its controllers' objects follow.
deny contains v if {
	input.ticket.verified == true
	input.object_ref.owner_uid != ""
	not input.object_ref.owner_uid in input.binding.uids
	_ticket_ok
	_gated
	v := lib.violation(rego.metadata.rule(), "the object's controller is not the workload this ticket created")
}

# METADATA
# title: Child created by someone other than a listed controller
# description: >-
#   An object with a controller ownerReference (a Job's Pod, a JobSet's Job)
#   is admitted as a child of a bound workload only when the request comes
#   from a controller identity the bundle lists
#   (data.ito.config.workload.controllers.users): a tenant who may create
#   Pods or Jobs can read a bound object's uid and name it as owner, and
#   the owner's binding must not be hers to borrow.
# custom:
#   code: WORKLOAD_CHILD_CREATOR_UNTRUSTED
#   gate: workload
#   fix: >-
#     Create the workload object itself with its own ticket and let its
#     controller create the children; if a controller of this cluster is
#     refused, add its service account to the bundle's controllers.users.
deny contains v if {
	_is_child
	_gated
	not _model.controllers.users[input.review.user]
	v := lib.violation(rego.metadata.rule(), sprintf(
		"%v is not a workload controller (data.ito.config.workload.controllers): it cannot create a child of another object",
		[lib.show(object.get(input.review, "user", ""))],
	))
}
