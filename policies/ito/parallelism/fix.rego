# The fix search (the nearest passing layout on the booked hardware) and the fix as data and as text.
# Part of package ito.parallelism (see parallelism.rego for the model and its inputs).
package ito.parallelism

import data.ito.lib

# ---------------------------------------------------------------------------
# The fix search: the nearest layout on the same hardware that passes every
# hard rule. Runs only when a deny asks for its fix (never on an allow).
#
# A candidate must also fit memory with the margin of a declared layout
# (_fix_memory_fits_at). Candidates keep the model, the global batch and the sequence; they vary
# tp (divisors of the NVLink domain that fit the heads), cp (bundle list,
# sequence permitting), pp (bundle list, dividing W, at most layers + 2),
# v (bundle list, equal chunks), ep (divisors of the experts up to
# fix_search.max_expert), micro batch (as given, or 1), ZeRO stage (0-3)
# and activation checkpointing (as given, selective or full); an unsupported
# precision is replaced by the nearest supported one. Distance = number of
# changed knobs; ties go to fewer waste warnings (bubble, memory, comm above
# their warn thresholds), then the smaller bubble, then no full recompute,
# then less memory, then less communication.
#
# Search by distance 0, 1, 2, ... fix_search.max_changed_knobs (else-chain:
# a farther level is only evaluated when the nearer one is empty). Past the
# last level, the fix is the nearest dominant completion of a (tp, pp, cp)
# triple: largest v and ep, micro batch 1, full recompute and the
# least-memory ZeRO stage. Every rule is monotone in those knobs, so a triple
# whose dominant completion fails has no passing completion at all, and when
# no triple has one no layout on this hardware passes: then the smallest GPU
# count that has one is searched (fix_search.gpu_count_probes node counts
# from a memory lower bound).

_is_searchable if {
	_gpu
	_fabric
	_is_model_consistent
	_layout
	_ep_values
	_fix_precision
}

_fix := f if {
	_is_searchable
	f := _fix_result
}

_fix_result := {"on_booked_hardware": true, "layout": l} if {
	_can_fit(_nodes)
	l := _nearest(_nodes)
} else := {"on_booked_hardware": false, "layout": l} if {
	l := _smallest_fit
} else := {"on_booked_hardware": false}

# precision the candidates use: the manifest's, or the nearest one the GPU supports
_fix_precision := _layout.precision if not _is_unsupported(_layout.precision)

else := p if {
	supported := [q | some q in _precision_fallbacks[_layout.precision]; not _is_unsupported(q)]
	p := supported[0]
}

_precision_fallbacks := {
	"nvfp4": ["mxfp8", "fp8", "bf16", "fp16"],
	"mxfp8": ["fp8", "bf16", "fp16"],
	"fp8": ["bf16", "fp16"],
	"bf16": ["fp16"],
	"fp16": ["fp32"],
	"fp32": [],
}

_changed(a, b) := 0 if a == b

else := 1

_tp_values := {t |
	some t in ({_layout.tp} | {d | some d in numbers.range(1, _domain); _domain % d == 0})
	not _tp_exceeds_domain_at(t)
	not _heads_indivisible_at(t)
	_is_kv_compatible(t)
}

_cp_values := {c |
	some c in ({1, _layout.cp} | {d |
		some d in _search.context_degrees
		_seq >= _cfg.context_parallel_min_sequence
		_seq / d >= _search.min_tokens_per_context_rank
	})
	not _cp_seq_indivisible_at(c)
}

_pp_values(nodes) := {p |
	some p in array.concat([_layout.pp], _search.pipeline_degrees)
	(nodes * _gpn) % p == 0
	not _pp_exceeds_layers_at(p, 1)
}

_v_values(1) := {1}

_v_values(pp) := {v |
	some v in ({1, _layout.v} | {d | some d in _search.virtual_stages; _layers % (pp * d) == 0})
	not _pp_exceeds_layers_at(pp, v)
	not _layers_indivisible_at(pp, v)
} if pp > 1

# (built by comprehension, not as a set literal: OPA v1.22.3 keeps both copies
# of a literal's element that equals a variable element, and a function given
# the set, such as _options, then sees that value twice)
_mbs_values := {m | some m in [1, _layout.mbs]}

_ep_values := {1} if not _has_moe

_ep_values := {e |
	some e in ({_layout.ep} | {d | some d in numbers.range(1, min([_experts, _search.max_expert]))})
	not _experts_indivisible_at(e)
} if _has_moe

# expert tensor parallel: as given, or none (a comprehension: see _mbs_values)
_etp_values := {e | some e in [1, _layout.etp]}

_zero_values := {0, 1, 2, 3}

# never suggest turning checkpointing off (a comprehension: see _mbs_values)
_checkpointing_values := {c | some c in [_layout.checkpointing, "selective", "full"]}

