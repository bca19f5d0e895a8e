package ito.workload_test

import data.ito.workload

_base := data.ito.testdata.workload.input

_set(path, value) := {"op": "add", "path": path, "value": value}

_decide(patch) := d if {
	d := workload.decision with input as _input(patch)
}

# The base input changed by patch, with review.keys as Go sets it: every
# member name of review.object at any depth.
_input(patch) := json.patch(patched, [_set("/review/keys", _member_names(patched.review.object))]) if {
	patched := json.patch(_base, patch)
}

_member_names(obj) := {k: true |
	walk(obj, [path, _])
	count(path) > 0
	k := path[count(path) - 1]
	is_string(k)
}

_codes(patch) := {v.code | some v in _decide(patch).violations}

_no_gpus := [_set("/review/object/spec/template/spec/containers/0/resources", {})]

_pod := [
	_set("/review/kind", {"group": "", "version": "v1", "kind": "Pod"}),
	_set("/review/object", {"kind": "Pod", "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}),
	_set("/object_ref", {"identity": "/Pod/team-a/p", "uid": "pod-uid", "owner_uid": ""}),
]

# The cases (data.ito.testdata.workload.cases) are shared with Go's
# TestEveryCodeIsProduced, which checks every workload code is produced.
test_workload_codes[name] if {
	some tc in data.ito.testdata.workload.cases
	name := tc.name
	got := _codes(tc.patch)
	print(name, "got", got)
	got == {c | some c in tc.codes}
}

test_bind if {
	_decide([]).bind == "root"
	_decide(_no_gpus).bind == "none"
	_decide(_pod).bind == "root"
	_decide(array.concat(_pod, [_set("/object_ref/owner_uid", "job-uid")])).bind == "leaf"
	_decide([_set("/object_ref/owner_uid", "jobset-uid")]).bind == "child"
	_decide([_set("/review/sub_resource", "scale")]).bind == "none"
}

# Every kind of the table, with its pod sets multiplied out.
test_gpus_per_kind[name] if {
	some name, tc in _kinds
	got := _decide([_set("/review/kind", tc.kind), _set("/review/object", tc.object)]).gpus
	print(name, "got", got)
	got == tc.want
}

_tpl(gpus) := {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}

_kinds := {
	"JobSet: replicas × parallelism × per Pod": {
		"kind": {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"},
		"object": {"spec": {"replicatedJobs": [
			{"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "template": _tpl("8")}}},
			{"name": "driver", "template": {"spec": {"template": _tpl(1)}}},
		]}},
		"want": 65,
	},
	"PyTorchJob: master + workers": {
		"kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
		"object": {"spec": {"pytorchReplicaSpecs": {
			"Master": {"replicas": 1, "template": _tpl("8")},
			"Worker": {"replicas": 3, "template": _tpl("8")},
		}}},
		"want": 32,
	},
	"RayCluster: head + replicas × hosts, no autoscaler (maxReplicas is not read)": {
		"kind": {"group": "ray.io", "version": "v1", "kind": "RayCluster"},
		"object": {"spec": {
			"headGroupSpec": {"template": _tpl(0)},
			"workerGroupSpecs": [
				{"replicas": 1, "minReplicas": 0, "maxReplicas": 2147483647, "numOfHosts": 2, "template": _tpl("8")},
				{"replicas": 1, "minReplicas": 2, "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"amd.com/gpu": "1"}}}]}}},
			],
		}},
		"want": 18,
	},
	"RayCluster: with the autoscaler, maxReplicas × hosts": {
		"kind": {"group": "ray.io", "version": "v1", "kind": "RayCluster"},
		"object": {"spec": {
			"enableInTreeAutoscaling": true,
			"headGroupSpec": {"template": _tpl(0)},
			"workerGroupSpecs": [
				{"replicas": 1, "maxReplicas": 4, "numOfHosts": 2, "template": _tpl("8")},
				{"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"amd.com/gpu": "1"}}}]}}},
			],
		}},
		"want": 66,
	},
	"RayJob: its cluster spec and its submitter": {
		"kind": {"group": "ray.io", "version": "v1", "kind": "RayJob"},
		"object": {"spec": {
			"rayClusterSpec": {
				"headGroupSpec": {"template": _tpl("1")},
				"workerGroupSpecs": [{"replicas": 2, "template": _tpl("4")}],
			},
			"submitterPodTemplate": _tpl(1),
		}},
		"want": 10,
	},
	"RayService: its cluster config": {
		"kind": {"group": "ray.io", "version": "v1", "kind": "RayService"},
		"object": {"spec": {"rayClusterConfig": {
			"headGroupSpec": {"template": _tpl("0")},
			"workerGroupSpecs": [{"replicas": 3, "minReplicas": 1, "template": _tpl("2")}],
		}}},
		"want": 6,
	},
	"PyTorchJob: elasticPolicy.maxReplicas bounds the workers": {
		"kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
		"object": {"spec": {
			"elasticPolicy": {"minReplicas": 1, "maxReplicas": 4},
			"pytorchReplicaSpecs": {
				"Master": {"replicas": 1, "template": _tpl("8")},
				"Worker": {"replicas": 2, "template": _tpl("8")},
			},
		}},
		"want": 40,
	},
	"PaddleJob: elasticPolicy.maxReplicas bounds the workers": {
		"kind": {"group": "kubeflow.org", "version": "v1", "kind": "PaddleJob"},
		"object": {"spec": {
			"elasticPolicy": {"maxReplicas": 3},
			"paddleReplicaSpecs": {"Worker": {"replicas": 1, "template": _tpl("8")}},
		}},
		"want": 24,
	},
	"MPIJob: launcher + workers, replicas default 1": {
		"kind": {"group": "kubeflow.org", "version": "v2beta1", "kind": "MPIJob"},
		"object": {"spec": {"mpiReplicaSpecs": {
			"Launcher": {"template": _tpl(0)},
			"Worker": {"replicas": 4, "template": _tpl("8")},
		}}},
		"want": 32,
	},
	"TFJob, XGBoostJob, JAXJob: their replica specs": {
		"kind": {"group": "kubeflow.org", "version": "v1", "kind": "TFJob"},
		"object": {"spec": {"tfReplicaSpecs": {"Chief": {"template": _tpl(1)}, "Worker": {"replicas": 2, "template": _tpl(2)}}}},
		"want": 5,
	},
	"XGBoostJob": {
		"kind": {"group": "kubeflow.org", "version": "v1", "kind": "XGBoostJob"},
		"object": {"spec": {"xgbReplicaSpecs": {"Master": {"template": _tpl(1)}, "Worker": {"replicas": 2, "template": _tpl(1)}}}},
		"want": 3,
	},
	"JAXJob": {
		"kind": {"group": "kubeflow.org", "version": "v1", "kind": "JAXJob"},
		"object": {"spec": {"jaxReplicaSpecs": {"Worker": {"replicas": 4, "template": _tpl(4)}}}},
		"want": 16,
	},
	"Job: parallelism bounded by completions": {
		"kind": {"group": "batch", "version": "v1", "kind": "Job"},
		"object": {"spec": {"parallelism": 8, "completions": 2, "template": _tpl(4)}},
		"want": 8,
	},
	"Job: parallelism absent is 1": {
		"kind": {"group": "batch", "version": "v1", "kind": "Job"},
		"object": {"spec": {"template": _tpl(4)}},
		"want": 4,
	},
	"JobSet: completions bound each replicated job's parallelism": {
		"kind": {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"},
		"object": {"spec": {"replicatedJobs": [
			{"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 1, "template": _tpl("8")}}},
		]}},
		"want": 16,
	},
	"Pod: init container larger than the containers": {
		"kind": {"group": "", "version": "v1", "kind": "Pod"},
		"object": {"spec": {
			"initContainers": [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
			"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
		}},
		"want": 4,
	},
	"unknown kind": {
		"kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
		"object": {"spec": {"template": _tpl("8")}},
		"want": 0,
	},
}

# Only a listed controller identity makes a child: the same Pod naming the
# bound Job is admitted from the Job controller, refused from a tenant.
test_child_creator if {
	pod := array.concat(_pod, [
		_set("/object_ref/owner_uid", "job-uid"),
		_set("/binding", {"bound": true, "identity": "batch/Job/team-a/train-llama", "uids": ["job-uid"]}),
	])
	_codes(array.concat(pod, [_set("/review/user", "system:serviceaccount:kube-system:job-controller")])) == set()
	_codes(pod) == {"WORKLOAD_CHILD_CREATOR_UNTRUSTED"}
	_codes(array.concat(pod, [_set("/review/user", "system:serviceaccount:team-a:default")])) == {"WORKLOAD_CHILD_CREATOR_UNTRUSTED"}
}

# The cap is what the run holds in the ledger (input.run.gpus): a run a
# stage advance grew from the ticket's 16 GPUs to 32 gets a Job of 4 × 8;
# without the ledger's figure the ticket's world_size caps it.
_four_pods := [_set("/review/object/spec/parallelism", 4), _set("/review/object/spec/completions", 4)]

test_gpu_cap_follows_the_run_s_gpus[name] if {
	some name, tc in {
		"grown run holds 32": {"patch": [_set("/run/gpus", 32)], "denied": false},
		"run holds the ticket's 16": {"patch": [_set("/run/gpus", 16)], "denied": true},
		"no ledger figure: the ticket's 16": {"patch": [], "denied": true},
		"a run of another account does not lend its GPUs": {
			"patch": [_set("/run/gpus", 32), _set("/run/account", "acct_b")],
			"denied": true,
		},
	}
	got := "WORKLOAD_GPUS_EXCEED_TICKET" in _codes(array.concat(_four_pods, tc.patch))
	print(name, "got", got)
	got == tc.denied
}

test_gpu_cap_message_names_the_run_s_gpus if {
	d := _decide(array.concat(_four_pods, [_set("/run/gpus", 24)]))
	[v.message | some v in d.violations; v.code == "WORKLOAD_GPUS_EXCEED_TICKET"] == ["32 GPUs requested, 24 admitted"]
}

# An input without review.sub_resource (an input Go would not write, or a
# reviewer's) is a review of the main resource: the ticket checks apply.
test_gated_without_sub_resource if {
	inp := json.patch(_input([_set("/ticket", {"present": false, "changed": false})]), [{"op": "remove", "path": "/review/sub_resource"}])
	d := workload.decision with input as inp
	{v.code | some v in d.violations} == {"WORKLOAD_TICKET_MISSING"}
	d.bind == "root"
}
