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

# A teardown UPDATE (Go's review.teardown) is allowed and binds nothing,
# whatever the run's state or the ticket's validity; without the fact the
# same UPDATE is decided as any other.
test_teardown if {
	ended := [
		_set("/review/operation", "UPDATE"), _set("/run/live", false),
		_set("/run/ended_by", "cancelled by train.cancel"),
	]
	_codes(ended) == {"WORKLOAD_RUN_NOT_LIVE"}
	d := _decide(array.concat(ended, [_set("/review/teardown", true)]))
	d.allow == true
	d.violations == []
	d.bind == "none"
	expired := [
		_set("/review/operation", "UPDATE"), _set("/ticket/expired", true),
	]
	_codes(expired) == {"WORKLOAD_TICKET_EXPIRED"}
	_decide(array.concat(expired, [_set("/review/teardown", true)])).allow == true
	privileged := [
		_set("/review/operation", "UPDATE"),
		_set("/review/object/spec/template/spec/containers/0/securityContext", {"privileged": true}),
		_set("/review/object/spec/template/spec/containers/0/resources", {}),
	]
	_codes(privileged) == {"WORKLOAD_GPU_ACCESS_UNCOUNTED"}
	_decide(array.concat(privileged, [_set("/review/teardown", true)])).allow == true
}