_recompute_rank(ckpt) := 1 if ckpt == "full"

else := 0

# Each knob's candidate values as [value, 1 if it differs from the
# manifest's, else 0], listed once: the levels below add these up instead of
# comparing every value again.
_tp_options := _options(_tp_values, _layout.tp)

_cp_options := _options(_cp_values, _layout.cp)

_pp_options(nodes) := _options(_pp_values(nodes), _layout.pp)

_v_options(pp) := _options(_v_values(pp), _layout.v)

_mbs_options := _options(_mbs_values, _layout.mbs)

_ep_options := _options(_ep_values, _layout.ep)

_etp_options := _options(_etp_values, _layout.etp)

_zero_options := _options(_zero_values, _layout.zero_stage)

_checkpointing_options := _options(_checkpointing_values, _layout.checkpointing)

# (the same test as _changed, written as two filters: no function call per value)
_options(values, current) := array.concat(
	[[x, 0] | some x in values; x == current],
	[[x, 1] | some x in values; x != current],
)

# layouts at exactly distance d from the manifest's, each ranked by _rank
# (min = best). The (tp, cp, pp) triples that fit the world are listed once
# (memoized) with their number of changed knobs and dp; below them each rule
# runs right after the knobs it reads, the integer pipeline rules (global
# batch, microbatches, bubble) first and the costly states and communication
# formulas last, through the scalar helpers (_x_at) that OPA memoizes across
# prefixes and levels. The tp, cp, pp, v and ep values already satisfy their
# own rules, the precision is a supported one and _can_fit has checked tokens
# per GPU; _best_at re-checks every rule on the layout it picks.
_level(nodes, d) := {c |
	some [tp, cp, pp, n3, dp] in _triples(nodes)
	n3 <= d
	some [mbs, changed_mbs] in _mbs_options
	n4 := n3 + changed_mbs
	n4 <= d
	unit := mbs * dp
	not _gbs_indivisible_at(unit)
	m := _microbatches_at(unit)
	not _too_few_microbatches_at(pp, m)
	some [v, changed_v] in _v_options(pp)
	n5 := n4 + changed_v
	n5 <= d
	bubble := _bubble_at(pp, v, m)
	not _bubble_too_large_at(bubble)
	some [ep, changed_ep] in _ep_options
	some [etp, changed_etp] in _etp_options
	n6 := (n5 + changed_ep) + changed_etp
	n6 <= d
	not _ep_without_experts(ep * etp)
	not _ep_indivisible_at(ep, etp, dp, cp, tp)
	some [zero, changed_zero] in _zero_options
	n7 := n6 + changed_zero
	n7 <= d
	not _zero23_with_pp_at(pp, zero)
	states := _states_gb_at(dp, tp, pp, cp, ep, etp, zero) * _schedule_states_factor(_schedule_at(v))
	not _states_exceed_at(states)
	some [ckpt, changed_ckpt] in _checkpointing_options
	n7 + changed_ckpt == d
	comm := _comm_ratio_at(dp, tp, pp, cp, ep, etp, zero, ckpt, nodes * _gpn)
	not _comm_bound_at(comm)
	memory := _memory_gb_of(states, _activations_gb_at(tp, pp, cp, v, mbs, m, ckpt))
	not _memory_far_exceeds_at(ckpt, memory)
	_fix_memory_fits_at(memory)
	c := _rank_at(bubble, memory, comm, ckpt, {
		"nodes": nodes, "tp": tp, "pp": pp, "cp": cp, "ep": ep, "etp": etp, "v": v, "mbs": mbs,
		"zero_stage": zero, "checkpointing": ckpt, "precision": _fix_precision, "schedule": _schedule_at(v),
	})
}

# (tp, cp, pp) triples that fit the world, with their number of changed knobs
# and dp: _dp_at is defined exactly when tp·pp·cp divides W, which is the
# world rule (_world_mismatch).
_triples(nodes) := [[tp, cp, pp, n, dp] |
	some [tp, changed_tp] in _tp_options
	some [cp, changed_cp] in _cp_options
	some [pp, changed_pp] in _pp_options(nodes)
	dp := _dp_at(nodes, tp, pp, cp)
	n := (changed_tp + changed_cp) + changed_pp
]

# [warnings, bubble, recompute rank, memory GB, comm ratio, l]; undefined
# unless every ranking number is computable (fail closed)
_rank(l) := _rank_at(_bubble(l), _memory_gb(l), _comm_ratio(l), l.checkpointing, l)

_rank_at(bubble, memory, comm, ckpt, l) := [warned, bubble, _recompute_rank(ckpt), memory, comm, l] if {
	warned := count({w |
		some w, over in {
			"bubble": bubble > _cfg.bubble_warn_above,
			"memory": memory > (_cfg.memory_warn_fraction * _gpu.memory_gb),
			"comm": comm > _cfg.dp_comm_warn_above,
		}
		over
	})
}

