package ito.workload

# GPU access without a count: ways a container reaches a node's GPUs that
# the scheduler does not count (data.ito.config.workload: device_env,
# device_mount_paths, host_device_paths, device_annotation_prefixes;
# privileged containers). They are refused in a controlled namespace unless
# the Pod holds a whole node by its ticket: it asks for the ticket's
# gpus_per_node by count, so the node has no other GPU to reach.

import data.ito.lib

# The Pod holds a whole node by its ticket: its counted GPUs are the
# ticket's gpus_per_node.
_holds_node(per_pod) if {
	_ticket_ok
	per_pod > 0
	per_pod == _claims.gpus_per_node
}

# METADATA
# title: GPU access without a count
# description: >-
#   A container reaches GPUs the scheduler does not count: a device variable
#   of the container runtime (NVIDIA_VISIBLE_DEVICES and the like, other than
#   void/none/empty), a privileged container, a mount of the NVIDIA toolkit's
#   device-list directory, a hostPath at, under or above a GPU device node, a
#   CDI device annotation, or a DRA adminAccess request of a GPU class.
#   Refused unless the Pod holds a whole node by its ticket (a claim or claim
#   template never does); ephemeral containers are checked when added.
# custom:
#   code: WORKLOAD_GPU_ACCESS_UNCOUNTED
#   gate: workload
#   fix: >-
#     Ask for GPUs by count (resources or a DRA claim template) and drop the
#     variable, privilege or mount; or request the ticket's gpus_per_node to hold the node.
deny contains v if {
	some m in _uncounted
	v := lib.violation(rego.metadata.rule(), m)
}

# The messages, over the pod sets that do not hold a whole node and every
# container a Pod can run (a pod set's "containers"). A rule for a member
# most objects lack starts with input.review.keys (every member name of the
# object, from Go): OPA's rule index skips it without evaluating it.
_uncounted contains sprintf("%v: container %v is privileged", [_where(s), lib.show(c.name)]) if {
	input.review.keys.privileged == true
	some s in pod_sets
	some c in s.containers
	c.securityContext.privileged == true
	not _holds_node(s.per_pod)
}

_uncounted contains sprintf("%v: container %v sets %v%v", [_where(s), lib.show(c.name), e.name, _env_value(e)]) if {
	input.review.keys.env == true
	some s in pod_sets
	some c in s.containers
	some e in c.env
	e.name in _model.device_env.names
	_env_reaches(e)
	not _holds_node(s.per_pod)
}

_uncounted contains sprintf("%v: container %v mounts %v", [_where(s), lib.show(c.name), m.mountPath]) if {
	input.review.keys.volumeMounts == true
	some s in pod_sets
	some c in s.containers
	some m in c.volumeMounts
	p := _clean(m.mountPath)
	some d in _model.device_mount_paths
	_within(p, d)
	not _holds_node(s.per_pod)
}

_uncounted contains sprintf("%v: volume %v mounts host path %v", [_where(s), lib.show(v.name), v.hostPath.path]) if {
	input.review.keys.hostPath == true
	some s in pod_sets
	some v in s.spec.volumes
	_host_device_path(_clean(v.hostPath.path))
	not _holds_node(s.per_pod)
}

_uncounted contains sprintf("%v: annotation %v injects devices", [_where(s), k]) if {
	some s in pod_sets
	some k, _ in s.annotations
	some prefix in _model.device_annotation_prefixes
	startswith(k, prefix)
	not _holds_node(s.per_pod)
}

_uncounted contains m if {
	input.review.kind.group == "resource.k8s.io"
	some s in claim_sets
	some m in s.access
}

_env_reaches(e) if e.valueFrom

_env_reaches(e) if {
	not e.valueFrom
	not object.get(e, "value", "") in _model.device_env.no_device_values
}

_env_value(e) := " from a reference" if e.valueFrom

_env_value(e) := sprintf("=%v", [object.get(e, "value", "")]) if not e.valueFrom

# A host path at or under a device prefix (/dev/nvidia0), or above one
# (/dev, /).
_host_device_path(p) if {
	some d in _model.host_device_paths
	startswith(p, d)
}

_host_device_path(p) if {
	some d in _model.host_device_paths
	_within(d, p)
}

# p is d or below it.
_within(p, d) if p == d

_within(p, d) if startswith(p, concat("", [trim_suffix(d, "/"), "/"]))

# A path with repeated slashes and "." segments removed, without a trailing
# slash (the apiserver refuses ".." in a hostPath).
_clean(p) := "/" if regex.replace(regex.replace(p, `/(\./)+`, "/"), `/+`, "/") == "/"

_clean(p) := trim_suffix(regex.replace(regex.replace(concat("", [p, "/"]), `/(\./)+`, "/"), `/+`, "/"), "/") if {
	regex.replace(regex.replace(p, `/(\./)+`, "/"), `/+`, "/") != "/"
}
