package ito.workload_test

import data.ito.workload

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
		"the device list's prefix as a string": {"c": {"volumeMounts": [{"name": "v", "mountPath": "/var/run/nvidia-container-devicesall"}]}},
		"a directory beside the device list": {"c": {"volumeMounts": [{"name": "v", "mountPath": "/var/run/nvidia-container-devices-x"}]}},
		"the device list through ..": {"c": {"volumeMounts": [{"name": "v", "mountPath": "/var/run/x/../nvidia-container-devices/all"}]}},
		"the device list through .. above the root": {"c": {"volumeMounts": [{"name": "v", "mountPath": "/../../run/nvidia-container-devices/0"}]}},
		"the device list through .. and .": {"c": {"volumeMounts": [{"name": "v", "mountPath": "/var/./a/b/../../run//nvidia-container-devices/./cdi/nvidia.com/gpu/all"}]}},
		"the device list, a relative path": {"c": {"volumeMounts": [{"name": "v", "mountPath": "var/run/nvidia-container-devices/all"}]}},
		"/run's device list as a string": {"c": {"volumeMounts": [{"name": "v", "mountPath": "/run/nvidia-container-devicesall/"}]}},
		"host /dev/nvidia0": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "/dev/nvidia0"}}]}},
		"host /dev": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "/dev/"}}]}},
		"host /": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "/"}}]}},
		"host //dev//dri/./card0": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "//dev//dri/./card0"}}]}},
		"host /dev/char/195:0 (udev's link to nvidia0)": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "/dev/char/195:0"}}]}},
		"host /proc/1/root/dev": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "/proc/1/root/dev"}}]}},
		"CDI annotation": {"meta": {"annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}}},
		"NVIDIA NRI plugin annotation": {"meta": {"annotations": {"nvidia.cdi.k8s.io/container.a": "nvidia.com/gpu=all"}}},
		"a prefix without its slash": {"meta": {"annotations": {"nvidia.cdi.k8s.io": "nvidia.com/gpu=all"}}},
		"CDI device injector NRI plugin": {"meta": {"annotations": {"cdi.nri.io/container.a": "nvidia.com/gpu=all"}}},
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
		"out of the device list through ..": {"c": {"volumeMounts": [{"name": "v", "mountPath": "/var/run/nvidia-container-devices/../x"}]}},
		"out of the device list, deeper": {"c": {"volumeMounts": [{"name": "v", "mountPath": "/run/nvidia-container-devices/all/../../x/"}]}},
		"a shorter name": {"c": {"volumeMounts": [{"name": "v", "mountPath": "/var/run/nvidia-container-device"}]}},
		"the device list's name elsewhere": {"c": {"volumeMounts": [{"name": "v", "mountPath": "/opt/var/run/nvidia-container-devices/all"}]}},
		"a CDI name under another domain": {"meta": {"annotations": {"example.com/cdi.k8s.io": "x", "cdi.k8s.io.example.com/gpu": "x"}}},
		"a longer key than a prefix's": {"meta": {"annotations": {"devices.nri.iox": "x", "nvidia.cdi.k8s.io.example": "x"}}},
		"host /dev/infiniband (RDMA)": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "/dev/infiniband"}}]}},
		"host /data": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "/data"}}]}},
		"host /dev/shm": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": "/dev/shm"}}]}},
	}
	c := object.union({"name": "a", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 4}}}, object.get(tc, "c", {}))
	spec := object.union({"containers": [c]}, object.get(tc, "pod", {}))
	patch := array.concat(_pod_with(spec), [_set("/review/object/metadata", object.union({"name": "p"}, object.get(tc, "meta", {})))])
	got := _codes(patch)
	print(name, "got", got)
	got == set()
}