_ranked(l) := _rank(l) if {
	_passes(l)
	_fix_memory_fits_at(_memory_gb(l))
}

# A fix is held to the margin a declared layout needs to pass without
# MEMORY_ESTIMATE_EXCEEDS_GPU: its memory estimate (states + activations +
# overhead) within memory_warn_fraction of the GPU's memory. A declared
# layout above it is only warned (the activation estimate is rough), but a
# layout itogate proposes must fit by its own estimate.
_fix_memory_fits_at(memory_gb) if memory_gb <= _cfg.memory_warn_fraction * _gpu.memory_gb

# The level applies each rule on the way down (or by construction of the
# knob values); the chosen layout is checked against every rule again, so a
# fix can never fail a rule (if it did, the level would count as empty).
_best_at(nodes, d) := l if {
	d <= _search.max_changed_knobs
	candidates := _level(nodes, d)
	count(candidates) > 0
	l := min(candidates)[5]
	_passes(l)
	_fix_memory_fits_at(_memory_gb(l))
}

_nearest(nodes) := l if {
	l := _best_at(nodes, 0)
} else := l if {
	l := _best_at(nodes, 1)
} else := l if {
	l := _best_at(nodes, 2)
} else := l if {
	l := _best_at(nodes, 3)
} else := l if {
	l := _best_at(nodes, 4)
} else := l if {
	l := _best_at(nodes, 5)
} else := best[6] if {
	candidates := _dominant_candidates(nodes)
	count(candidates) > 0
	best := min(candidates)
}

# dominant completions of every (tp, pp, cp) triple that passes, each as
# [distance, warnings, bubble, recompute rank, memory GB, comm ratio, layout]
_dominant_candidates(nodes) := {c |
	some tp in _tp_values
	some cp in _cp_values
	some pp in _pp_values(nodes)
	some l in _dominant_completions(nodes, tp, pp, cp)
	r := _ranked(l)
	c := array.concat([_distance(l)], r)
}

# v is not monotone in memory: interleaving shrinks the bubble but holds more
# microbatches in flight, least with the largest v; so both v = 1 (least
# memory) and the largest v (least bubble) are dominant.
_dominant_completions(nodes, tp, pp, cp) := {l |
	(nodes * _gpn) % ((tp * pp) * cp) == 0
	some etp in _etp_values
	ep := _max_ep(nodes, tp, pp, cp, etp)
	some zero in _dominant_zero(pp)
	some v in {1, max(_v_values(pp))}
	l := {
		"nodes": nodes, "tp": tp, "pp": pp, "cp": cp, "ep": ep, "etp": etp, "v": v, "mbs": 1,
		"zero_stage": zero, "checkpointing": "full", "precision": _fix_precision, "schedule": _schedule_at(v),
	}
}

_max_ep(nodes, tp, pp, cp, etp) := max({e |
	some e in _ep_values
	not _ep_invalid({"nodes": nodes, "tp": tp, "pp": pp, "cp": cp, "ep": e, "etp": etp})
})

# least model-state memory per stage without extra communication: ZeRO-2, and
# ZeRO-3 with pp = 1 (with pp > 1 it is priced as ZeRO-1; DeepSpeed allows only ZeRO-1)
_dominant_zero(1) := {2, 3}

_dominant_zero(pp) := {2} if {
	pp > 1
	_engine != "deepspeed"
}

_dominant_zero(pp) := {1} if {
	pp > 1
	_engine == "deepspeed"
}

_knobs := ["tp", "pp", "cp", "ep", "etp", "v", "mbs", "zero_stage", "checkpointing"]

_distance(l) := sum([_changed(l[k], _layout[k]) | some k in _knobs])

# Layouts can only fit at a node count whose tokens per GPU pass and whose
# GPUs can hold the dense parameters' states at all: every layout needs at
# least 16 bytes (or the override) per dense parameter over the whole world.
_can_fit(nodes) if {
	not _tokens_too_few({"nodes": nodes})
	nodes * _gpn >= _min_world
}

_min_world := ceil((_min_bytes * _dense_params) / (_states_budget_gb * 1e9)) if _states_budget_gb > 0

_min_bytes := b if {
	b := _bytes_override
} else := 16

_min_nodes := max([1, ceil(_min_world / _gpn)])

_max_nodes := floor((_gbs * _seq) / (_cfg.tokens_per_gpu_deny_below * _gpn))

_probe_nodes := [n | some n in _probe_range; n != _nodes]

# numbers.range counts down when its end is below its start: guard it
_probe_range := numbers.range(_min_nodes, last) if {
	last := min([_max_nodes, _min_nodes + _search.gpu_count_probes])
	last >= _min_nodes
} else := []

