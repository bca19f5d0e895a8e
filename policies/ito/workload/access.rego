package ito.workload

# GPU access without a count: ways a container reaches a node's GPUs that
# the scheduler does not count (data.ito.config.workload: device_env,
# device_mount_paths, host_device_paths, device_annotation_prefixes and
# device_annotation_keys; privileged containers). They are refused in a
# controlled namespace unless the Pod holds a whole node by its ticket: it
# asks for the ticket's gpus_per_node whole devices (gpu_resources.whole)
# by count, so the node has no other GPU to reach.

import data.ito.lib

# The Pod holds a whole node by its ticket: its counted whole devices (a
# pod set's "whole") are the ticket's gpus_per_node. MIG slices, shared
# replicas and DRA claims do not count: 8 slices of one GPU leave 7 GPUs
# of an 8-GPU node to reach.
_holds_node(s) if {
	_ticket_ok
	whole := _whole(s)
	whole > 0
	whole == _claims.gpus_per_node
}

# METADATA
# title: GPU access without a count
# description: >-
#   A container reaches GPUs the scheduler does not count: a device variable
#   of the container runtime (NVIDIA_VISIBLE_DEVICES and the like, other than
#   void/none/empty), a privileged container, a mount whose cleaned path
#   starts with the NVIDIA toolkit's device-list directory (plain string
#   prefix, as the toolkit matches it), a hostPath at, under, above or on a
#   route to a GPU device node, a device-injecting annotation (CDI, NRI,
#   CRI-O), or a DRA adminAccess request of a GPU class. Refused unless the
#   Pod holds a whole node by its ticket: the ticket's gpus_per_node whole
#   devices (a MIG slice, a shared replica, a claim or claim template never
#   count), and then only a CDI annotation; host device or mount injection
#   (NRI, CRI-O) and a mount or host path too long or deep to judge are
#   refused whatever the Pod holds. Ephemeral containers are checked when
#   added.
# custom:
#   code: WORKLOAD_GPU_ACCESS_UNCOUNTED
#   gate: workload
#   fix: >-
#     Ask for GPUs by count (resources or a DRA claim template) and drop the
#     variable, privilege, mount or annotation; or request the ticket's gpus_per_node
#     whole GPUs (nvidia.com/gpu and the like) to hold the node.
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
	not _holds_node(s)
}

_uncounted contains sprintf("%v: container %v sets %v%v", [_where(s), lib.show(c.name), e.name, _env_value(e)]) if {
	input.review.keys.env == true
	some s in pod_sets
	some c in s.containers
	some e in c.env
	e.name in _model.device_env.names
	_env_reaches(e)
	not _holds_node(s)
}

_uncounted contains sprintf("%v: container %v mounts %v", [_where(s), lib.show(c.name), m.mountPath]) if {
	input.review.keys.volumeMounts == true
	some s in pod_sets
	some c in s.containers
	some m in c.volumeMounts
	some d in _device_mount_dirs
	contains(m.mountPath, d.last)
	startswith(_clean(m.mountPath), d.clean)
	not _holds_node(s)
}

_uncounted contains sprintf("%v: volume %v mounts host path %v", [_where(s), lib.show(v.name), v.hostPath.path]) if {
	input.review.keys.hostPath == true
	some s in pod_sets
	some v in s.spec.volumes
	_host_device_path(_clean(v.hostPath.path))
	not _holds_node(s)
}

# A path too long or too deep to clean is not judged: refused, whatever
# the Pod holds (no mount or host path of a real workload is).
# Two rules without a function call (every real Pod mounts its service
# account token): too long, or possibly too deep (fewer slashes, fewer
# segments) and then too deep.
_uncounted contains sprintf("%v: container %v mounts a path of %v bytes, %v", [
	_where(s), lib.show(c.name), count(m.mountPath), _unjudged_note,
]) if {
	input.review.keys.volumeMounts == true
	some s in pod_sets
	some c in s.containers
	some m in c.volumeMounts
	count(m.mountPath) > _max_path_bytes
}

_uncounted contains sprintf("%v: container %v mounts a path of %v bytes, %v", [
	_where(s), lib.show(c.name), count(m.mountPath), _unjudged_note,
]) if {
	input.review.keys.volumeMounts == true
	some s in pod_sets
	some c in s.containers
	some m in c.volumeMounts
	strings.count(m.mountPath, "/") >= _max_path_segments
	_unjudged_path(m.mountPath)
}

_uncounted contains sprintf("%v: volume %v mounts a host path of %v bytes, %v", [
	_where(s), lib.show(v.name), count(v.hostPath.path), _unjudged_note,
]) if {
	input.review.keys.hostPath == true
	some s in pod_sets
	some v in s.spec.volumes
	_unjudged_path(v.hostPath.path)
}

