# Layout arithmetic: world size, data-parallel degree, microbatches, pipeline schedules and their bubble.
# Part of package ito.parallelism (see parallelism.rego for the model and its inputs).
package ito.parallelism

# ---------------------------------------------------------------------------
# Layout arithmetic, as functions of a layout: the formulas of the facts
# reference (facts.rego), which Go's facts model reproduces exactly. A
# function of a layout hands its fields to a scalar helper (_x_at) that holds
# the formula, where another formula needs it for other values.

_world(l) := l.nodes * _gpn

_model_parallel(l) := (l.tp * l.pp) * l.cp

_dp(l) := _dp_at(l.nodes, l.tp, l.pp, l.cp)

_dp_at(nodes, tp, pp, cp) := world / group if {
	world := nodes * _gpn
	group := (tp * pp) * cp
	world % group == 0
}

_batch_unit(l) := l.mbs * _dp(l)

_microbatches(l) := _microbatches_at(l.mbs * _dp(l))

_microbatches_at(unit) := _gbs / unit if {
	_gbs % unit == 0
	_gbs >= unit
}

_tokens_per_gpu(l) := (_gbs * _seq) / _world(l)

# Pipeline schedules: 1F1B, interleaved 1F1B (v > 1; Narayanan et al.
# SC'21), zero bubble (ZB-H1: Qi et al., "Zero Bubble Pipeline
# Parallelism", ICLR 2024, sail-sg/zero-bubble-pipeline-parallelism) and
# DualPipe (DeepSeek-V3 technical report, deepseek-ai/DualPipe). The
# manifest's parallelism.pipeline_schedule, else interleaved when v > 1 and
# 1F1B otherwise; a fix candidate keeps the manifest's schedule where its v
# allows it.
_schedules := {"1f1b", "interleaved", "zero_bubble", "dualpipe"}

_declared_schedule := s if {
	s := _par.pipeline_schedule
	s in _schedules
}

_manifest_schedule := _declared_schedule if {
	_par.pipeline_schedule
} else := _schedule_at(_optional_count(_par, "virtual_stages")) if {
	not _par.pipeline_schedule
}

_schedule_at(v) := "interleaved" if {
	v > 1
} else := s if {
	s := _declared_schedule
	s != "interleaved"
} else := "1f1b"

# interleaving needs v > 1, and v > 1 is interleaving (the manifest's layout)
_schedule_invalid if {
	_layout.schedule == "interleaved"
	_layout.v == 1
	_layout.pp > 1
}

_schedule_invalid if {
	_layout.v > 1
	_layout.schedule != "interleaved"
}

_bubble(l) := _bubble_of(l.schedule, l.pp, l.v, _microbatches(l))

_bubble_at(pp, v, m) := _bubble_of(_schedule_at(v), pp, v, m)

# idle share of a step: (pp−1)/(v·m + pp−1) for (interleaved) 1F1B; ZB-H1
# leaves about a third of 1F1B's bubble, (pp−1)/3 in units of one
# microbatch's forward and backward; DualPipe (pp/2 − 1)
_bubble_of(schedule, pp, v, m) := (pp - 1) / ((v * m) + (pp - 1)) if schedule in {"1f1b", "interleaved"}

_bubble_of(schedule, pp, _, m) := _bubble_share((pp - 1) / 3, m) if schedule == "zero_bubble"

_bubble_of(schedule, pp, _, m) := _bubble_share(max([0, (pp / 2) - 1]), m) if schedule == "dualpipe"

_bubble_share(idle, m) := idle / (m + idle)

# DualPipe keeps two pipeline chunks per rank (parameters 2×, DeepSeek-V3 report Table 2)
_schedule_states_factor(schedule) := 2 if schedule == "dualpipe"

else := 1
