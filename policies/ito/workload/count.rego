package ito.workload

# Counting: every pod template of the object (data.ito.tables.workloads)
# multiplied by its replica fields, each Pod counted as the kubelet and the
# scheduler count its effective request, for the GPU resources of the
# resource model (data.ito.config.workload).

import data.ito.lib

_model := data.ito.config.workload

# METADATA
# title: GPUs requested
# description: >-
#   The GPUs the object asks for in total: over its pod sets, replicas × the
#   GPUs of one Pod (a Pod naming a DRA claim template is charged at least a
#   whole node, the ticket's gpus_per_node), plus the devices of a DRA claim
#   or claim template (dra.rego). 0 for kinds not in the table.
gpus := sum([n | some s in pod_sets; n := s.replicas * s.charged]) + sum([s.gpus | some s in claim_sets])

# METADATA
# title: Pod sets
# description: >-
#   One entry per pod template of the object, from the table's paths for its
#   kind (group/Kind): {"base", "path", "spec", "annotations", "containers"
#   (every container a Pod can run: init, app, ephemeral), "replicas",
#   "factors", "quantities" (the extended-resource quantities of its
#   containers, each with its class, count "n" and "amount"), "per_pod"
#   (counted GPUs of one Pod), "claims" (names a DRA claim template),
#   "charged" (what one Pod is charged)}. A pod set's whole devices (_whole)
#   are computed only when an access finding asks. Every review evaluates
#   this (every Pod of every job): it calls as few functions as it can,
#   each call being dearer in OPA than the expressions around it.
pod_sets := [s |
	some set in _kind.pod_sets
	some b in array.concat(
		[{"base": e, "key": k, "where": array.concat(set.each, [sprintf("%v", [k])])} |
			set.each
			some k, e in object.get(input.review.object, set.each, [])
		],
		[{"base": input.review.object, "key": "", "where": []} | not set.each],
	)
	spec := object.get(b.base, set.path, {})
	factors := [_factor(b, f) | some f in set.replicas]

	# (array.concat, not a comprehension: a list that is no array, null
	# included, fails the evaluation closed instead of being skipped)
	containers := array.concat(
		array.concat(object.get(spec, "initContainers", []), object.get(spec, "containers", [])),
		object.get(spec, "ephemeralContainers", []),
	)
	qs := array.concat(
		[{"r": r, "q": q, "c": c.name, "field": "limits", "class": class, "n": n, "amount": n} |
			some c in containers
			some r, q in c.resources.limits
			contains(r, "/")
			class := _resource_class(r)
			n := _qty(q)
		],
		[{"r": r, "q": q, "c": c.name, "field": "requests", "class": class, "n": n, "amount": amount} |
			some c in containers
			some r, q in c.resources.requests
			contains(r, "/")
			class := _resource_class(r)
			n := _qty(q)
			amount := max([0, n - _qty(object.get(c.resources, ["limits", r], 0))])
		],
	)
	inits := count(object.get(spec, "initContainers", []))
	per_pod := sum([q.amount | inits == 0; some q in qs; q.class == "gpu"]) + sum([_effective(spec, r) |
		inits > 0
		some r in {q.r | some q in qs; q.class == "gpu"}
	])
	claims := count([1 |
		some c in object.get(spec, "resourceClaims", [])
		object.get(c, "resourceClaimTemplateName", "") != ""
	]) > 0
	meta := array.concat(array.slice(set.path, 0, count(set.path) - 1), ["metadata", "annotations"])
	s := {
		"base": b,
		"path": set.path,
		"spec": spec,
		"annotations": object.get(b.base, meta, {}),
		"containers": containers,
		"replicas": product([f.n | some f in factors]),
		"factors": factors,
		"quantities": qs,
		"per_pod": per_pod,
		"claims": claims,
		"charged": max(array.concat([per_pod], [n | claims; _ticket_ok; n := input.ticket.claims.gpus_per_node])),
	}
]

# A pod set's whole devices: its counted GPUs of gpu_resources.whole.
_whole(s) := _per_pod(s.spec, s.quantities, _model.gpu_resources.whole)

# A quantity's "amount" is what it adds to its container: a limit its
# count, a request what it asks above the limit (its count without one), so
# that the two add up to the larger. The counted GPUs of one Pod ("per_pod"):
# without init containers, the amounts of its GPU quantities added up; with
# them, the kubelet's effective request per GPU resource (_effective), added
# up. A Pod whose DRA claim templates this review cannot see reaches at most
# its node's GPUs: "charged" max(counted, gpus_per_node) once a ticket says a
# node's size.

# The counted GPUs of one Pod over the resources "only": the quantities' amounts
# added up, or with init containers their effective requests.
_per_pod(spec, qs, only) := sum([q.amount | some q in qs; _counted(q, only)]) if count(_inits(spec)) == 0

else := sum([_effective(spec, r) | some r in {q.r | some q in qs; _counted(q, only)}])

# A quantity counted among the GPUs of "only" (resource names).
_counted(q, only) if {
	q.class == "gpu"
	q.r in only
}

# Where a pod set is, for messages: "spec.template.spec".
_where(s) := concat(".", array.concat(s.base.where, s.path))

# A replica factor: the largest of the values present at its "max" paths
# (relative to the pod set's base), at its "max_root" paths (from the
# object's root, for the base keys listed in "keys"), and at the "max_if"
# paths when the object's "root" flag is true; 1 when none is present;
# bounded above by the values at its "min" paths. Every value read must be
# a count (an integer from 0 to max_count).
_factor(b, f) := {"n": min(array.concat([_largest(up)], [_count(x.v) | some x in down])), "read": read} if {
	up := array.concat(array.concat(_read(b, object.get(f, "max", [])), _root_values(b, f)), _if_values(b, f))
	down := _read(b, object.get(f, "min", []))
	read := array.concat(up, down)
}

