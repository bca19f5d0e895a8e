# METADATA
# title: Workload gate
# description: >-
#   The Kubernetes admission webhook's decision (data.ito.workload.decision):
#   a Pod or workload object (the kinds in data.ito.tables.workloads) that
#   requests GPUs in a namespace under itogate's control must carry a valid
#   admission ticket of a live run of the namespace's account, ask for no
#   more GPUs than admitted (no Pod more than one node's), and be the one
#   workload the ticket created (or a child of it). Facts only: Go verified
#   the ticket and read the run and its binding from the ledger
#   (docs/kubernetes.md).
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
#           required: [operation, dry_run, kind, namespace, name, object]
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
#             namespace: {type: string}
#             name: {type: string}
#             user: {type: string}
#             object: {type: object}
#         namespace:
#           type: object
#           additionalProperties: false
#           properties:
#             name: {type: string}
#             account: {type: string}
#         ticket:
#           type: object
#           additionalProperties: false
#           properties:
#             present: {type: boolean}
#             verified: {type: boolean}
#             error: {type: string}
#             claims: {type: object}
#         run:
#           type: object
#           additionalProperties: false
#           properties:
#             found: {type: boolean}
#             account: {type: string}
#             booking_id: {type: string}
#             live: {type: boolean}
#             ended_by: {type: string}
#         binding:
#           type: object
#           additionalProperties: false
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

_kind_key := concat("/", [input.review.kind.group, input.review.kind.kind])

_claims := object.get(input.ticket, "claims", {})

# METADATA
# title: Workload decision
# description: >-
#   {"allow": bool, "violations": [...], "warnings": [], "bind": "root"|"child"|"none",
#   "gpus": n}. bind tells Go what to record in the ledger after an allow that
#   is not a dry run: "root" binds the run to this object's identity, "child"
#   adds this object's uid under its bound owner, "none" records nothing
#   (Pods, objects without GPUs).
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
# description: Every deny finding, sorted by code then message.
violations := [f | some t in sort([[f.code, f.message, f] | some f in deny]); f := t[2]]

# METADATA
# title: GPUs requested
# description: >-
#   The GPUs the object asks for in total: over its pod sets, replicas × the
#   GPUs of one Pod (the GPU resources of the table; a container counts the
#   larger of its request and limit; a Pod counts max(sum of containers,
#   largest init container), as the scheduler does). 0 for kinds not in the
#   table.
gpus := sum([n | some s in pod_sets; n := s.replicas * s.per_pod])

# METADATA
# title: Pod sets
# description: >-
#   [{"replicas": n, "per_pod": GPUs}] for each pod template of the object, from
#   the table's paths for its kind (group/Kind).
pod_sets := [{"replicas": _replicas(base, set), "per_pod": _pod_gpus(object.get(base, set.path, {}))} |
	some set in object.get(_table.kinds, _kind_key, {"pod_sets": []}).pod_sets
	some base in _bases(set)
]

_bases(set) := [_obj] if not set.each

_bases(set) := [e | some e in object.get(_obj, set.each, [])] if set.each

# A factor is the first of its alternative paths that holds a number, else 1.
_factor(base, alternatives) := vs[0] if {
	vs := [v | some p in alternatives; v := object.get(base, p, null); is_number(v)]
	count(vs) > 0
} else := 1

_replicas(base, set) := product([_factor(base, f) | some f in object.get(set, "replicas", [])])

_qty(x) := x if is_number(x)

_qty(x) := units.parse(x) if is_string(x)

_container_gpus(c) := sum([max([
	_qty(object.get(c, ["resources", "requests", r], 0)),
	_qty(object.get(c, ["resources", "limits", r], 0)),
]) |
	some r in _table.gpu_resources
])

_pod_gpus(spec) := max([
	sum([_container_gpus(c) | some c in object.get(spec, "containers", [])]),
	max(array.concat([0], [_container_gpus(c) | some c in object.get(spec, "initContainers", [])])),
])

# METADATA
# title: Requests GPUs
# description: True when the object asks for at least one GPU; only then do the checks apply.
requests_gpus if gpus > 0

# METADATA
# title: Ledger binding to record
# description: See decision.
bind := "none" if not requests_gpus

bind := "none" if {
	requests_gpus
	_kind_key == "/Pod"
}