# Host device and mount injection that is not a GPU's, and paths too long or
# deep to judge: refused on a 4-GPU Pod and on one holding its whole node.
test_refused_whatever_the_pod_holds[name] if {
	deep := concat("/", ["", concat("/", [sprintf("s%v", [i]) | some i in numbers.range(1, 33)])])
	long := concat("", ["/", concat("", ["a" | some _ in numbers.range(1, 4096)])])
	some name, tc in {
		"NRI device injector, every container": {"meta": {"annotations": {"devices.noderesource.dev": "- path: /dev/nvidia0"}}},
		"NRI device injector, deprecated": {"meta": {"annotations": {"devices.nri.io/container.a": "- path: /dev/nvidia0"}}},
		"NRI CDI devices": {"meta": {"annotations": {"cdi-devices.nri.io/pod": "- nvidia.com/gpu=all"}}},
		"NRI mounts": {"meta": {"annotations": {"mounts.noderesource.dev/container.a": "- source: /"}}},
		"CRI-O devices": {"meta": {"annotations": {"devices.crio.io": "/dev/sda"}}},
		"CRI-O devices, an exact key": {"meta": {"annotations": {"io.kubernetes.cri-o.Devices": "/dev/sda"}}},
		"a mount path of 33 segments": {"c": {"volumeMounts": [{"name": "v", "mountPath": deep}]}},
		"a mount path of 4097 bytes": {"c": {"volumeMounts": [{"name": "v", "mountPath": long}]}},
		"a host path of 33 segments": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": deep}}]}},
		"a host path of 4097 bytes": {"pod": {"volumes": [{"name": "d", "hostPath": {"path": long}}]}},
	}
	c := object.union({"name": "a", "image": "i"}, object.get(tc, "c", {}))
	some gpus in [4, 8]
	spec := object.union({"containers": [object.union(c, {"resources": {"limits": {"nvidia.com/gpu": gpus}}})]}, object.get(tc, "pod", {}))
	patch := array.concat(_pod_with(spec), [_set("/review/object/metadata", object.union({"name": "p"}, object.get(tc, "meta", {})))])
	got := _codes(patch)
	print(name, gpus, "got", got)
	got == {"WORKLOAD_GPU_ACCESS_UNCOUNTED"}
}

# The bounds: 32 segments and 4096 bytes are still cleaned.
test_clean_bounds if {
	workload._clean(concat("/", ["", concat("/", ["s" | some _ in numbers.range(1, 32)])])) == concat("/", ["", concat("/", ["s" | some _ in numbers.range(1, 32)])])
	not workload._clean(concat("/", ["", concat("/", ["s" | some _ in numbers.range(1, 33)])]))
	count(workload._clean(concat("", ["/", concat("", ["a" | some _ in numbers.range(1, 4095)])]))) == 4096
	not workload._clean(concat("", ["/", concat("", ["a" | some _ in numbers.range(1, 4096)])]))
}

# Cleaning a path as Go's path.Clean does, from "/".
test_clean[p] if {
	some p, want in {
		"/": "/",
		"": "/",
		"//": "/",
		"/a/b/": "/a/b",
		"a/b": "/a/b",
		"/a//b/./c/.": "/a/b/c",
		"/a/b/../c": "/a/c",
		"/a/b/../../../c": "/c",
		"/..": "/",
		"/../a/..": "/",
		"/a/../b/../c/d/..": "/c",
		"/a/b/c/../../d/./e/..": "/a/d",
		"/x/../..a/b": "/..a/b",
		"/a/.../b": "/a/.../b",
	}
	got := workload._clean(p)
	print(p, "got", got)
	got == want
}

# Only whole devices hold a node: MIG slices, shared replicas and DRA
# extended resources count as GPUs but leave the node's other GPUs to reach
# (the base ticket: gpus_per_node 8).
test_whole_node_is_whole_devices[name] if {
	some name, tc in {
		"8 GPUs": {"limits": {"nvidia.com/gpu": 8}, "want": set()},
		"8 AMD GPUs": {"limits": {"amd.com/gpu": 8}, "want": set()},
		"8 Intel xe": {"limits": {"gpu.intel.com/xe": "8"}, "want": set()},
		"8 MIG slices": {"limits": {"nvidia.com/mig-1g.10gb": 8}, "want": {"WORKLOAD_GPU_ACCESS_UNCOUNTED"}},
		"8 shared replicas": {"limits": {"nvidia.com/gpu.shared": 8}, "want": {"WORKLOAD_GPU_ACCESS_UNCOUNTED"}},
		"8 AMD partitions": {"limits": {"amd.com/cpx_nps4": 8}, "want": {"WORKLOAD_GPU_ACCESS_UNCOUNTED"}},
		"8 of a DRA extended resource": {
			"limits": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 8},
			"want": {"WORKLOAD_GPU_ACCESS_UNCOUNTED"},
		},
		"4 GPUs and 4 MIG slices": {
			"limits": {"nvidia.com/gpu": 4, "nvidia.com/mig-3g.40gb": 4},
			"want": {"WORKLOAD_GPU_ACCESS_UNCOUNTED"},
		},
		"8 GPUs and a MIG slice: larger than a node": {
			"limits": {"nvidia.com/gpu": 8, "nvidia.com/mig-1g.10gb": 1},
			"want": {"WORKLOAD_POD_GPUS_EXCEED_NODE"},
		},
		"7 GPUs": {"limits": {"nvidia.com/gpu": 7}, "want": {"WORKLOAD_GPU_ACCESS_UNCOUNTED"}},
	}
	spec := {"containers": [object.union(_c("a", tc.limits), {"securityContext": {"privileged": true}})]}
	got := _codes(_pod_with(spec))
	print(name, "got", got)
	got == tc.want
}