# The values present at paths from the base b, each with where it was read.
_read(b, paths) := [{"at": concat(".", array.concat(b.where, p)), "v": v} |
	some p in paths
	v := object.get(b.base, p, null)
	v != null
]

_root_values(b, f) := _read({"base": _obj, "where": []}, f.max_root) if {
	b.key in object.get(f, "keys", [])
} else := []

_if_values(b, f) := _read(b, f.max_if.max) if {
	object.get(_obj, f.max_if.root, false) == true
} else := []

_largest(xs) := max([_count(x.v) | some x in xs]) if count(xs) > 0

else := 1

# A count: an integer from 0 to max_count (a replica field, a GPU quantity,
# a DRA device count).
_count_ok(x) if {
	is_number(x)
	x == floor(x)
	x >= 0
	x <= _model.max_count
}

_count(x) := x if _count_ok(x)

else := 0

# A GPU quantity as the apiserver writes it: a non-negative integer, as a
# JSON number or a string with at most a decimal SI suffix ("8", "1k").
_qty_ok(q) if _count_ok(q)

_qty_ok(q) if {
	is_string(q)
	regex.match(`^[0-9]+[kMGTPE]?$`, q)
	units.parse(q) <= _model.max_count
}

_qty(q) := q if {
	is_number(q)
	q == floor(q)
	q >= 0
	q <= _model.max_count
} else := n if {
	# _qty_ok's string case, inline: every GPU quantity the apiserver
	# sends is a string
	is_string(q)
	regex.match(`^[0-9]+[kMGTPE]?$`, q)
	n := units.parse(q)
	n <= _model.max_count
} else := 0

_inits(spec) := object.get(spec, "initContainers", [])

# The class of an extended resource (only they, whose names have a domain,
# are looked at): "gpu" (by name, or by prefix but for the names under not,
# or the DRA extended resource of a GPU device class) or "unknown" (the
# extended resource of a device class in neither list); undefined for the
# others.
_resource_class(r) := "gpu" if {
	strings.any_prefix_match(r, _model.gpu_resources.prefixes)
	not r in _model.gpu_resources.not
} else := "gpu" if {
	r in _model.gpu_resources.names
} else := _dra_resource_class(_dra_class(r)) if {
	# only a DRA extended resource goes on: most names (rdma/ib,
	# example.com/...) stop here, at no further call
	startswith(r, _dra.extended_resource_prefix)
}

_dra_resource_class(c) := "gpu" if {
	_gpu_class(c)
} else := "unknown" if {
	not _known_class(c)
}

# One container's amount of r: the larger of its request and limit.
_res(c, r) := max([
	_qty(object.get(c, ["resources", "requests", r], 0)),
	_qty(object.get(c, ["resources", "limits", r], 0)),
])

_sidecar(c) if c.restartPolicy == "Always"

# A Pod's effective amount of r, as the kubelet and the scheduler compute it
# (KEP-753): the app containers and the native sidecars (init containers
# with restartPolicy Always) run together and add up; an ordinary init
# container runs beside the sidecars started before it; the Pod holds the
# larger of the two.
_effective(spec, r) := max(array.concat([_long_lived(spec, r)], [u |
	some i, c in _inits(spec)
	not _sidecar(c)
	u := _res(c, r) + sum([_res(s, r) | some j, s in _inits(spec); j < i; _sidecar(s)])
]))

_long_lived(spec, r) := sum([_res(c, r) | some c in object.get(spec, "containers", [])]) + sum([_res(c, r) |
	some c in _inits(spec)
	_sidecar(c)
])

_count_invalid contains sprintf("%v is %v", [x.at, x.v]) if {
	some s in pod_sets
	some f in s.factors
	some x in f.read
	not _count_ok(x.v)
}

_count_invalid contains sprintf("%v: container %v %v %v is %v", [_where(s), lib.show(q.c), q.field, q.r, q.q]) if {
	some s in pod_sets
	some q in s.quantities
	q.class == "gpu"
	q.n == 0 # a valid quantity counts (_qty); 0 is either
	not _qty_ok(q.q)
}

_count_invalid contains m if {
	input.review.kind.group == "resource.k8s.io"
	some s in claim_sets
	some m in s.invalid
}

# METADATA
# title: A count that is no count
# description: >-
#   A replica field, a GPU quantity or a DRA device count that is negative,
#   not an integer, or above data.ito.config.workload.max_count: it would
#   lower or overflow the total, so the object is refused whatever its ticket.
# custom:
#   code: WORKLOAD_COUNT_INVALID
#   gate: workload
#   fix: Write replica fields and GPU quantities as non-negative integers within the bundle's max_count.
deny contains v if {
	some m in _count_invalid
	v := lib.violation(rego.metadata.rule(), sprintf("%v: not a count", [m]))
}

# What WORKLOAD_GPUS_EXCEED_TICKET (workload.rego) caps a workload at: the
# GPUs the run holds, the ledger's record of the ticket's run (a stage
# advance may have grown it past the ticket's world_size; it never
# shrinks), else the ticket's world_size.
_admitted_gpus := g if {
	_run_matches
	g := input.run.gpus
	is_number(g) # lib.is_count, inline: every review asks
	g >= 1
	g == floor(g)
} else := _claims.world_size

_charge_note := " (a Pod naming a DRA claim template counts as a whole node)" if {
	some s in pod_sets
	s.claims
} else := ""