_smallest_fit := l if {
	l := _fit_at(0)
} else := l if {
	l := _fit_at(1)
} else := l if {
	l := _fit_at(2)
} else := l if {
	l := _fit_at(3)
}

_fit_at(i) := _nearest(n) if {
	i < _search.gpu_count_probes
	n := _probe_nodes[i]
	_can_fit(n)
}

# ---------------------------------------------------------------------------
# The fix, as data (estimates.fix_layout) and as text (each deny's fix)

_manifest_names := {
	"tp": "tensor", "pp": "pipeline", "cp": "context", "ep": "expert", "etp": "expert_tensor", "v": "virtual_stages",
	"mbs": "micro_batch_size", "zero_stage": "zero_stage", "checkpointing": "activation_checkpointing",
	"precision": "precision", "schedule": "pipeline_schedule",
}

_fix_layout := object.union(
	{"on_booked_hardware": true, "nodes": _nodes, "world_size": _world_size},
	_layout_summary(_fix.layout),
) if _fix.on_booked_hardware

_fix_layout := object.union(
	{"on_booked_hardware": false, "nodes": _fix.layout.nodes, "world_size": _world(_fix.layout)},
	_layout_summary(_fix.layout),
) if {
	not _fix.on_booked_hardware
	_fix.layout
}

_fix_layout := {"on_booked_hardware": false, "searched_nodes": _searched_nodes} if {
	_fix
	not _fix.layout
}

_layout_summary(l) := {
	"tensor": l.tp, "pipeline": l.pp, "context": l.cp, "expert": l.ep, "expert_tensor": l.etp, "virtual_stages": l.v,
	"data": _dp(l), "micro_batch_size": l.mbs, "zero_stage": l.zero_stage,
	"activation_checkpointing": l.checkpointing, "precision": l.precision, "pipeline_schedule": l.schedule,
	"changes": _changes(l), "changed_knobs": count(_changes(l)),
	"microbatches": _microbatches(l), "bubble_fraction": lib.round2(_bubble(l)),
	"model_states_gb_per_gpu": lib.round2(_states_gb(l)), "memory_gb_per_gpu": lib.round2(_memory_gb(l)),
	"dp_comm_compute_ratio": lib.round2(_comm_ratio(l)),
}

_changes(l) := [sprintf("%s %v → %v", [_manifest_names[k], _layout[k], l[k]]) |
	some k in array.concat(_knobs, ["precision", "schedule"])
	l[k] != _layout[k]
]

_searched_nodes := array.concat([_nodes], _probe_nodes) if _probe_nodes

else := [_nodes]

_hardware_text(nodes) := sprintf("%d × %d %s", [nodes, _gpn, _hw.gpu_type])

_layout_text(l) := sprintf("%s, data=%d, micro_batch_size=%d, zero_stage=%d, activation_checkpointing=%s, %s", [
	concat(", ", [sprintf("%s=%d", [_manifest_names[k], l[k]]) | some k in _layout_text_knobs(l)]),
	_dp(l), l.mbs, l.zero_stage, l.checkpointing, sprintf("precision=%s", [l.precision]),
])

# expert_tensor is shown only where it is used
_layout_text_knobs(l) := ["tp", "pp", "cp", "ep", "v"] if l.etp == 1

else := ["tp", "pp", "cp", "ep", "etp", "v"]

_change_text(l) := "no knob changes" if count(_changes(l)) == 0

else := sprintf("%d change: %s", [1, _changes(l)[0]]) if count(_changes(l)) == 1

else := sprintf("%d changes: %s", [count(_changes(l)), concat(", ", _changes(l))])

# Always defined, so that a deny never disappears for want of a fix. Each
# branch computes its text in the body: an undefined part falls through.
_fix_text := text if {
	_fix.on_booked_hardware
	text := sprintf("nearest passing layout on %s (%s): %s", [
		_hardware_text(_nodes), _change_text(_fix.layout), _layout_text(_fix.layout),
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
	_fix
	count(_probe_nodes) > 0
	text := sprintf("no layout on %s passes every parallelism rule, nor on %s nodes of %d %s", [
		_hardware_text(_nodes), concat(", ", [sprintf("%d", [n]) | some n in _probe_nodes]), _gpn, _hw.gpu_type,
	])
} else := text if {
	_fix
	text := sprintf(
		"no layout on %s passes every parallelism rule, and no other GPU count can (global batch or GPU memory)",
		[_hardware_text(_nodes)],
	)
} else := concat("", [
	"no layout search: the GPU type, fabric or model figures are unknown or inconsistent",
	" (see the other violations)",
])

_with_fix(hint) := sprintf("%s. Or: %s", [_fix_text, hint])
