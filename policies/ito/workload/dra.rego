package ito.workload

# Dynamic Resource Allocation (resource.k8s.io/v1): the device classes of
# the resource model, the requests of a ResourceClaim or
# ResourceClaimTemplate reviewed as objects, the claims a Pod names, and the
# implicit extended resource deviceclass.resource.kubernetes.io/<class>.

import data.ito.lib

_dra := _model.dra

_gpu_class(c) if c in _dra.gpu_classes.names

_gpu_class(c) if {
	some p in _dra.gpu_classes.prefixes
	startswith(c, p)
}

_other_class(c) if c in _dra.other_classes.names

_other_class(c) if {
	some p in _dra.other_classes.prefixes
	startswith(c, p)
}

_known_class(c) if _gpu_class(c)

_known_class(c) if _other_class(c)

# The class of a DRA extended resource name; undefined for other names.
_dra_class(r) := substring(r, count(_dra.extended_resource_prefix), -1) if startswith(r, _dra.extended_resource_prefix)

# METADATA
# title: Claim sets
# description: >-
#   For a ResourceClaim or ResourceClaimTemplate (the table's claim_sets):
#   {"where", "gpus" (devices of GPU classes; a prioritized list counts its
#   largest alternative), "invalid", "unknown", "access"}. Nothing is charged
#   to a ticket here: the Pods that use the claim are (count.rego).
claim_sets := [s |
	some set in _kind.claim_sets
	spec := object.get(_obj, set.path, {})
	where := concat(".", set.path)
	reqs := [{"at": sprintf("%v.devices.requests[%v]", [where, i]), "r": r} |
		some i, r in object.get(spec, ["devices", "requests"], [])
	]
	alts := [a | some q in reqs; some a in _alternatives(q)]
	s := {
		"where": where,
		"gpus": sum([max([_alt_gpus(a) | some a in _alternatives(q)]) | some q in reqs]),
		"invalid": [sprintf("%v count is %v", [a.at, a.e.count]) | some a in alts; not _count_ok(a.e.count)],
		"unknown": [m | some a in alts; some m in _alt_unknown(a)],
		"access": [sprintf("%v asks adminAccess to GPU class %v", [a.at, lib.show(a.e.deviceClassName)]) |
			some a in alts
			a.e.adminAccess == true
			not _other_class(a.e.deviceClassName)
		],
	}
]

# The alternatives of one request: exactly, or each of firstAvailable.
_alternatives(q) := [{"at": sprintf("%v.exactly", [q.at]), "e": q.r.exactly}] if q.r.exactly

_alternatives(q) := [{"at": sprintf("%v.firstAvailable[%v]", [q.at, i]), "e": e} |
	some i, e in q.r.firstAvailable
] if q.r.firstAvailable

_mode(e) := object.get(e, "allocationMode", "ExactCount")

_alt_gpus(a) := _count(object.get(a.e, "count", 1)) if {
	_gpu_class(a.e.deviceClassName)
	_mode(a.e) == "ExactCount"
} else := 0

_alt_unknown(a) := [sprintf("%v: device class %v is neither a GPU class nor another class of the bundle", [
	a.at, lib.show(object.get(a.e, "deviceClassName", "")),
])] if not _known_class(object.get(a.e, "deviceClassName", ""))

_alt_unknown(a) := [sprintf("%v: allocationMode %v of GPU class %v has no count", [
	a.at, lib.show(_mode(a.e)), lib.show(a.e.deviceClassName),
])] if {
	_gpu_class(a.e.deviceClassName)
	_mode(a.e) != "ExactCount"
}

_alt_unknown(a) := [] if {
	_other_class(a.e.deviceClassName)
	not _gpu_class(a.e.deviceClassName)
}

_alt_unknown(a) := [] if {
	_gpu_class(a.e.deviceClassName)
	_mode(a.e) == "ExactCount"
}

# A Pod (or template) naming a claim template (a pod set's "claims"): each
# Pod gets a claim of its own, created from the template by the
# resourceclaim controller and reviewed then (claim_sets); the Pod's review
# cannot see its devices.

# A Pod (or template) naming a standalone ResourceClaim, which may predate
# the namespace's control and is shared by every Pod that names it: its
# devices are unknown to this review.
_named_claim(s, i, c) := sprintf("%v.resourceClaims[%v] names ResourceClaim %v, %v", [
	_where(s), i, lib.show(c.resourceClaimName), "whose devices this review cannot see",
])

# METADATA
# title: A GPU count that cannot be known
# description: >-
#   A DRA request whose number of GPUs cannot be known from the review:
#   allocationMode All (or any mode but ExactCount) of a GPU class, a device
#   class the bundle lists neither as a GPU class nor as another class (an
#   alias is unknown until listed), the extended resource of such a class, or
#   a Pod naming a standalone ResourceClaim (unless the Pod holds a whole
#   node by its ticket).
# custom:
#   code: WORKLOAD_GPU_COUNT_UNKNOWN
#   gate: workload
#   fix: >-
#     Ask for an exact count of a listed class, through a claim template or the
#     class's extended resource; list the cluster's DeviceClasses in data.ito.config.workload.dra.
deny contains v if {
	some m in _count_unknown
	v := lib.violation(rego.metadata.rule(), m)
}

_count_unknown contains m if {
	input.review.kind.group == "resource.k8s.io"
	some s in claim_sets
	some m in s.unknown
}

# An extended resource of a DRA device class that is in neither list.
_count_unknown contains sprintf("%v: %v names device class %v, %v", [
	_where(s), q.r, lib.show(_dra_class(q.r)), "neither a GPU class nor another class of the bundle",
]) if {
	some s in pod_sets
	some q in s.quantities
	q.class == "unknown"
}

_count_unknown contains _named_claim(s, i, c) if {
	input.review.keys.resourceClaimName == true
	some s in pod_sets
	some i, c in object.get(s.spec, "resourceClaims", [])
	object.get(c, "resourceClaimName", "") != ""
	not _holds_node(s)
}
