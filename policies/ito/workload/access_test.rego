package ito.workload_test

# GPU access without a count, per path; each refused on a 4-GPU Pod and
# allowed on a Pod holding its whole node (8 of gpus_per_node 8).
test_uncounted_access[name] if {
	some name, tc in {
		"device variable": {"c": {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}},
		"device variable, a list": {"c": {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0,1"}]}},
		"device variable from a reference": {"c": {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k"}}}]}},
		"AMD device variable": {"c": {"env": [{"name": "AMD_VISIBLE_DEVICES", "value": "all"}]}},
		"privileged": {"c": {"securityContext": {"privileged": true}}},
		"the toolkit's device-list directory": {"c": {"volumeMounts": [{"name": "v", "mountPath": "/var/run/nvidia-container-devices/all"}]}},
		"the device-list directory, spelt loosely": {"c": {"volumeMounts": [{"name": "v", "mountPath": "//run/./nvidia-container-devices/"}]}},
		"host /dev/nvidia0": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "/dev/nvidia0"}}]}},
		"host /dev": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "/dev/"}}]}},
		"host /": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "/"}}]}},
		"host //dev//dri/./card0": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "//dev//dri/./card0"}}]}},
		"CDI annotation": {"meta": {"annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}}},
	}
	c := object.union({"name": "a", "image": "i"}, object.get(tc, "c", {}))
	some gpus, want in {4: {"WORKLOAD_GPU_ACCESS_UNCOUNTED"}, 8: set()}
	spec := object.union({"containers": [object.union(c, {"resources": {"limits": {"nvidia.com/gpu": gpus}}})]}, object.get(tc, "pod", {}))
	patch := array.concat(_pod_with(spec), [_set("/review/object/metadata", object.union({"name": "p"}, object.get(tc, "meta", {})))])
	got := _codes(patch)
	print(name, gpus, "got", got)
	got == want
}

# What reaches no GPU.
test_counted_or_harmless[name] if {
	some name, tc in {
		"void": {"c": {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]}},
		"none": {"c": {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]}},
		"empty": {"c": {"env": [{"name": "NVIDIA_VISIBLE_DEVICES"}]}},
		"CUDA_VISIBLE_DEVICES only hides devices": {"c": {"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2,3,4,5,6,7"}]}},
		"unprivileged": {"c": {"securityContext": {"privileged": false, "capabilities": {"add": ["IPC_LOCK"]}}}},
		"a directory beside the device list": {"c": {"volumeMounts": [{"name": "v", "mountPath": "/var/run/nvidia-container-devices-x"}]}},
		"host /dev/infiniband (RDMA)": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "/dev/infiniband"}}]}},
		"host /data": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "/data"}}]}},
		"host /dev/shm": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "/dev/shm"}}]}},
	}
	c := object.union({"name": "a", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 4}}}, object.get(tc, "c", {}))
	spec := object.union({"containers": [c]}, object.get(tc, "pod", {}))
	got := _codes(_pod_with(spec))
	print(name, "got", got)
	got == set()
}

# Every container is looked at: init, sidecar, ephemeral; in every pod set.
test_access_every_container if {
	env := [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
	_codes(_pod_with({
		"initContainers": [{"name": "i", "image": "i", "env": env}],
		"containers": [_c("a", {"nvidia.com/gpu": 4})],
	})) == {"WORKLOAD_GPU_ACCESS_UNCOUNTED"}
	d := _decide([_set("/review/object/spec/template/spec/containers/0/env", env), _set("/review/object/spec/template/spec/containers/0/resources", {})])
	d.violations[0].message == `spec.template.spec: container "trainer" sets NVIDIA_VISIBLE_DEVICES=all`
	{v.code | some v in d.violations} == {"WORKLOAD_GPU_ACCESS_UNCOUNTED"}
}

# A ticket that does not verify holds no node.
test_whole_node_needs_a_valid_ticket if {
	spec := {"containers": [object.union(_c("a", {"nvidia.com/gpu": 8}), {"securityContext": {"privileged": true}})]}
	_codes(array.concat(_pod_with(spec), [_set("/ticket", {"present": true, "verified": false, "error": "signature"})])) == {
		"WORKLOAD_TICKET_INVALID", "WORKLOAD_GPU_ACCESS_UNCOUNTED",
	}
}
