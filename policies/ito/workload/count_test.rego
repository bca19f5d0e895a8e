package ito.workload_test

import data.ito.workload

# A Pod of the bound Job (the base ticket: world_size 16, gpus_per_node 8),
# created by the Job controller, with the given spec.
_pod_with(spec) := [
	_set("/review/user", "system:serviceaccount:kube-system:job-controller"),
	_set("/review/kind", {"group": "", "version": "v1", "kind": "Pod"}),
	_set("/review/resource", {"group": "", "version": "v1", "resource": "pods"}),
	_set("/review/object", {"kind": "Pod", "metadata": {"name": "p"}, "spec": spec}),
	_set("/object_ref", {"identity": "/Pod/team-a/p", "uid": "pod-uid", "owner_uid": "job-uid"}),
	_set("/binding", {"bound": true, "identity": "batch/Job/team-a/train-llama", "uids": ["job-uid"]}),
]

_c(name, limits) := {"name": name, "image": "i", "resources": {"limits": limits}}

_side(name, limits) := object.union(_c(name, limits), {"restartPolicy": "Always"})

_pod_gpus(spec) := _decide(_pod_with(spec)).gpus

# The kubelet's effective request (KEP-753), one case each.
test_sidecar_arithmetic[name] if {
	some name, tc in {
		"app containers add up": {"spec": {"containers": [_c("a", {"nvidia.com/gpu": 2}), _c("b", {"nvidia.com/gpu": "3"})]}, "want": 5},
		"init larger than the app": {
			"spec": {"initContainers": [_c("i", {"nvidia.com/gpu": 6})], "containers": [_c("a", {"nvidia.com/gpu": 2})]},
			"want": 6,
		},
		"a sidecar adds to the app": {
			"spec": {"initContainers": [_side("s", {"nvidia.com/gpu": 4})], "containers": [_c("a", {"nvidia.com/gpu": 4})]},
			"want": 8,
		},
		"an init after a sidecar runs beside it": {
			"spec": {
				"initContainers": [_side("s", {"nvidia.com/gpu": 2}), _c("i", {"nvidia.com/gpu": 6})],
				"containers": [_c("a", {"nvidia.com/gpu": 1})],
			},
			"want": 8,
		},
		"an init before a sidecar does not": {
			"spec": {
				"initContainers": [_c("i", {"nvidia.com/gpu": 6}), _side("s", {"nvidia.com/gpu": 2})],
				"containers": [_c("a", {"nvidia.com/gpu": 1})],
			},
			"want": 6,
		},
		"requests and limits: the larger": {
			"spec": {"containers": [{"name": "a", "resources": {"requests": {"nvidia.com/gpu": 3}, "limits": {"nvidia.com/gpu": 2}}}]},
			"want": 3,
		},
		"every GPU resource, per resource": {
			"spec": {
				"initContainers": [_c("i", {"amd.com/gpu": 4})],
				"containers": [_c("a", {"nvidia.com/gpu": 2, "gpu.intel.com/xe": 1, "cpu": 64})],
			},
			"want": 7,
		},
	}
	got := _pod_gpus(tc.spec)
	print(name, "got", got)
	got == tc.want
}

# The resource model: prefixes, names, the not list, DRA extended resources.
test_resource_model[name] if {
	some name, tc in {
		"MIG slice": {"r": "nvidia.com/mig-1g.10gb", "want": 7},
		"time-sliced replica": {"r": "nvidia.com/gpu.shared", "want": 7},
		"AMD partition": {"r": "amd.com/cpx_nps4", "want": 7},
		"Intel": {"r": "gpu.intel.com/i915", "want": 7},
		"Gaudi": {"r": "habana.ai/gaudi", "want": 7},
		"a NIC under nvidia.com/": {"r": "nvidia.com/hostdev", "want": 0},
		"Intel millicores": {"r": "gpu.intel.com/millicores", "want": 0},
		"RDMA": {"r": "rdma/rdma_shared_device_a", "want": 0},
		"DRA extended resource of a GPU class": {"r": "deviceclass.resource.kubernetes.io/gpu.nvidia.com", "want": 7},
		"DRA extended resource of another class": {"r": "deviceclass.resource.kubernetes.io/compute-domain-daemon.nvidia.com", "want": 0},
	}
	got := _pod_gpus({"containers": [_c("a", {tc.r: "7"})]})
	print(name, "got", got)
	got == tc.want
}