bind := "child" if {
	requests_gpus
	_kind_key != "/Pod"
	_is_child
}

bind := "root" if {
	requests_gpus
	_kind_key != "/Pod"
	not _is_child
}

_is_child if input.object_ref.owner_uid != ""

_ticket_ok if {
	input.ticket.verified == true
	_claims.action == "train.create"
}

# METADATA
# title: Namespace bound to no account
# description: The namespace is under itogate's control but no account is bound to it (webhook.namespaces).
# custom:
#   code: WORKLOAD_NAMESPACE_UNBOUND
#   gate: workload
#   fix: Bind the namespace to its account in the webhook configuration (webhook.namespaces).
deny contains v if {
	requests_gpus
	object.get(input.namespace, "account", "") == ""
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
	requests_gpus
	not input.ticket.present == true
	v := lib.violation(rego.metadata.rule(), sprintf("%v GPUs requested without an admission ticket (annotation %v)", [
		gpus, _table.ticket_annotation,
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
	requests_gpus
	input.ticket.present == true
	not _ticket_ok
	not input.ticket.error == "expired"
	v := lib.violation(rego.metadata.rule(), sprintf("the admission ticket is rejected: %v", [
		object.get(input.ticket, "error", "not issued for train.create"),
	]))
}

# METADATA
# title: Admission ticket expired
# description: The ticket's exp (the term's end or the run's declared end) has passed.
# custom:
#   code: WORKLOAD_TICKET_EXPIRED
#   gate: workload
#   fix: The run's time is over; admit a new run for new workloads.
deny contains v if {
	requests_gpus
	input.ticket.present == true
	input.ticket.error == "expired"
	v := lib.violation(rego.metadata.rule(), "the admission ticket has expired")
}

# METADATA
# title: Ticket of another account
# description: The ticket's account (sub) is not the account bound to the namespace.
# custom:
#   code: WORKLOAD_ACCOUNT_MISMATCH
#   gate: workload
#   fix: Create the workload in a namespace of the account that was admitted.
deny contains v if {
	requests_gpus
	_ticket_ok
	object.get(input.namespace, "account", "") != ""
	_claims.sub != input.namespace.account
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
	requests_gpus
	_ticket_ok
	not _run_matches
	v := lib.violation(
		rego.metadata.rule(),
		sprintf("run %v is not admitted for this account and booking", [lib.show(_claims.run_id)]),
	)
}

_run_matches if {
	input.run.found == true
	input.run.account == _claims.sub
	input.run.booking_id == _claims.booking_id
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
	requests_gpus
	_ticket_ok
	_run_matches
	not input.run.live == true
	v := lib.violation(rego.metadata.rule(), sprintf("run %v is not live (%v)", [
		lib.show(_claims.run_id), object.get(input.run, "ended_by", "ended"),
	]))
}

# METADATA
# title: More GPUs than admitted
# description: The object asks for more GPUs in total (replicas × per Pod) than the ticket's world_size.
# custom:
#   code: WORKLOAD_GPUS_EXCEED_TICKET
#   gate: workload
#   fix: Request at most the admitted world size, or admit a run for more GPUs.
deny contains v if {
	requests_gpus
	_ticket_ok
	gpus > _claims.world_size
	v := lib.violation(rego.metadata.rule(), sprintf("%v GPUs requested, %v admitted", [gpus, _claims.world_size]))
}

# METADATA
# title: A Pod larger than a node
# description: One Pod asks for more GPUs than the admitted gpus_per_node.
# custom:
#   code: WORKLOAD_POD_GPUS_EXCEED_NODE
#   gate: workload
#   fix: Ask for at most gpus_per_node GPUs per Pod; spread the rest over more Pods.
deny contains v if {
	requests_gpus
	_ticket_ok
	some s in pod_sets
	s.per_pod > _claims.gpus_per_node
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
	requests_gpus
	_ticket_ok
	bind == "root"
	input.binding.bound == true
	input.binding.identity != input.object_ref.identity
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
	requests_gpus
	_ticket_ok
	_is_child
	not input.object_ref.owner_uid in object.get(input.binding, "uids", [])
	v := lib.violation(rego.metadata.rule(), "the object's controller is not the workload this ticket created")
}