# Whole devices by the kubelet's effective request: an init container's 8
# GPUs hold the node while it runs, and the sidecar's MIG slices do not.
test_whole_node_effective[name] if {
	some name, tc in {
		"an init container's 8": {
			"spec": {
				"initContainers": [_c("i", {"nvidia.com/gpu": 8})],
				"containers": [object.union(_c("a", {"nvidia.com/gpu": 8}), {"securityContext": {"privileged": true}})],
			},
			"want": set(),
		},
		"a sidecar's slices beside 4 GPUs": {
			"spec": {
				"initContainers": [_side("s", {"nvidia.com/mig-1g.10gb": 4})],
				"containers": [object.union(_c("a", {"nvidia.com/gpu": 4}), {"securityContext": {"privileged": true}})],
			},
			"want": {"WORKLOAD_GPU_ACCESS_UNCOUNTED"},
		},
	}
	got := _codes(_pod_with(tc.spec))
	print(name, "got", got)
	got == tc.want
}

# The whole list is data: an operator who time-slices nvidia.com/gpu drops it.
test_whole_is_data if {
	spec := {"containers": [object.union(_c("a", {"nvidia.com/gpu": 8}), {"securityContext": {"privileged": true}})]}
	_codes(_pod_with(spec)) == set()
	model := json.patch(data.ito.config.workload, [{"op": "replace", "path": "/gpu_resources/whole", "value": ["amd.com/gpu"]}])
	d := workload.decision with input as _input(_pod_with(spec)) with data.ito.config.workload as model
	{v.code | some v in d.violations} == {"WORKLOAD_GPU_ACCESS_UNCOUNTED"}
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

# The device-list directories are data an operator may write loosely: a
# directory with "..", a trailing slash or repeated slashes is cleaned
# before mounts are matched against it, and "/" refuses every mount
# (the mounts' pre-filter, a directory's last segment, is "" for it).
test_device_mount_dirs_are_cleaned[name] if {
	some name, tc in {
		"through ..": {"dirs": ["/opt/x/../../run/nvidia-container-devices"], "path": "/run/nvidia-container-devicesall", "want": {"WORKLOAD_GPU_ACCESS_UNCOUNTED"}},
		"trailing slash": {"dirs": ["//run//nvidia-container-devices/"], "path": "/run/nvidia-container-devicesall", "want": {"WORKLOAD_GPU_ACCESS_UNCOUNTED"}},
		"the root": {"dirs": ["/"], "path": "/data", "want": {"WORKLOAD_GPU_ACCESS_UNCOUNTED"}},
		"the root through ..": {"dirs": ["/a/.."], "path": "/data", "want": {"WORKLOAD_GPU_ACCESS_UNCOUNTED"}},
		"elsewhere": {"dirs": ["/opt/x/../../run/nvidia-container-devices"], "path": "/opt/nvidia-container-devices", "want": set()},
	}
	model := json.patch(data.ito.config.workload, [{"op": "replace", "path": "/device_mount_paths", "value": tc.dirs}])
	spec := {"containers": [object.union(_c("a", {"nvidia.com/gpu": 4}), {"volumeMounts": [{"name": "v", "mountPath": tc.path}]})]}
	d := workload.decision with input as _input(_pod_with(spec)) with data.ito.config.workload as model
	got := {v.code | some v in d.violations}
	print(name, "got", got)
	got == tc.want
}

# Found by a differential review of the workload policy's rewrite for speed
# (each decided otherwise by one of its drafts): an empty initContainers
# list is no init container (the whole devices count the ephemeral
# container's GPU: 9 of gpus_per_node 8 hold no node), and an exact device
# annotation key counts whatever its value, false too.
test_rewrite_regressions[name] if {
	priv := object.union(_c("a", {"nvidia.com/gpu": "8"}), {"securityContext": {"privileged": true}})
	some name, tc in {
		"empty initContainers, a GPU in an ephemeral container": {
			"patch": _pod_with({"initContainers": [], "containers": [priv], "ephemeralContainers": [_c("dbg", {"nvidia.com/gpu": "1"})]}),
			"want": {"WORKLOAD_GPU_ACCESS_UNCOUNTED", "WORKLOAD_POD_GPUS_EXCEED_NODE"},
		},
		"an exact device annotation key valued false": {
			"patch": array.concat(
				_pod_with({"containers": [_c("a", {"nvidia.com/gpu": 8})]}),
				[_set("/review/object/metadata", {"name": "p", "annotations": {"io.kubernetes.cri-o.Devices": false}})],
			),
			"want": {"WORKLOAD_GPU_ACCESS_UNCOUNTED"},
		},
	}
	got := _codes(tc.patch)
	print(name, "got", got)
	got == tc.want
}
