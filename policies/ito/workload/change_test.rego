package ito.workload_test

_scale(old, new) := [
	_set("/review/operation", "UPDATE"),
	_set("/review/sub_resource", "scale"),
	_set("/review/kind", {"group": "autoscaling", "version": "v1", "kind": "Scale"}),
	_set("/review/resource", {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"}),
	_set("/review/object", {"kind": "Scale", "metadata": {"name": "train-llama"}, "spec": new}),
	_set("/review/old_object", {"kind": "Scale", "metadata": {"name": "train-llama"}, "spec": old}),
	_set("/ticket", {"present": false}),
]

test_scale[name] if {
	some name, tc in {
		"up": {"old": {"replicas": 2}, "new": {"replicas": 3}, "codes": {"WORKLOAD_SCALE_UNCOUNTED"}},
		"from nothing": {"old": {}, "new": {"replicas": 1}, "codes": {"WORKLOAD_SCALE_UNCOUNTED"}},
		"same": {"old": {"replicas": 2}, "new": {"replicas": 2}, "codes": set()},
		"down": {"old": {"replicas": 2}, "new": {"replicas": 0}, "codes": set()},
		"negative": {"old": {"replicas": 2}, "new": {"replicas": -4}, "codes": {"WORKLOAD_COUNT_INVALID"}},
		"not a number": {"old": {"replicas": 2}, "new": {"replicas": "9"}, "codes": {"WORKLOAD_COUNT_INVALID"}},
	}
	got := _codes(_scale(tc.old, tc.new))
	print(name, "got", got)
	got == tc.codes
}

test_scale_message if {
	d := _decide(_scale({"replicas": 2}, {"replicas": 4}))
	d.violations[0].message == `pytorchjobs/scale raises the replicas of "train-llama" from 2 to 4`
	d.bind == "none"
}

# A swapped ticket is refused on any object, with or without GPUs; an
# unchanged one is not.
test_ticket_changed if {
	_codes([_set("/review/operation", "UPDATE"), _set("/ticket/changed", true)]) == {"WORKLOAD_TICKET_CHANGED"}
	_codes([
		_set("/review/operation", "UPDATE"), _set("/ticket/changed", true),
		_set("/review/object/spec/template/spec/containers/0/resources", {}),
	]) == {"WORKLOAD_TICKET_CHANGED"}
	_codes([_set("/review/operation", "UPDATE"), _set("/ticket/changed", false)]) == set()
	d := _decide([_set("/ticket/changed", true)])
	d.violations[0].message == `the UPDATE replaces the ticket of "batch/Job/team-a/train-llama"`
}
