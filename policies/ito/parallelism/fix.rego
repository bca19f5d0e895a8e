# The fix a deny names (Go's layout search, confirmed by these rules) as data and as text.
# Part of package ito.parallelism (see parallelism.rego for the model and its inputs).
package ito.parallelism

# ---------------------------------------------------------------------------
# The fix: the nearest layout that passes every hard rule and fits memory
# with the margin a declared layout needs, and the passing layout of least
# estimated cost. gatekeeper/plan searches it in Go (candidates over tp,
# pp, v, cp, ep, etp, micro batch, ZeRO stage and recompute on the booked
# hardware, else on the smallest GPU count that has one; distance = number
# of changed knobs; ties to fewer waste warnings, the smaller bubble, no
# full recompute, less memory, less communication), only when the
# manifest's layout fails a hard rule, and hands it over as
# input.facts.parallelism.fix after confirm (below) found no deny and no
# memory above the margin on the fixed manifest's exact facts. An input
# without it (opa test, opa eval without facts) names no fix.
_fix := input.facts.parallelism.fix

# METADATA
# title: Layout confirmation
# description: >-
#   The codes of the parallelism gate's denies for the input's layout, and
#   whether its memory estimate is above the warn margin
#   (memory_warn_fraction of the GPU's memory): the narrow query by which
#   itogate confirms each layout its search proposes (a fix, a plan) before
#   returning it. A proposal with a deny, or above the margin, is never
#   returned.
confirm := {
	"deny": sort([v.code | some v in deny]),
	"memory_over_margin": _memory_over_margin,
}

_memory_over_margin := _f.memory_gb > (_cfg.memory_warn_fraction * _gpu.memory_gb)

default _memory_over_margin := true

# the knobs a fix may change, in the order its changes are listed
_knobs := ["tp", "pp", "cp", "ep", "etp", "v", "mbs", "zero_stage", "checkpointing", "precision", "schedule"]

# ---------------------------------------------------------------------------
# The fix, as data (estimates.fix_layout) and as text (each deny's fix)

_manifest_names := {
	"tp": "tensor", "pp": "pipeline", "cp": "context", "ep": "expert", "etp": "expert_tensor", "v": "virtual_stages",
	"mbs": "micro_batch_size", "zero_stage": "zero_stage", "checkpointing": "activation_checkpointing",
	"precision": "precision", "schedule": "pipeline_schedule",
}

_fix_layout := object.union(
	{"on_booked_hardware": true, "nodes": _nodes, "world_size": _world_size},
	_fix_summary,
) if _fix.on_booked_hardware

_fix_layout := object.union(
	{"on_booked_hardware": false, "nodes": _fix.layout.nodes, "world_size": _world(_fix.layout)},
	_fix_summary,
) if {
	not _fix.on_booked_hardware
	_fix.layout
}

_fix_layout := {"on_booked_hardware": false, "searched_nodes": _searched_nodes} if {
	_fix
	not _fix.layout
	not _fix.budget_exceeded
}

_fix_layout := {"on_booked_hardware": false, "budget_exceeded": true, "evaluated_layouts": _fix.evaluated} if {
	_fix.budget_exceeded
	not _fix.layout
}

# the fix's layout and figures; with Go's fix, the figures are the exact
# facts of the fixed manifest (the ones its confirmation judged), and the
# best layout by estimated step time and cost comes with them
_fix_summary := object.union(_layout_summary(_fix.layout, _fix.figures), {"best": best}) if {
	b := _fix.best
	best := object.union(_layout_summary(b.layout, b.figures), {"nodes": b.layout.nodes, "estimates": b.estimates})
} else := _layout_summary(_fix.layout, _fix.figures)

_layout_summary(l, fig) := {
	"tensor": l.tp, "pipeline": l.pp, "context": l.cp, "expert": l.ep, "expert_tensor": l.etp, "virtual_stages": l.v,
	"data": fig.data, "micro_batch_size": l.mbs, "zero_stage": l.zero_stage,
	"activation_checkpointing": l.checkpointing, "precision": l.precision, "pipeline_schedule": l.schedule,
	"changes": _changes(l), "changed_knobs": count(_changes(l)),
	"microbatches": fig.microbatches, "bubble_fraction": fig.bubble_fraction,
	"model_states_gb_per_gpu": fig.model_states_gb_per_gpu, "memory_gb_per_gpu": fig.memory_gb_per_gpu,
	"dp_comm_compute_ratio": fig.dp_comm_compute_ratio,
}

