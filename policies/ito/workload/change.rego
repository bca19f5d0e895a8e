package ito.workload

# Verbs and subresources that change what runs: an UPDATE that swaps the
# ticket of an object, and the scale subresource of a workload kind (whose
# review carries only the replica count, not the object's GPUs).

import data.ito.lib

# A teardown UPDATE (input.review.teardown, from Go): the object's spec is
# the stored one's but for suspend members set to true, with the same
# ticket and controller — a finalizer, label or annotation change, or a
# suspend. It changes nothing that runs, so it is allowed and binds
# nothing whatever the run's state or the ticket's validity: a cancelled
# run's Job can always be suspended and its finalizers removed.
_teardown if input.review.teardown == true

# METADATA
# title: Ticket changed on UPDATE
# description: >-
#   An UPDATE replaces the ticket annotation the stored object carries with
#   another: the object stays bound to the run of its first ticket, and a
#   second ticket would be spent on it (Go compares the old object's
#   annotation with the new one: input.ticket.changed).
# custom:
#   code: WORKLOAD_TICKET_CHANGED
#   gate: workload
#   fix: Keep the object's ticket; a workload for another run is a new object with that run's ticket.
deny contains v if {
	input.ticket.changed == true
	v := lib.violation(rego.metadata.rule(), sprintf("the UPDATE replaces the ticket of %v", [
		lib.show(input.object_ref.identity),
	]))
}

_scale_replicas(o) := object.get(o, ["spec", "replicas"], 0)

# METADATA
# title: Scale-up through the scale subresource
# description: >-
#   A PATCH or PUT of <kind>/scale that raises the replicas of a workload
#   kind: its review carries only the replica count, not the GPUs of each
#   replica or the ticket, so the new total cannot be counted. Scaling down
#   or to the same count is allowed.
# custom:
#   code: WORKLOAD_SCALE_UNCOUNTED
#   gate: workload
#   fix: Change the replicas on the object itself (an UPDATE the webhook counts), within the run's ticket.
deny contains v if {
	input.review.sub_resource == "scale"
	new := _scale_replicas(_obj)
	old := _scale_replicas(object.get(input.review, "old_object", {}))
	_count_ok(new)
	_count_ok(old)
	new > old
	v := lib.violation(rego.metadata.rule(), sprintf("%v/scale raises the replicas of %v from %v to %v", [
		object.get(input.review, ["resource", "resource"], ""), lib.show(input.review.name), old, new,
	]))
}

# METADATA
# title: A count that is no count
# description: >-
#   A replica field, a GPU quantity or a DRA device count that is negative,
#   not an integer, or above data.ito.config.workload.max_count: it would
#   lower or overflow the total, so the object is refused whatever its ticket.
# custom:
#   code: WORKLOAD_COUNT_INVALID
#   gate: workload
#   fix: Write replica fields and GPU quantities as non-negative integers within the bundle's max_count.
deny contains v if {
	input.review.sub_resource == "scale"
	some o in [_obj, object.get(input.review, "old_object", {})]
	not _count_ok(_scale_replicas(o))
	v := lib.violation(rego.metadata.rule(), sprintf("scale replicas %v: not a count", [_scale_replicas(o)]))
}
