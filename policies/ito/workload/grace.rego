package ito.workload

# How long a GPU Pod outlives its delete. A deleted Pod keeps its GPUs for
# its termination grace period while replacements start on the same ticket
# (a Job's controller replaces a terminating Pod by default; a re-created
# object of the same name starts its own), so the grace period bounds how
# long a ticket's GPUs can be held twice. The pod template's value is
# checked here; a DELETE or an eviction asking for longer is refused by the
# apiserver's itogate-pod-deletion policy, generated from the same bound.

import data.ito.lib

# METADATA
# title: Termination grace period too long
# description: >-
#   A pod template of an object that asks for GPUs sets
#   terminationGracePeriodSeconds above
#   data.ito.config.workload.max_termination_grace_seconds (seconds): its
#   deleted Pods would keep their GPUs that long beside their replacements.
# custom:
#   code: WORKLOAD_GRACE_PERIOD_TOO_LONG
#   gate: workload
#   fix: >-
#     Set terminationGracePeriodSeconds at or below the bundle's bound
#     (checkpoint more often if a final save needs longer), or ask the
#     policy owners to raise max_termination_grace_seconds.
deny contains v if {
	input.review.keys.terminationGracePeriodSeconds == true
	_gated
	some s in pod_sets
	g := s.spec.terminationGracePeriodSeconds
	g > _model.max_termination_grace_seconds
	v := lib.violation(rego.metadata.rule(), sprintf("%v.terminationGracePeriodSeconds is %v s, at most %v s", [
		_where(s), g, _model.max_termination_grace_seconds,
	]))
}
