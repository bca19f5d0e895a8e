package ito.workload_test

import data.ito.workload

_claim(kind, requests) := [
	_set("/review/kind", {"group": "resource.k8s.io", "version": "v1", "kind": kind}),
	_set("/review/resource", {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaims"}),
	_set("/review/object", _claim_object(kind, {"devices": {"requests": requests}})),
	_set("/object_ref", {"identity": concat("/", ["resource.k8s.io", kind, "team-a/gpus"]), "uid": "c", "owner_uid": ""}),
]

_claim_object("ResourceClaim", spec) := {"kind": "ResourceClaim", "metadata": {"name": "gpus"}, "spec": spec}

_claim_object("ResourceClaimTemplate", spec) := {"kind": "ResourceClaimTemplate", "metadata": {"name": "gpus"}, "spec": {"spec": spec}}

_exactly(class, extra) := {"name": "r", "exactly": object.union({"deviceClassName": class, "allocationMode": "ExactCount"}, extra)}

# Claims and templates: devices of GPU classes counted, never charged to a
# ticket (the Pods that use them are), unknown counts refused.
test_claim_requests[name] if {
	some name, tc in {
		"exact count": {"reqs": [_exactly("gpu.nvidia.com", {"count": 4})], "gpus": 4, "codes": set()},
		"count defaults to 1": {"reqs": [_exactly("mig.nvidia.com", {})], "gpus": 1, "codes": set()},
		"requests add up": {
			"reqs": [_exactly("gpu.nvidia.com", {"count": 4}), _exactly("gpu.amd.com", {"count": 2})],
			"gpus": 6, "codes": set(),
		},
		"prioritized list: its largest alternative": {
			"reqs": [{"name": "r", "firstAvailable": [
				{"name": "big", "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 8},
				{"name": "mig", "deviceClassName": "mig.nvidia.com", "allocationMode": "ExactCount", "count": 2},
			]}],
			"gpus": 8, "codes": set(),
		},
		"another class, all of them": {"reqs": [_exactly("compute-domain-default-channel.nvidia.com", {"allocationMode": "All"})], "gpus": 0, "codes": set()},
		"All of a GPU class": {"reqs": [_exactly("gpu.nvidia.com", {"allocationMode": "All"})], "gpus": 0, "codes": {"WORKLOAD_GPU_COUNT_UNKNOWN"}},
		"a mode of the future": {"reqs": [_exactly("gpu.nvidia.com", {"allocationMode": "Most"})], "gpus": 0, "codes": {"WORKLOAD_GPU_COUNT_UNKNOWN"}},
		"All in a prioritized list": {
			"reqs": [{"name": "r", "firstAvailable": [
				{"name": "one", "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1},
				{"name": "all", "deviceClassName": "gpu.nvidia.com", "allocationMode": "All"},
			]}],
			"gpus": 1, "codes": {"WORKLOAD_GPU_COUNT_UNKNOWN"},
		},
		"an alias class not listed": {"reqs": [_exactly("big-gpus.example.com", {"count": 8})], "gpus": 0, "codes": {"WORKLOAD_GPU_COUNT_UNKNOWN"}},
		"admin access to GPUs": {
			"reqs": [_exactly("gpu.nvidia.com", {"count": 1, "adminAccess": true})],
			"gpus": 1, "codes": {"WORKLOAD_GPU_ACCESS_UNCOUNTED"},
		},
		"admin access to another class": {"reqs": [_exactly("compute-domain-daemon.nvidia.com", {"adminAccess": true})], "gpus": 0, "codes": set()},
		"a count that is no count": {"reqs": [_exactly("gpu.nvidia.com", {"count": -1})], "gpus": 0, "codes": {"WORKLOAD_COUNT_INVALID"}},
	}
	some kind in ["ResourceClaim", "ResourceClaimTemplate"]
	d := _decide(array.concat(_claim(kind, tc.reqs), [_set("/ticket", {"present": false})]))
	print(name, kind, "got", d.gpus, {v.code | some v in d.violations})
	d.gpus == tc.gpus
	{v.code | some v in d.violations} == tc.codes
	d.bind == "none"
}

test_claim_messages if {
	d := _decide(_claim("ResourceClaimTemplate", [_exactly("gpu.nvidia.com", {"allocationMode": "All"})]))
	d.violations[0].message == `spec.spec.devices.requests[0].exactly: allocationMode "All" of GPU class "gpu.nvidia.com" has no count`
	e := _decide(_claim("ResourceClaim", [_exactly("fast", {})]))
	e.violations[0].message == `spec.devices.requests[0].exactly: device class "fast" is neither a GPU class nor another class of the bundle`
}

# An alias becomes known when the operator lists it: bundle data, no code.
test_alias_listed if {
	model := json.patch(data.ito.config.workload, [{"op": "add", "path": "/dra/gpu_classes/names/-", "value": "big-gpus.example.com"}])
	d := workload.decision with input as _input(_claim("ResourceClaim", [_exactly("big-gpus.example.com", {"count": 8})]))
		with data.ito.config.workload as model
	d.allow
	d.gpus == 8
}

_pod_claims(counted, claims) := _pod_with({
	"containers": [_c("a", {"nvidia.com/gpu": counted})],
	"resourceClaims": claims,
})

# A Pod naming a claim template is charged a whole node; without a ticket it
# is refused for want of one.
test_pod_names_claim_template if {
	tpl := [{"name": "gpus", "resourceClaimTemplateName": "gpus"}]
	_decide(_pod_claims(0, tpl)).gpus == 8
	_decide(_pod_claims(2, tpl)).gpus == 8
	_codes(_pod_claims(2, tpl)) == set()
	d := _decide(array.concat(_pod_claims(0, tpl), [_set("/ticket", {"present": false})]))
	d.gpus == 0
	d.violations[0].message == "GPUs through a DRA claim template requested without an admission ticket (annotation itogate.io/ticket)"
	e := _decide(array.concat(_pod_claims(0, tpl), [_set("/binding", {"bound": false, "identity": "", "uids": []})]))
	{v.code | some v in e.violations} == {"WORKLOAD_OWNER_UNBOUND"}
}

test_job_charge_message if {
	d := _decide([
		_set("/review/object/spec/template/spec/resourceClaims", [{"name": "gpus", "resourceClaimTemplateName": "gpus"}]),
		_set("/review/object/spec/template/spec/containers/0/resources", {}),
		_set("/review/object/spec/parallelism", 3),
		_set("/review/object/spec/completions", 3),
	])
	d.violations[0].message == "24 GPUs requested (a Pod naming a DRA claim template counts as a whole node), 16 admitted"
}

# A standalone claim is refused unless the Pod holds a whole node.
test_pod_names_standalone_claim if {
	named := [{"name": "nic", "resourceClaimName": "shared-nic"}]
	_codes(_pod_claims(8, named)) == set()
	d := _decide(_pod_claims(4, named))
	{v.code | some v in d.violations} == {"WORKLOAD_GPU_COUNT_UNKNOWN"}
	d.violations[0].message == `spec.resourceClaims[0] names ResourceClaim "shared-nic", whose devices this review cannot see`
}

test_unknown_class_extended_resource if {
	d := _decide(_pod_with({"containers": [_c("a", {"deviceclass.resource.kubernetes.io/fast": 1, "nvidia.com/gpu": 8})]}))
	{v.code | some v in d.violations} == {"WORKLOAD_GPU_COUNT_UNKNOWN"}
	d.gpus == 8
}