_changes(l) := [sprintf("%s %v → %v", [_manifest_names[k], _layout[k], l[k]]) |
	some k in _knobs
	l[k] != _layout[k]
]

_searched_nodes := _fix.searched_nodes

_hardware_text(nodes) := sprintf("%d × %d %s", [nodes, _gpn, _hw.gpu_type])

# one format per shape (expert_tensor is shown only where it is used): a
# layout's text is one sprintf, not one per knob
_layout_text(l) := sprintf(
	concat("", [
		"tensor=%d, pipeline=%d, context=%d, expert=%d, virtual_stages=%d, data=%d, micro_batch_size=%d,",
		" zero_stage=%d, activation_checkpointing=%s, precision=%s",
	]),
	[l.tp, l.pp, l.cp, l.ep, l.v, _dp(l), l.mbs, l.zero_stage, l.checkpointing, l.precision],
) if {
	l.etp == 1
} else := sprintf(
	concat("", [
		"tensor=%d, pipeline=%d, context=%d, expert=%d, expert_tensor=%d, virtual_stages=%d, data=%d,",
		" micro_batch_size=%d, zero_stage=%d, activation_checkpointing=%s, precision=%s",
	]),
	[l.tp, l.pp, l.cp, l.ep, l.etp, l.v, _dp(l), l.mbs, l.zero_stage, l.checkpointing, l.precision],
)

_change_text(l) := "no knob changes" if count(_changes(l)) == 0

else := sprintf("%d change: %s", [1, _changes(l)[0]]) if count(_changes(l)) == 1

else := sprintf("%d changes: %s", [count(_changes(l)), concat(", ", _changes(l))])

# Always defined, so that a deny never disappears for want of a fix. Each
# branch computes its text in the body: an undefined part falls through.
_fix_text := text if {
	_fix.on_booked_hardware
	text := sprintf("nearest passing layout on %s (%s): %s%s", [
		_hardware_text(_nodes), _change_text(_fix.layout), _layout_text(_fix.layout), _best_text,
	])
} else := text if {
	l := _fix.layout
	text := sprintf(
		concat("", [
			"no layout on %s passes every parallelism rule;",
			" the smallest GPU count that has one is %d GPUs (%s): %s",
		]),
		[_hardware_text(_nodes), _world(l), _hardware_text(l.nodes), _layout_text(l)],
	)
} else := text if {
	_fix.budget_exceeded
	text := sprintf("the layout search stopped at its budget of %d layouts on %s before finding one that passes", [
		_fix.evaluated, _hardware_text(_nodes),
	])
} else := text if {
	_fix
	nodes := [n | some n in _searched_nodes; n != _nodes]
	count(nodes) > 0
	text := sprintf("no layout on %s passes every parallelism rule, nor on %s nodes of %d %s", [
		_hardware_text(_nodes), concat(", ", [sprintf("%d", [n]) | some n in nodes]), _gpn, _hw.gpu_type,
	])
} else := text if {
	_fix
	text := sprintf(
		"no layout on %s passes every parallelism rule, and no other GPU count can (global batch or GPU memory)",
		[_hardware_text(_nodes)],
	)
} else := concat("", [
	"no layout search: the GPU type, fabric or model figures are unknown or inconsistent",
	" (see the other violations), or the input carries no training facts",
])

# Go's fix also names the passing layout of least estimated cost when it
# is not the nearest one
_best_text := sprintf("; least estimated cost: %s, %v s per step", [
	_layout_text(_fix.best.layout), _fix.best.estimates.step_seconds,
]) if {
	_fix.best.layout != _fix.layout
} else := ""

_with_fix(hint) := sprintf("%s. Or: %s", [_fix_text, hint])
