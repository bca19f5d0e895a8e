package ito.workload_test

import data.ito.workload

# The grace bound applies to every pod set of a GPU object, and to nothing
# else: a CPU object, a teardown UPDATE.
test_grace_every_pod_set if {
	d := _decide([
		_set("/review/kind", {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"}),
		_set("/review/object", {"spec": {"replicatedJobs": [
			{"name": "w", "template": {"spec": {"template": {"spec": {
				"terminationGracePeriodSeconds": 601,
				"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}],
			}}}}},
			{"name": "d", "template": {"spec": {"template": {"spec": {
				"terminationGracePeriodSeconds": 600,
				"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}],
			}}}}},
		]}}),
	])
	[v.message | some v in d.violations] == ["spec.replicatedJobs.0.template.spec.template.spec.terminationGracePeriodSeconds is 601 s, at most 600 s"]
	{v.code | some v in d.violations} == {"WORKLOAD_GRACE_PERIOD_TOO_LONG"}
}

test_grace_bare_pod if {
	_codes(array.concat(_pod, [_set("/review/object/spec/terminationGracePeriodSeconds", 86400)])) == {"WORKLOAD_GRACE_PERIOD_TOO_LONG"}
}

test_grace_not_gpu_or_teardown if {
	long := _set("/review/object/spec/template/spec/terminationGracePeriodSeconds", 86400)
	_codes(array.concat(_no_gpus, [long])) == set()
	_codes([long, _set("/review/teardown", true)]) == set()
}

# The bound is the bundle's.
test_grace_bound_is_data if {
	long := _set("/review/object/spec/template/spec/terminationGracePeriodSeconds", 3600)
	d := workload.decision with input as _input([long])
		with data.ito.config.workload.max_termination_grace_seconds as 7200
	d.violations == []
}