# A device annotation: a key under a prefix of device_annotation_prefixes
# or a prefix without its slash (k + "/" starts with a prefix exactly
# then), or a key of device_annotation_keys; one builtin call a key and no
# function call, for every Pod carries annotations. The CDI ones are
# allowed on a Pod holding its whole node; device and mount injection that
# is not a GPU's (the NRI device-injector's and CRI-O's host devices and
# mounts) reaches the host, refused whatever the Pod holds.
_uncounted contains m if {
	some s in pod_sets
	some k, _ in s.annotations
	strings.any_prefix_match(concat("", [k, "/"]), _model.device_annotation_prefixes)
	m := _annotation_finding(s, k)
}

_uncounted contains m if {
	some s in pod_sets
	some k in _model.device_annotation_keys
	_ = s.annotations[k] # present, whatever its value (false too)
	m := _annotation_finding(s, k)
}

_annotation_finding(s, k) := sprintf("%v: annotation %v injects devices", [_where(s), k]) if {
	_node_holder_annotation(k)
	not _holds_node(s)
}

_annotation_finding(s, k) := sprintf("%v: annotation %v injects host devices or mounts", [_where(s), k]) if {
	not _node_holder_annotation(k)
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

# A mount path the toolkit reads as a device request: cleaned, it starts
# with a device-list directory (cleaned) as a string
# (/var/run/nvidia-container-devicesall requests "all"). Cleaning only
# drops segments, so a path without the directory's last segment as a
# substring ("last") cannot: most mounts are never cleaned.
# Every review with a mount asks, so a directory without ".." (as
# shipped) is cleaned inline, with no function call; "last" is "" for "/".
_device_mount_dirs := [{
	"clean": concat("/", ["", concat("/", kept)]),
	"last": concat("", array.slice(kept, count(kept) - 1, count(kept))),
} |
	some d in _model.device_mount_paths
	segs := [x | some x in split(d, "/"); not x in {"", "."}]
	count(d) <= _max_path_bytes
	count(segs) <= _max_path_segments
	some kept in array.concat([segs | not ".." in segs], [_segments(_clean(d)) | ".." in segs])
]

# A device annotation a Pod holding its whole node may carry: CDI
# injection of the node's GPUs (whole_node_annotation_prefixes, a prefix
# without its slash a key too).
_node_holder_annotation(k) if strings.any_prefix_match(concat("", [k, "/"]), _model.whole_node_annotation_prefixes)

# A host path at or under a device prefix (/dev/nvidia0), or above one
# (/dev, /).
_host_device_path(p) if {
	some d in _model.host_device_paths
	startswith(p, d)
}

_host_device_path(p) if {
	some d in _model.host_device_paths
	startswith(d, concat("", [trim_suffix(p, "/"), "/"]))
}

# Cleaning is quadratic in Rego: a path is cleaned only up to these bounds
# (Linux's PATH_MAX; no real mount is that deep), beyond them refused
# unjudged.
_max_path_bytes := 4096

_max_path_segments := 32

_unjudged_note := sprintf(
	"too long or deep to judge (at most %v bytes, %v segments)",
	[_max_path_bytes, _max_path_segments],
)

_unjudged_path(p) if count(p) > _max_path_bytes

_unjudged_path(p) if {
	strings.count(p, "/") >= _max_path_segments # fewer slashes, fewer segments
	count(p) <= _max_path_bytes
	count(_segments(p)) > _max_path_segments
}

_segments(p) := [x | some x in split(p, "/"); not x in {"", "."}]

# A path as Go's path.Clean writes it, from "/" (the kubelet makes a
# relative mountPath absolute): repeated slashes and "." segments dropped,
# each ".." removing the segment before it (at the root, nothing), no
# trailing slash; undefined beyond the bounds above. The apiserver refuses
# ".." in a hostPath, not in a mountPath. Without "..", the segments as
# they are; with it, a segment stays unless a later ".." removes it: unless
# the depth (segments minus "..") falls back to its own before the end.
_clean(p) := concat("/", ["", concat("/", segs)]) if {
	count(p) <= _max_path_bytes
	segs := _segments(p)
	count(segs) <= _max_path_segments
	not ".." in segs
}

_clean(p) := concat("/", ["", concat("/", kept)]) if {
	count(p) <= _max_path_bytes
	segs := _segments(p)
	count(segs) <= _max_path_segments
	".." in segs
	depth := [sum([_step(x) | some x in array.slice(segs, 0, k)]) | some k in numbers.range(0, count(segs))]
	kept := [x |
		some i, x in segs
		x != ".."
		every k in numbers.range(i + 1, count(segs)) {
			depth[k] > depth[i]
		}
	]
}

_step("..") := -1

_step(x) := 1 if x != ".."