# An operator extends the model without code: a renamed resource becomes a GPU.
test_resource_model_is_data if {
	spec := {"containers": [_c("a", {"example.com/accel": 8})]}
	_pod_gpus(spec) == 0
	model := object.union(data.ito.config.workload, {"gpu_resources": {"names": ["example.com/accel"]}})
	d := workload.decision with input as _input(_pod_with(spec)) with data.ito.config.workload as model
	d.gpus == 8
}

# Quantities: integers (numbers or strings, with a decimal SI suffix) count;
# anything else is WORKLOAD_COUNT_INVALID.
test_quantities[name] if {
	some name, tc in {
		"number": {"q": 8, "gpus": 8, "codes": set()},
		"string": {"q": "8", "gpus": 8, "codes": set()},
		"SI suffix": {"q": "1k", "gpus": 1000, "codes": {"WORKLOAD_GPUS_EXCEED_TICKET", "WORKLOAD_POD_GPUS_EXCEED_NODE"}},
		"milli": {"q": "500m", "gpus": 0, "codes": {"WORKLOAD_COUNT_INVALID"}},
		"negative": {"q": "-8", "gpus": 0, "codes": {"WORKLOAD_COUNT_INVALID"}},
		"negative number": {"q": -8, "gpus": 0, "codes": {"WORKLOAD_COUNT_INVALID"}},
		"fraction": {"q": 0.5, "gpus": 0, "codes": {"WORKLOAD_COUNT_INVALID"}},
		"binary suffix": {"q": "8Gi", "gpus": 0, "codes": {"WORKLOAD_COUNT_INVALID"}},
		"absurd": {"q": "1E", "gpus": 0, "codes": {"WORKLOAD_COUNT_INVALID"}},
	}
	d := _decide(_pod_with({"containers": [_c("a", {"nvidia.com/gpu": tc.q})]}))
	print(name, "got", d.gpus, {v.code | some v in d.violations})
	d.gpus == tc.gpus
	{v.code | some v in d.violations} == tc.codes
}

_pytorch(workers, elastic) := [
	_set("/review/kind", {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}),
	_set("/review/object", {"kind": "PyTorchJob", "spec": object.union(elastic, {"pytorchReplicaSpecs": {
		"Master": {"replicas": 1, "template": _tpl("8")},
		"Worker": {"replicas": workers, "template": _tpl("8")},
	}})}),
	_set("/object_ref/identity", "kubeflow.org/PyTorchJob/team-a/train-llama"),
]

# Replica fields are counts: a negative one would lower the total.
test_negative_replicas if {
	d := _decide(_pytorch(-2, {}))
	{v.code | some v in d.violations} == {"WORKLOAD_COUNT_INVALID"}
	d.violations[0].message == "spec.pytorchReplicaSpecs.Worker.replicas is -2: not a count"
}

test_elastic_bound_counts if {
	_codes(_pytorch(1, {})) == set()
	_codes(_pytorch(1, {"elasticPolicy": {"maxReplicas": 2}})) == {"WORKLOAD_GPUS_EXCEED_TICKET"}
	_codes(_pytorch(1, {"elasticPolicy": {"maxReplicas": "2"}})) == {"WORKLOAD_COUNT_INVALID"}
}

# KubeRay defaults maxReplicas to 2^31-1: with the autoscaler on, that is no count.
test_autoscaled_ray_without_max if {
	d := _decide([
		_set("/review/kind", {"group": "ray.io", "version": "v1", "kind": "RayCluster"}),
		_set("/review/object", {"kind": "RayCluster", "spec": {
			"enableInTreeAutoscaling": true,
			"headGroupSpec": {"template": _tpl(0)},
			"workerGroupSpecs": [{"replicas": 1, "minReplicas": 0, "maxReplicas": 2147483647, "template": _tpl("8")}],
		}}),
	])
	{v.code | some v in d.violations} == {"WORKLOAD_COUNT_INVALID"}
}

# Counting errors refuse whatever the ticket: a CPU-only object too.
test_invalid_without_gpus if {
	_codes([
		_set("/review/object/spec/parallelism", -3),
		_set("/review/object/spec/template/spec/containers/0/resources", {}),
		_set("/ticket", {"present": false}),
	]) == {"WORKLOAD_COUNT_INVALID"}
}
