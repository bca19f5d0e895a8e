# METADATA
# title: Parallelism gate
# description: >-
#   Rejects impossible or wasteful distributed-training layouts before a run
#   is created, warns about costly ones, and answers every deny with the
#   nearest layout on the booked hardware that passes every rule. Rules and
#   formulas follow the public implementations and papers (torchtitan,
#   Megatron-LM, DeepSpeed, TransformerEngine, the ZeRO paper); thresholds,
#   search bounds and the GPU and fabric tables are bundle data
#   (data.ito.config.parallelism, data.ito.tables.*).
#
#   A layout is an object {nodes, tp, pp, cp, ep, v, mbs, zero_stage,
#   checkpointing, precision}. Every hard rule is a predicate of a layout
#   (_tp_exceeds_domain(l), _states_exceed(l), ...), used for the manifest's
#   own layout (the deny rules below) and for every candidate of the fix
#   search, so a suggested fix passes exactly the rules that judged the
#   manifest.
#
#   W = nodes × gpus_per_node; dp = W / (tp·pp·cp); m = gbs / (mbs·dp).
#   Model-state bytes per parameter over a sharding group of N ranks:
#   DDP 16, ZeRO-1 4 + 12/N, ZeRO-2 2 + 14/N, ZeRO-3/FSDP 16/N (priced as
#   ZeRO-1 when pp > 1; parallelism.bytes_per_param overrides). Dense and
#   expert parameters shard over different groups: dense
#   (P − P_exp)/(tp·pp) per GPU over N = dp·cp, experts P_exp/(ep·etp·pp)
#   per GPU over the expert-data-parallel group edp = W/(ep·etp·pp).
#   GPU memory is vendor decimal GB (1e9 bytes). Missing optional degrees
#   (cp, ep, etp, v) are 1; a missing zero_stage is priced as DDP (the most
#   memory). Each formula's source is in policies/README.md ("Formulas").
package ito.parallelism

import data.ito.lib

_m := input.manifest

_hw := _m.hardware if is_object(_m.hardware)

_par := _m.parallelism if is_object(_m.parallelism)

_model := _m.model if is_object(_m.model)

_obj := _m.objective if is_object(_m.objective)

_cfg := data.ito.config.parallelism

_search := _cfg.fix_search

_gpus := data.ito.tables.gpus

_fabrics := data.ito.tables.fabrics

_gpu := data.ito.tables.gpus[_hw.gpu_type]

_fabric := data.ito.tables.fabrics[_hw.fabric]

# Every number the layout arithmetic uses passes one of these guards: an
# ill-typed field leaves the rules that need it undefined (the manifest gate's
# MANIFEST_FIELD_INVALID denies) instead of raising a builtin error.
# (lib.is_count's test, inlined: a guard runs for every field on every request)
_count(x) := x if {
	is_number(x)
	x >= 1
	x == floor(x)
}

_optional_count(obj, key) := _count(object.get(obj, key, 1))

# ---------------------------------------------------------------------------
# The booking and the model: fixed for every layout

_gpn := _count(_hw.gpus_per_node)

_nodes := _count(_hw.nodes)

_world_size := _nodes * _gpn

_domain := _gpu.nvlink_domain

_heads := _count(_model.attention_heads)

_kv_heads := _count(_model.kv_heads)

_hidden := _count(_model.hidden_size)

_layers := _count(_model.layers)

_vocab := _count(_model.vocab_size)

_params := _count(_model.parameters)

_ffn := _count(object.get(_model, "ffn_hidden_size", 4 * _hidden))

_has_moe if _model.moe

_moe := moe if {
	moe := object.get(_model, "moe", {})
	is_object(moe)
}

_experts := _count(_moe.experts)

_expert_params := p if {
	p := object.get(_moe, "expert_parameters", 0)
	is_number(p)
	p >= 0
}

_dense_params := _params - _expert_params

_active_params := _count(object.get(_moe, "active_parameters", _params))

_gbs := _count(_obj.global_batch_size)

_seq := _count(_obj.sequence_length)

_engine := object.get(_par, "engine", "other")

# Megatron-LM and NeMo (which runs Megatron Core) share Megatron's defaults
_is_megatron if _engine in {"megatron", "nemo"}

# Bytes per gradient element in the data-parallel reduction: 4 when gradients
# are reduced in fp32 — fp32 training, or Megatron (its validate_args turns
# accumulate_allreduce_grads_in_fp32 on for bf16) — else 2; the manifest's
# parallelism.gradient_reduce_precision overrides.
_grad_bytes := 4 if {
	_par.gradient_reduce_precision == "fp32"
} else := 2 if {
	_par.gradient_reduce_precision == "bf16"
} else := 4 if {
	_par.precision == "fp32"
} else := 4 if {
	_is_megatron
} else := 2

_bytes_override := b if {
	b := _par.bytes_per_param
	is_number(b)
	b > 0
}

_zero_stage := stage if {
	stage := object.get(_par, "zero_stage", _cfg.default_zero_stage)
	stage in {0, 1, 2, 3}
}

_checkpointing := c if {
	c := object.get(_par, "activation_checkpointing", "none")
	c in {"none", "selective", "full"}
}

# the manifest's layout; undefined when a field is missing or ill-typed
_layout := {
	"nodes": _nodes,
	"tp": _count(_par.tensor),
	"pp": _count(_par.pipeline),
	"cp": _optional_count(_par, "context"),
	"ep": _optional_count(_par, "expert"),
	"etp": _optional_count(_par, "expert_tensor"),
	"v": _optional_count(_par, "virtual_stages"),
	"schedule": _manifest_schedule,
	"mbs": _count(_obj.micro_batch_size),
	"zero_stage": _zero_stage,
	"checkpointing": _checkpointing,
	"precision": _par.precision,
}

# ---------------------------------------------------------------------------
# Layout arithmetic (functions of a layout; scalar helpers are memoized by OPA
# per argument tuple, which keeps the fix search cheap). Each function of a
# layout hands its fields to a scalar helper (_x_at) that holds the formula:
# the fix search calls the helpers directly, since a layout object built in a
# loop costs an allocation per field, again for every memoization key and
# every field read.

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

# interleaving needs v > 1, and v > 1 is interleaving
_schedule_invalid(l) if {
	l.schedule == "interleaved"
	l.v == 1
	l.pp > 1
}

_schedule_invalid(l) if {
	l.v > 1
	l.schedule != "interleaved"
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

_effective_stage(zero, pp) := 1 if {
	pp > 1
	zero == 3
} else := zero

# (stages are matched in the bodies, not the heads, so that OPA's rule index
# picks the one body of the stage instead of evaluating all four)
_stage_bytes(stage, _) := 16 if stage == 0

_stage_bytes(stage, n) := 4 + (12 / n) if stage == 1

_stage_bytes(stage, n) := 2 + (14 / n) if stage == 2

_stage_bytes(stage, n) := 16 / n if stage == 3

_bytes_at(zero, pp, n) := b if {
	b := _bytes_override
} else := _stage_bytes(_effective_stage(zero, pp), n)

_bytes_per_param(l) := _bytes_at(l.zero_stage, l.pp, _dp(l) * l.cp)

_expert_bytes_per_param(l) := _bytes_at(l.zero_stage, l.pp, _edp_at(_dp(l), l.tp, l.cp, l.ep, l.etp))

# Expert-data-parallel size: the ranks that hold the same experts and shard
# their gradients and optimizer states, W/(ep·etp·pp) = dp·cp·tp/(ep·etp)
# (Megatron-LM megatron/core/parallel_state.py, expert data parallel group).
# At least one rank: when ep·etp does not divide dp·cp·tp (EP_LAYOUT_INVALID)
# the states are still priced, unsharded, instead of denied a second time.
_edp_at(dp, tp, cp, ep, etp) := max([1, ((dp * cp) * tp) / (ep * etp)])

_edp(l) := _edp_at(_dp(l), l.tp, l.cp, l.ep, l.etp)

_dense_local(tp, pp) := _dense_params / (tp * pp)

_expert_local(pp, ep, etp) := _expert_params / ((ep * etp) * pp)

_params_local(tp, pp, ep, etp) := _dense_local(tp, pp) + _expert_local(pp, ep, etp)

_params_per_gpu(l) := _params_local(l.tp, l.pp, l.ep, l.etp)

_states_gb(l) := _states_gb_at(_dp(l), l.tp, l.pp, l.cp, l.ep, l.etp, l.zero_stage) * _schedule_states_factor(l.schedule)

# dense states over dp·cp, expert states over edp (Megatron's distributed
# optimizer and DeepSpeed-MoE shard expert states over the expert-data-parallel
# group only; with ep = dp·cp·tp that group is one rank and nothing is sharded)
_states_gb_at(dp, tp, pp, cp, ep, etp, zero) := bytes / 1e9 if {
	dense := _dense_local(tp, pp) * _bytes_at(zero, pp, dp * cp)
	bytes := dense + _expert_states_bytes(dp, tp, pp, cp, ep, etp, zero)
}

_expert_states_bytes(_, _, _, _, _, _, _) := 0 if _expert_params == 0

_expert_states_bytes(dp, tp, pp, cp, ep, etp, zero) := _expert_local(pp, ep, etp) * _bytes_at(zero, pp, _edp_at(dp, tp, cp, ep, etp)) if {
	_expert_params > 0
}

_states_limit_gb := _cfg.model_states_max_fraction * _gpu.memory_gb

_states_budget_gb := _states_limit_gb - _cfg.memory_overhead_gb

# Activations (Megatron-LM megatron/training/theoretical_memory_usage.py,
# sequence parallel + flash attention; Korthikanti et al. 2022, "Reducing
# Activation Recomputation in Large Transformer Models"). The peak GPU is the
# first pipeline stage (the most microbatches in flight) or the last one (the
# fp32 logits); with pp = 1 one GPU holds both.
_activations_gb(l) := _activations_of(l.schedule, l.tp, l.pp, l.cp, l.v, l.mbs, _microbatches(l), l.checkpointing)

_activations_gb_at(tp, pp, cp, v, mbs, m, ckpt) := _activations_of(_schedule_at(v), tp, pp, cp, v, mbs, m, ckpt)

_activations_of(_, tp, pp, cp, _, mbs, _, ckpt) := bytes / 1e9 if {
	pp == 1
	bytes := _stage_activation_bytes(tp, _layers, cp, mbs, 1, ckpt) + _logits(tp, cp, mbs)
}

_activations_of(schedule, tp, pp, cp, v, mbs, m, ckpt) := max([first, last]) / 1e9 if {
	pp > 1
	in_flight := _in_flight(schedule, pp, v, m)
	first := _stage_activation_bytes(tp, _end_stage_layers("first_stage_layers", pp), cp, mbs, in_flight, ckpt)
	last := _stage_activation_bytes(tp, _end_stage_layers("last_stage_layers", pp), cp, mbs, 1, ckpt) + _logits(tp, cp, mbs)
}

# layers on the first/last stage: as pipeline_split declares, else ceil(L/pp)
_end_stage_layers(key, pp) := n if {
	n := _count(_split[key])
	pp > 0
} else := ceil(_layers / pp)

# Microbatches in flight on the first stage: min(pp, m) with 1F1B; an
# interleaved schedule (v > 1) holds (1 + (pp−1)/(pp·v)) times as many
# (Megatron-LM theoretical_memory_usage.py, interleaved schedule penalty;
# Narayanan et al. SC'21).
_in_flight(schedule, pp, _, m) := min([pp, m]) if schedule in {"1f1b", "zero_bubble"}

_in_flight(schedule, pp, v, m) := min([pp, m]) * (1 + ((pp - 1) / (pp * v))) if schedule == "interleaved"

# DualPipe: pp + 1 microbatches in flight (DeepSeek-V3 report, Table 2)
_in_flight(schedule, pp, _, m) := min([pp + 1, m]) if schedule == "dualpipe"

# the layers of one stage for `in_flight` microbatches; full recompute keeps
# only each layer's input and recomputes one layer at a time
_stage_activation_bytes(tp, layers, cp, mbs, in_flight, ckpt) := bytes if {
	ckpt == "full"
	kept := (layers * _checkpoint_activation(tp, cp, mbs)) * in_flight
	bytes := kept + _layer_activation(tp, cp, mbs)
}

_stage_activation_bytes(tp, layers, cp, mbs, in_flight, ckpt) := bytes if {
	ckpt != "full"
	bytes := (layers * _layer_activation(tp, cp, mbs)) * in_flight
}

# Without sequence parallel (tp > 1) the LayerNorm and dropout activations,
# about 10·(s/cp)·mbs·h bytes per layer, and a recomputed layer's input are
# not divided by tp (Korthikanti et al. 2022, Table 2)
_layer_activation(tp, cp, mbs) := (((_seq / cp) * mbs) * _hidden) * (((18 + ((4 * _ffn) / _hidden)) / tp) + (10 * _unsharded(tp)))

_checkpoint_activation(tp, cp, mbs) := ((2 * (_seq / cp)) * mbs) * (_hidden * ((1 / tp) + _unsharded(tp)))

_unsharded(tp) := 1 - (1 / tp) if {
	_par.sequence_parallel == false
} else := 0

# fp32 logits of one microbatch: each context-parallel rank holds its own s/cp tokens
_logits(tp, cp, mbs) := (((4 * (_seq / cp)) * mbs) * _vocab) / tp

_memory_gb(l) := _memory_gb_of(_states_gb(l), _activations_gb(l))

_memory_gb_of(states, activations) := (states + activations) + _cfg.memory_overhead_gb

# communication vs compute
_comm_seconds(l) := _comm_seconds_at(_dp(l), l.tp, l.pp, l.cp, l.ep, l.etp, l.zero_stage)

_comm_seconds_at(dp, tp, pp, cp, ep, etp, zero) := seconds if {
	volume := (((2 * (dp - 1)) / dp) * (_params_local(tp, pp, ep, etp) * _grad_bytes)) * _zero3_factor(zero, pp)
	per_node := min([dp, max([1, floor(_gpn / (tp * cp))])])
	seconds := _transfer_seconds(volume, dp, per_node)
}

# DP spans nodes: each node's share goes over the fabric; else over NVLink
_transfer_seconds(volume, dp, per_node) := (volume / per_node) / _bytes_per_s(_fabric.gbytes_per_s_per_gpu) if {
	dp > per_node
}

_transfer_seconds(volume, dp, per_node) := volume / _bytes_per_s(_gpu.intra_node_gbytes_per_s) if {
	dp <= per_node
}

_bytes_per_s(gbytes_per_s) := (_cfg.bandwidth_efficiency * gbytes_per_s) * 1e9

_zero3_factor(zero, pp) := _cfg.zero3_comm_factor if _effective_stage(zero, pp) == 3

else := 1

_compute_seconds(l) := _compute_seconds_at(l.checkpointing, _world(l))

_compute_seconds_at(ckpt, world) := flops / _effective_flops if {
	flops := (_flops_factor(ckpt) * _active_params) * ((_gbs * _seq) / world)
}

_flops_factor(ckpt) := 8 if ckpt == "full"

else := 6

_effective_flops := (_cfg.model_flops_utilization * _gpu.peak_tflops_16bit) * 1e12

_comm_ratio(l) := _comm_ratio_at(_dp(l), l.tp, l.pp, l.cp, l.ep, l.etp, l.zero_stage, l.checkpointing, _world(l))

_comm_ratio_at(dp, tp, pp, cp, ep, etp, zero, ckpt, world) := _comm_seconds_at(dp, tp, pp, cp, ep, etp, zero) / _compute_seconds_at(
	ckpt,
	world,
)

# ---------------------------------------------------------------------------
# Hard rules as functions of a layout: each predicate is true when layout l
# violates the rule (its deny below names the code). Only the fields a rule
# reads need to be in l. A rule the fix search applies as soon as its fields
# are chosen has its test in a scalar helper (_x_at) that the search calls
# with the chosen values.

_tp_exceeds_domain(l) if _tp_exceeds_domain_at(l.tp)

_tp_exceeds_domain_at(tp) if tp > _domain

_heads_indivisible(l) if _heads_indivisible_at(l.tp)

_heads_indivisible_at(tp) if _heads % tp != 0

_kv_incompatible(l) if not _is_kv_compatible(l.tp)

_cp_seq_indivisible(l) if _cp_seq_indivisible_at(l.cp)

_cp_seq_indivisible_at(cp) if {
	cp > 1
	_seq % (2 * cp) != 0
}

_world_mismatch(l) if (l.nodes * _gpn) % ((l.tp * l.pp) * l.cp) != 0

_pp_exceeds_layers(l) if _pp_exceeds_layers_at(l.pp, l.v)

_pp_exceeds_layers_at(pp, v) if pp * v > _layers + _cfg.extra_pipeline_stages

# Megatron builds equal pipeline chunks: L' = L (+1 when the embedding, +1
# when the loss counts as a layer) must split into pp·v equal chunks, or the
# declared first/last stage layers must leave an equal split of the rest over
# the other stages (Megatron-LM megatron/training/arguments.py and
# megatron/core/transformer/transformer_block.py:
# --decoder-first/last-pipeline-num-layers,
# --account-for-embedding/loss-in-pipeline-split). Other engines split
# unevenly (torchtitan) and only warn (PP_LAYERS_UNBALANCED).
_layers_indivisible(l) if _layers_indivisible_at(l.pp, l.v)

_layers_indivisible_at(pp, v) if {
	_is_megatron
	pp > 1
	not _is_layer_split_even(pp, v)
}

_split := s if {
	s := _par.pipeline_split
	is_object(s)
} else := {}

_split_units := (_layers + _flag(object.get(_split, "embedding_stage", false))) + _flag(object.get(_split, "loss_stage", false))

_flag(true) := 1

_flag(x) := 0 if x != true

# declared first/last stage layers: [layers, count of declared stages]
_declared_end_stages := [sum(given), count(given)] if {
	given := [n |
		some key in ["first_stage_layers", "last_stage_layers"]
		n := _count(_split[key])
	]
}

_is_layer_split_even(pp, v) if {
	[fixed, k] := _declared_end_stages
	stages := pp - k
	stages > 0
	rest := _split_units - fixed
	rest > 0
	rest % (stages * v) == 0
}

_is_layer_split_even(pp, v) if {
	[fixed, k] := _declared_end_stages
	pp == k
	_split_units == fixed
	v == 1
}

# the largest pipeline chunk over the mean chunk
_stage_imbalance(l) := ceil(_layers / (l.pp * l.v)) / (_layers / (l.pp * l.v))

_gbs_indivisible(l) if _gbs_indivisible_at(l.mbs * _dp(l))

# unit = mbs·dp
_gbs_indivisible_at(unit) if {
	unit > 0
	not _microbatches_at(unit)
}

_too_few_microbatches(l) if _too_few_microbatches_at(l.pp, _microbatches(l))

_too_few_microbatches_at(pp, m) if {
	pp > 1
	m < pp
}

_ep_invalid(l) if _ep_without_experts(l.ep * l.etp)

_ep_invalid(l) if _ep_indivisible_at(l.ep, l.etp, _dp(l), l.cp, l.tp)

# (called with ep·etp: either above 1 needs experts)
_ep_without_experts(ep) if {
	ep > 1
	not _has_moe
}

# the expert grid ep × etp × edp must tile the dp·cp·tp ranks of each stage
_ep_indivisible_at(ep, etp, dp, cp, tp) if {
	ep * etp > 1
	((dp * cp) * tp) % (ep * etp) != 0
}

_experts_indivisible(l) if _experts_indivisible_at(l.ep)

_experts_indivisible_at(ep) if _experts % ep != 0

_zero23_with_pp(l) if _zero23_with_pp_at(l.pp, l.zero_stage)

_zero23_with_pp_at(pp, zero) if {
	_engine == "deepspeed"
	zero >= 2
	pp > 1
}

_fp8_unsupported(l) if {
	l.precision == "fp8"
	_is_unsupported(l.precision)
}

_mxfp8_unsupported(l) if {
	l.precision in {"mxfp8", "nvfp4"}
	_is_unsupported(l.precision)
}

_bf16_unsupported(l) if {
	l.precision == "bf16"
	_is_unsupported(l.precision)
}

_tokens_too_few(l) if _tokens_per_gpu(l) < _cfg.tokens_per_gpu_deny_below

_bubble_too_large(l) if _bubble_too_large_at(_bubble(l))

_bubble_too_large_at(bubble) if bubble > _cfg.bubble_deny_above

_states_exceed(l) if _states_exceed_at(_states_gb(l))

_states_exceed_at(states_gb) if states_gb > _states_budget_gb

_memory_far_exceeds(l) if _memory_far_exceeds_at(l.checkpointing, _memory_gb(l))

_memory_far_exceeds_at(ckpt, memory_gb) if {
	ckpt == "none"
	memory_gb > _cfg.memory_deny_fraction_without_checkpointing * _gpu.memory_gb
}

_comm_bound(l) if _comm_bound_at(_comm_ratio(l))

_comm_bound_at(ratio) if ratio > _cfg.dp_comm_deny_above

# Any hard rule fails, cheapest first: OPA stops at the first body that
# succeeds. Every hard deny below has its predicate here (a test checks it).
_fails_any(l) if _tp_exceeds_domain(l)

_fails_any(l) if _heads_indivisible(l)

_fails_any(l) if _kv_incompatible(l)

_fails_any(l) if _cp_seq_indivisible(l)

_fails_any(l) if _world_mismatch(l)

_fails_any(l) if _pp_exceeds_layers(l)

_fails_any(l) if _layers_indivisible(l)

_fails_any(l) if _schedule_invalid(l)

_fails_any(l) if _gbs_indivisible(l)

_fails_any(l) if _too_few_microbatches(l)

_fails_any(l) if _ep_invalid(l)

_fails_any(l) if _experts_indivisible(l)

_fails_any(l) if _zero23_with_pp(l)

_fails_any(l) if _fp8_unsupported(l)

_fails_any(l) if _mxfp8_unsupported(l)

_fails_any(l) if _bf16_unsupported(l)

_fails_any(l) if _tokens_too_few(l)

_fails_any(l) if _bubble_too_large(l)

_fails_any(l) if _states_exceed(l)

_fails_any(l) if _memory_far_exceeds(l)

_fails_any(l) if _comm_bound(l)

_is_kv_compatible(t) if _kv_heads % t == 0

_is_kv_compatible(t) if t % _kv_heads == 0

_is_unsupported(precision) if {
	_gpu
	not precision in _gpu.precisions
}

# A layout passes when no hard rule fails. A rule whose numbers are not
# computable does not fail, so candidates are only ever taken through
# _ranked, which is undefined unless every number is computable.
_passes(l) if not _fails_any(l)

# Model-level consistency that no layout can repair.
_is_model_consistent if {
	_hidden % _heads == 0
	count(_moe_problems) == 0
}

_moe_problems contains msg if {
	_expert_params >= _params
	msg := sprintf("moe.expert_parameters %d is not below the %d model parameters", [_expert_params, _params])
}

_moe_problems contains msg if {
	_active_params > _params
	msg := sprintf("moe.active_parameters %d exceeds the %d model parameters", [_active_params, _params])
}

_moe_problems contains sprintf("moe.top_k %d exceeds the %d experts", [k, _experts]) if {
	k := _count(_moe.top_k)
	k > _experts
}

# ---------------------------------------------------------------------------
# Estimates

# METADATA
# title: Layout estimates
# description: >-
#   The numbers the rules use, for the decision's estimates: world size,
#   degrees, microbatches, tokens per GPU, memory per GPU (GB), pipeline bubble
#   and DP communication/compute ratio; with a parallelism deny, fix_layout:
#   the nearest passing layout (or the smallest GPU count that has one).
#   Absent when not computable.
estimates := {k: v | some k, v in _estimates}

_estimates["world_size"] := _world_size

_estimates["dp"] := _dp(_layout)

_estimates["tp"] := _layout.tp

_estimates["pp"] := _layout.pp

_estimates["cp"] := _layout.cp

_estimates["ep"] := _layout.ep

_estimates["etp"] := _layout.etp

_estimates["expert_data_parallel"] := _edp(_layout) if _has_moe

_estimates["expert_bytes_per_param"] := lib.round2(_expert_bytes_per_param(_layout)) if _has_moe

_estimates["virtual_stages"] := _layout.v

_estimates["pipeline_schedule"] := _layout.schedule

_estimates["microbatches"] := _microbatches(_layout)

_estimates["tokens_per_gpu"] := _tokens_per_gpu(_layout)

_estimates["bytes_per_param"] := lib.round2(_bytes_per_param(_layout))

_estimates["model_states_gb_per_gpu"] := lib.round2(_states_gb(_layout))

_estimates["activations_gb_per_gpu"] := lib.round2(_activations_gb(_layout))

_estimates["memory_gb_per_gpu"] := lib.round2(_memory_gb(_layout))

_estimates["gpu_memory_gb"] := _gpu.memory_gb

_estimates["bubble_fraction"] := lib.round2(_bubble(_layout))

_estimates["dp_comm_compute_ratio"] := lib.round2(_comm_ratio(_layout))

_estimates["fix_layout"] := _fix_layout if count(deny) > 0

# ---------------------------------------------------------------------------
# The fix search: the nearest layout on the same hardware that passes every
# hard rule. Runs only when a deny asks for its fix (never on an allow).
#
# Candidates keep the model, the global batch and the sequence; they vary
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

_ranked(l) := _rank(l) if _passes(l)

# The level applies each rule on the way down (or by construction of the
# knob values); the chosen layout is checked against every rule again, so a
# fix can never fail a rule (if it did, the level would count as empty).
_best_at(nodes, d) := l if {
	d <= _search.max_changed_knobs
	candidates := _level(nodes, d)
	count(candidates) > 0
	l := min(candidates)[5]
	_passes(l)
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

# ---------------------------------------------------------------------------
# Tables

# METADATA
# title: Unknown GPU type
# description: hardware.gpu_type is not in the bundle's GPU table; there is no silent default.
# custom:
#   code: GPU_TYPE_UNKNOWN
#   gate: parallelism
#   fix: Use a GPU type from the table, or add a row with its source to data.ito.tables.gpus.
deny contains v if {
	not _gpu
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("GPU type %s is not in the bundle's GPU table", [_shown_hardware("gpu_type")]),
		sprintf("use one of: %s (or add the GPU to data.ito.tables.gpus with its source)", [_names(_gpus)]),
	)
}

# METADATA
# title: Unknown fabric
# description: hardware.fabric is not in the bundle's fabric table; there is no silent default.
# custom:
#   code: FABRIC_UNKNOWN
#   gate: parallelism
#   fix: Use a fabric from the table, or add a row with its source to data.ito.tables.fabrics.
deny contains v if {
	not _fabric
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("fabric %s is not in the bundle's fabric table", [_shown_hardware("fabric")]),
		sprintf("use one of: %s (or add the fabric to data.ito.tables.fabrics with its source)", [_names(_fabrics)]),
	)
}

_shown_hardware(field) := lib.show(lib.value_at(input, ["manifest", "hardware", field], null))

_names(table) := concat(", ", sort(object.keys(table)))

# ---------------------------------------------------------------------------
# Hard rules

# METADATA
# title: World size does not fit the layout
# description: W must be divisible by tp·pp·cp, and a declared data-parallel degree must equal W/(tp·pp·cp).
# custom:
#   code: WORLD_SIZE_MISMATCH
#   gate: parallelism
#   fix: Computed per deny - the nearest passing layout on the booked hardware, or a node count that fits.
deny contains v if {
	some p in _world_size_problems
	v := lib.violation_fix(rego.metadata.rule(), p.message, _with_fix(p.fix))
}

_world_size_problems contains {"message": message, "fix": fix} if {
	_world_mismatch(_layout)
	message := sprintf("world size %d (%d × %d GPUs) is not divisible by tp×pp×cp = %d×%d×%d = %d", [
		_world_size, _nodes, _gpn, _layout.tp, _layout.pp, _layout.cp, _model_parallel(_layout),
	])
	fix := sprintf("keep the layout on a multiple of %d nodes (e.g. %d nodes = %d GPUs)", [
		_node_step, _nodes_needed, _nodes_needed * _gpn,
	])
}

_world_size_problems contains {"message": message, "fix": fix} if {
	declared := _count(_par.data)
	dp := _dp(_layout)
	declared != dp
	message := sprintf("declared data parallel %d, but W/(tp×pp×cp) = %d/%d = %d", [
		declared, _world_size, _model_parallel(_layout), dp,
	])
	fix := sprintf("set parallelism.data to %d or leave it out", [dp])
}

# nodes must be a multiple of K / gcd(K, gpus_per_node) for K = tp·pp·cp to divide W
_node_step := _model_parallel(_layout) / _gcd(_model_parallel(_layout), _gpn)

_nodes_needed := lib.ceil_div(_nodes, _node_step) * _node_step

_gcd(a, b) := max({d | some d in numbers.range(1, min([a, b])); a % d == 0; b % d == 0})

# METADATA
# title: Tensor parallel crosses the NVLink domain
# description: >-
#   tp must not exceed the GPU's NVLink/NVSwitch domain; crossing nodes drops
#   bandwidth from 450-900 GB/s to about 50 GB/s per GPU.
# custom:
#   code: TP_EXCEEDS_NVLINK_DOMAIN
#   gate: parallelism
#   fix: Computed per deny - tensor parallel inside the node, pipeline or data parallel across nodes.
deny contains v if {
	_tp_exceeds_domain(_layout)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("tensor parallel %d exceeds the NVLink domain of %d GPUs on %s", [_layout.tp, _domain, _hw.gpu_type]),
		_with_fix(sprintf("keep tensor parallel within the NVLink domain (tp ≤ %d)", [_domain])),
	)
}

# METADATA
# title: Attention heads not divisible by tp
# description: Attention heads must be divisible by tp, and the hidden size by the attention heads.
# custom:
#   code: TP_HEADS_INDIVISIBLE
#   gate: parallelism
#   fix: Computed per deny - a tp that divides the attention heads.
deny contains v if {
	some p in _heads_problems
	v := lib.violation_fix(rego.metadata.rule(), p.message, p.fix)
}

_heads_problems contains {"message": message, "fix": fix} if {
	_heads_indivisible(_layout)
	message := sprintf("%d attention heads are not divisible by tp=%d", [_heads, _layout.tp])
	fix := _with_fix(sprintf("use a tp that divides the attention heads (%s)", [_divisors_text(_heads)]))
}

_heads_problems contains {"message": message, "fix": "check model.hidden_size and model.attention_heads"} if {
	_hidden % _heads != 0
	message := sprintf("hidden size %d is not divisible by %d attention heads", [_hidden, _heads])
}

_divisors_text(n) := concat(", ", [sprintf("%d", [d]) | some d in numbers.range(1, min([n, 16])); n % d == 0])

# METADATA
# title: KV heads incompatible with tp
# description: kv heads must divide tp or be divisible by it (kv % tp == 0 or tp % kv == 0).
# custom:
#   code: TP_KV_HEADS_INCOMPATIBLE
#   gate: parallelism
#   fix: Computed per deny - a tp that divides the kv heads or is a multiple of them.
deny contains v if {
	_kv_incompatible(_layout)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("%d kv heads and tp=%d: neither divides the other", [_kv_heads, _layout.tp]),
		_with_fix("use a tp that divides the kv heads or is a multiple of them"),
	)
}

# METADATA
# title: Expert parallel layout invalid
# description: With ep > 1 the model must have experts and dp·cp·tp must be divisible by ep.
# custom:
#   code: EP_LAYOUT_INVALID
#   gate: parallelism
#   fix: Computed per deny - an ep that divides dp·cp·tp (and the experts), or ep=1 for a dense model.
deny contains v if {
	some p in _ep_problems
	v := lib.violation_fix(rego.metadata.rule(), p.message, _with_fix(p.fix))
}

_ep_problems contains {"message": message, "fix": "set parallelism.expert and expert_tensor to 1"} if {
	_layout.ep * _layout.etp > 1
	not _has_moe
	message := sprintf("expert parallel %d × expert tensor parallel %d on a model without experts", [
		_layout.ep, _layout.etp,
	])
}

_ep_problems contains {"message": message, "fix": "choose ep×etp dividing dp×cp×tp"} if {
	_layout.ep * _layout.etp > 1
	group := (_dp(_layout) * _layout.cp) * _layout.tp
	group % (_layout.ep * _layout.etp) != 0
	message := sprintf("expert parallel %d × expert tensor parallel %d does not divide dp×cp×tp = %d", [
		_layout.ep, _layout.etp, group,
	])
}

# METADATA
# title: Experts not divisible by ep
# description: The number of experts must be divisible by ep.
# custom:
#   code: EP_EXPERTS_INDIVISIBLE
#   gate: parallelism
#   fix: Computed per deny - an ep that divides the number of experts.
deny contains v if {
	_experts_indivisible(_layout)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("%d experts are not divisible by ep=%d", [_experts, _layout.ep]),
		_with_fix(sprintf("use an ep that divides the experts, e.g. ep=%d", [
			_largest_divisor_at_most(_experts, _layout.ep),
		])),
	)
}

_largest_divisor_at_most(n, limit) := max({d | some d in numbers.range(1, min([n, limit])); n % d == 0})

# METADATA
# title: MoE figures inconsistent
# description: >-
#   model.moe must describe a real mixture of experts: expert parameters below
#   the total, active parameters at most the total, top_k at most the experts.
# custom:
#   code: MOE_CONFIG_INVALID
#   gate: parallelism
#   fix: Correct model.moe (experts, top_k, expert_parameters, active_parameters) from the model's config.
deny contains v if {
	some message in _moe_problems
	v := lib.violation(rego.metadata.rule(), message)
}

# METADATA
# title: Sequence not divisible for context parallel
# description: With cp > 1 the sequence length must be divisible by 2·cp (load-balanced causal attention).
# custom:
#   code: CP_SEQ_INDIVISIBLE
#   gate: parallelism
#   fix: Computed per deny - a cp that divides the sequence into 2·cp chunks, or a rounded sequence length.
deny contains v if {
	_cp_seq_indivisible(_layout)
	cp := _layout.cp
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("sequence length %d is not divisible by 2×cp = %d", [_seq, 2 * cp]),
		_with_fix(sprintf("use a sequence length that is a multiple of %d (e.g. %d)", [
			2 * cp,
			lib.ceil_div(_seq, 2 * cp) * (2 * cp),
		])),
	)
}

# METADATA
# title: More pipeline stages than layers
# description: pp·v must not exceed layers + 2 (embedding and loss may take a stage each).
# custom:
#   code: PP_EXCEEDS_LAYERS
#   gate: parallelism
#   fix: Computed per deny - fewer pipeline or virtual stages.
deny contains v if {
	_pp_exceeds_layers(_layout)
	limit := _layers + _cfg.extra_pipeline_stages
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("pp×v = %d×%d = %d pipeline stages for %d layers", [
			_layout.pp, _layout.v, _layout.pp * _layout.v, _layers,
		]),
		_with_fix(sprintf("keep pp×v ≤ layers + %d = %d", [_cfg.extra_pipeline_stages, limit])),
	)
}

# METADATA
# title: Layers do not split into equal pipeline stages
# description: >-
#   Megatron-LM and NeMo build equal pipeline chunks: the layers (plus one for
#   the embedding and one for the loss when pipeline_split counts them) must
#   be divisible by pp·v, unless pipeline_split declares first/last stage
#   layers that leave an equal split of the rest.
# custom:
#   code: PP_LAYERS_INDIVISIBLE
#   gate: parallelism
#   fix: Computed per deny - a pp (and v) that divides the layers, or declare the uneven split in parallelism.pipeline_split.
deny contains v if {
	_layers_indivisible(_layout)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("%d layers%s do not split into pp×v = %d×%d equal chunks (%s)", [
			_layers, _split_extra_text, _layout.pp, _layout.v, _declared_split_text,
		]),
		_with_fix(sprintf(
			"use a pp×v that divides %d, or declare parallelism.pipeline_split.first_stage_layers/last_stage_layers",
			[_split_units],
		)),
	)
}

_split_extra_text := sprintf(" (+%d for embedding/loss stages)", [_split_units - _layers]) if _split_units > _layers

else := ""

_declared_split_text := "no uneven split declared" if _declared_end_stages[1] == 0

else := sprintf("the declared first/last stage layers leave %d layers for %d stages", [
	_split_units - _declared_end_stages[0], _layout.pp - _declared_end_stages[1],
])

# METADATA
# title: Pipeline stages unbalanced
# description: >-
#   The largest pipeline chunk holds more than 1.25 × the mean (bundle data):
#   the other stages wait for it every microbatch. Megatron engines deny an
#   unequal split instead (PP_LAYERS_INDIVISIBLE).
# custom:
#   code: PP_LAYERS_UNBALANCED
#   gate: parallelism
#   level: warn
#   fix: Use a pp×v that divides the layers.
warn contains v if {
	not _is_megatron
	_layout.pp > 1
	not _pp_exceeds_layers(_layout)
	imbalance := _stage_imbalance(_layout)
	imbalance > _cfg.pipeline_unbalanced_above
	v := lib.violation(rego.metadata.rule(), sprintf(
		"%d layers over pp×v = %d×%d chunks: the largest holds %d, %v× the mean",
		[_layers, _layout.pp, _layout.v, ceil(_layers / (_layout.pp * _layout.v)), lib.round2(imbalance)],
	))
}

# METADATA
# title: Pipeline schedule does not match the virtual stages
# description: >-
#   An interleaved schedule needs virtual_stages > 1 (with pp > 1), and
#   virtual_stages > 1 is an interleaved schedule; 1F1B, zero bubble and
#   DualPipe run one chunk per stage.
# custom:
#   code: PP_SCHEDULE_INVALID
#   gate: parallelism
#   fix: Computed per deny - set pipeline_schedule to interleaved with virtual_stages > 1, or virtual_stages to 1.
deny contains v if {
	_schedule_invalid(_layout)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("pipeline_schedule %s with virtual_stages %d (pp=%d)", [_layout.schedule, _layout.v, _layout.pp]),
		_with_fix("use pipeline_schedule interleaved with virtual_stages > 1, or virtual_stages 1 with another schedule"),
	)
}

# METADATA
# title: Global batch not divisible
# description: The global batch must be a positive multiple of micro_batch_size × dp.
# custom:
#   code: GBS_NOT_DIVISIBLE
#   gate: parallelism
#   fix: Computed per deny - a layout whose mbs×dp divides the global batch, or a rounded global batch.
deny contains v if {
	_gbs_indivisible(_layout)
	unit := _batch_unit(_layout)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("global batch %d is not a positive multiple of micro batch × dp = %d×%d = %d", [
			_gbs, _layout.mbs, _dp(_layout), unit,
		]),
		_with_fix(sprintf("set global_batch_size to a multiple of %d, e.g. %d", [
			unit,
			max([1, lib.ceil_div(_gbs, unit)]) * unit,
		])),
	)
}

# METADATA
# title: Too few microbatches for the pipeline
# description: With pp > 1 there must be at least pp microbatches per step (m = gbs / (mbs·dp)).
# custom:
#   code: PP_TOO_FEW_MICROBATCHES
#   gate: parallelism
#   fix: Computed per deny - fewer pipeline stages, a smaller micro batch, or a larger global batch.
deny contains v if {
	_too_few_microbatches(_layout)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("%d microbatches per step for %d pipeline stages", [_microbatches(_layout), _layout.pp]),
		_with_fix(sprintf("raise global_batch_size to at least pp×mbs×dp = %d", [
			_layout.pp * _batch_unit(_layout),
		])),
	)
}

# METADATA
# title: ZeRO-2/3 with pipeline parallel (DeepSpeed)
# description: DeepSpeed's pipeline engine does not support ZeRO stage 2 or 3.
# custom:
#   code: ZERO23_WITH_PP
#   gate: parallelism
#   fix: Use ZeRO stage 1 with pipeline parallelism, or pp=1.
deny contains v if {
	_zero23_with_pp(_layout)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("DeepSpeed ZeRO stage %d with pp=%d", [_layout.zero_stage, _layout.pp]),
		_with_fix("use ZeRO stage 1 with pipeline parallelism, or pp=1"),
	)
}

# METADATA
# title: FP8 on a GPU without FP8 tensor cores
# description: fp8 needs compute capability 8.9 or newer (not V100, A100, A10, RTX 30xx).
# custom:
#   code: FP8_UNSUPPORTED_GPU
#   gate: parallelism
#   fix: Computed per deny - bf16 on this GPU, or a GPU with FP8.
deny contains v if {
	_fp8_unsupported(_layout)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("fp8 on %s (%s), which has no FP8 tensor cores", [_hw.gpu_type, _gpu.arch]),
		_with_fix(sprintf("a GPU with FP8: %s", [concat(", ", _gpus_with("fp8"))])),
	)
}

_gpus_with(precision) := sort([name | some name, gpu in _gpus; precision in gpu.precisions])

# METADATA
# title: MXFP8/NVFP4 below Blackwell
# description: mxfp8 and nvfp4 need a GPU with block-scaled formats (compute capability 10.0 or an equivalent).
# custom:
#   code: MXFP8_UNSUPPORTED_GPU
#   gate: parallelism
#   fix: Computed per deny - fp8 or bf16 on this GPU, or a GPU with block-scaled formats.
deny contains v if {
	_mxfp8_unsupported(_layout)
	precision := _layout.precision
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("%s on %s (%s), which does not support it", [precision, _hw.gpu_type, _gpu.arch]),
		_with_fix(sprintf("a GPU with %s: %s", [precision, concat(", ", _gpus_with(precision))])),
	)
}

# METADATA
# title: BF16 on a pre-Ampere GPU
# description: bf16 needs an Ampere-or-newer GPU (V100 has none).
# custom:
#   code: BF16_UNSUPPORTED_GPU
#   gate: parallelism
#   fix: Computed per deny - fp16 with loss scaling on this GPU, or an Ampere-or-newer GPU.
deny contains v if {
	_bf16_unsupported(_layout)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("bf16 on %s (%s), which has no bf16 support", [_hw.gpu_type, _gpu.arch]),
		_with_fix("an Ampere-or-newer GPU (e.g. A100-80GB, H100-SXM-80GB)"),
	)
}

# METADATA
# title: Model states exceed GPU memory
# description: Per-GPU model states (weights, gradients, optimizer) + 3 GB overhead must fit in 0.95 × GPU memory.
# custom:
#   code: MODEL_STATES_EXCEED_GPU_MEMORY
#   gate: parallelism
#   fix: Computed per deny - more sharding or model parallelism on the booked GPUs, or the GPU count that fits.
deny contains v if {
	_states_exceed(_layout)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("model states need %v GB per GPU (%s) + %v GB overhead > %v GB (%v × %v GB %s)", [
			lib.round2(_states_gb(_layout)), _states_terms, _cfg.memory_overhead_gb,
			lib.round2(_states_limit_gb), _cfg.model_states_max_fraction, _gpu.memory_gb, _hw.gpu_type,
		]),
		_with_fix("use a GPU with more memory, or a lower bytes_per_param (8-bit optimizer states)"),
	)
}

_states_terms := sprintf("%v bytes/param × %vB params per GPU", [
	lib.round2(_bytes_per_param(_layout)), lib.round2(_params_per_gpu(_layout) / 1e9),
]) if {
	_expert_params == 0
} else := sprintf("%v bytes/param × %vB dense params + %v bytes/param × %vB expert params per GPU, experts sharded over %v ranks", [
	lib.round2(_bytes_per_param(_layout)), lib.round2(_dense_local(_layout.tp, _layout.pp) / 1e9),
	lib.round2(_expert_bytes_per_param(_layout)), lib.round2(_expert_local(_layout.pp, _layout.ep, _layout.etp) / 1e9),
	lib.round2(_edp(_layout)),
])

# ---------------------------------------------------------------------------
# Waste rules

# METADATA
# title: Pipeline bubble too large
# description: The idle pipeline share (pp−1)/(v·m + pp−1) is above the deny threshold (bundle data, 0.50).
# custom:
#   code: PP_BUBBLE_TOO_LARGE
#   gate: parallelism
#   fix: Computed per deny - more microbatches per step, interleaved stages, or fewer pipeline stages.
deny contains v if {
	_bubble_too_large(_layout)
	v := lib.violation_fix(rego.metadata.rule(), _bubble_message(_cfg.bubble_deny_above), _with_fix(_bubble_fix))
}

# METADATA
# title: Pipeline bubble large
# description: The idle pipeline share (pp−1)/(v·m + pp−1) is above the warn threshold (bundle data, 0.20).
# custom:
#   code: PP_BUBBLE_TOO_LARGE
#   gate: parallelism
#   level: warn
#   fix: Raise microbatches per step (global batch) or interleave stages (virtual_stages).
warn contains v if {
	bubble := _bubble(_layout)
	bubble > _cfg.bubble_warn_above
	bubble <= _cfg.bubble_deny_above
	v := lib.violation_fix(rego.metadata.rule(), _bubble_message(_cfg.bubble_warn_above), _bubble_fix)
}

_bubble_message(limit) := sprintf("pipeline bubble %v (pp=%d, v=%d, m=%d) is above %v", [
	lib.round2(_bubble(_layout)), _layout.pp, _layout.v, _microbatches(_layout), limit,
])

_bubble_fix := sprintf(
	concat("", [
		"raise microbatches per step to ≥ %d (global batch ≥ %d)",
		" or interleave stages (virtual_stages)",
	]),
	[
		m, m * _batch_unit(_layout),
	],
) if {
	t := _cfg.bubble_warn_above
	m := ceil((((_layout.pp - 1) * (1 - t)) / (t * _layout.v)) - 1e-9)
}

# METADATA
# title: Data parallel communication-bound
# description: Gradient sync time over compute time R = T_comm/T_comp is above the deny threshold (bundle data, 2).
# custom:
#   code: DP_COMM_BOUND
#   gate: parallelism
#   fix: Use a faster fabric, raise tokens per GPU (global batch), or keep data parallel inside nodes (more tp/pp).
deny contains v if {
	_comm_bound(_layout)
	v := lib.violation_fix(
		rego.metadata.rule(),
		_comm_message(_cfg.dp_comm_deny_above),
		_with_fix("use a faster fabric, or raise tokens per GPU (global batch)"),
	)
}

# METADATA
# title: Data parallel communication-heavy
# description: Gradient sync time over compute time R = T_comm/T_comp is above the warn threshold (bundle data, 1).
# custom:
#   code: DP_COMM_BOUND
#   gate: parallelism
#   level: warn
#   fix: Use a faster fabric, raise tokens per GPU (global batch), or keep data parallel inside nodes (more tp/pp).
warn contains v if {
	ratio := _comm_ratio(_layout)
	ratio > _cfg.dp_comm_warn_above
	ratio <= _cfg.dp_comm_deny_above
	v := lib.violation(rego.metadata.rule(), _comm_message(_cfg.dp_comm_warn_above))
}

_comm_message(limit) := sprintf("gradient sync takes %v s per step against %v s of compute (R = %v > %v) over %s", [
	lib.round2(_comm_seconds(_layout)), lib.round2(_compute_seconds(_layout)),
	lib.round2(_comm_ratio(_layout)), limit, _hw.fabric,
])

# METADATA
# title: Too few tokens per GPU
# description: Tokens per GPU per step gbs·s/W below the deny threshold (bundle data, 128) leave matmuls too small.
# custom:
#   code: TOKENS_PER_GPU_TOO_SMALL
#   gate: parallelism
#   fix: Computed per deny - no layout changes tokens per GPU; a larger global batch or fewer GPUs does.
deny contains v if {
	_tokens_too_few(_layout)
	v := lib.violation_fix(
		rego.metadata.rule(),
		_tokens_message(_cfg.tokens_per_gpu_deny_below),
		_with_fix(_tokens_fix),
	)
}

# METADATA
# title: Few tokens per GPU
# description: Tokens per GPU per step gbs·s/W below the warn threshold (bundle data, 512).
# custom:
#   code: TOKENS_PER_GPU_TOO_SMALL
#   gate: parallelism
#   level: warn
#   fix: Raise global_batch_size, or use fewer GPUs.
warn contains v if {
	tokens := _tokens_per_gpu(_layout)
	tokens < _cfg.tokens_per_gpu_warn_below
	tokens >= _cfg.tokens_per_gpu_deny_below
	v := lib.violation_fix(rego.metadata.rule(), _tokens_message(_cfg.tokens_per_gpu_warn_below), _tokens_fix)
}

_tokens_message(limit) := sprintf("%v tokens per GPU per step (global batch %d × sequence %d / %d GPUs) is below %v", [
	lib.round2(_tokens_per_gpu(_layout)), _gbs, _seq, _world_size, limit,
])

_tokens_fix := sprintf("raise global_batch_size to ≥ %d, or use fewer GPUs", [
	lib.ceil_div(_cfg.tokens_per_gpu_warn_below * _world_size, _seq),
])

# METADATA
# title: Memory estimate far above GPU memory
# description: >-
#   States + activations + overhead exceed 1.5 × GPU memory with activation
#   checkpointing off. The activation estimate is ±30-50%, so this denies only
#   far beyond the limit.
# custom:
#   code: MEMORY_ESTIMATE_EXCEEDS_GPU
#   gate: parallelism
#   fix: Turn on activation checkpointing (full), lower micro_batch_size, or add tensor/context parallelism.
deny contains v if {
	_memory_far_exceeds(_layout)
	limit := _cfg.memory_deny_fraction_without_checkpointing * _gpu.memory_gb
	v := lib.violation_fix(
		rego.metadata.rule(),
		_memory_message(limit),
		_with_fix("turn on activation checkpointing, lower micro_batch_size, or add tensor/context parallelism"),
	)
}

# METADATA
# title: Memory estimate above GPU memory
# description: States + activations + overhead exceed 0.92 × GPU memory (an estimate, ±30-50% on activations).
# custom:
#   code: MEMORY_ESTIMATE_EXCEEDS_GPU
#   gate: parallelism
#   level: warn
#   fix: >-
#     Turn on activation checkpointing (selective or full), lower
#     micro_batch_size, or add tensor/context parallelism.
warn contains v if {
	limit := _cfg.memory_warn_fraction * _gpu.memory_gb
	_memory_gb(_layout) > limit
	not _memory_far_exceeds(_layout)
	v := lib.violation(rego.metadata.rule(), _memory_message(limit))
}

_memory_message(limit) := sprintf("estimated %v GB per GPU (states %v + activations %v + overhead %v) > %v GB on %s", [
	lib.round2(_memory_gb(_layout)), lib.round2(_states_gb(_layout)), lib.round2(_activations_gb(_layout)),
	_cfg.memory_overhead_gb, lib.round2(limit), _hw.gpu_type,
])

# METADATA
# title: Tensor-parallel group straddles the NVLink domain
# description: The NVLink domain is not a multiple of tp, so some TP groups span NVLink and the network.
# custom:
#   code: TP_GROUP_STRADDLES_DOMAIN
#   gate: parallelism
#   level: warn
#   fix: Use a tp that divides the NVLink domain (e.g. 1, 2, 4 or 8 on 8-GPU nodes).
warn contains v if {
	tp := _layout.tp
	tp <= _domain
	_domain % tp != 0
	v := lib.violation(
		rego.metadata.rule(),
		sprintf("tp=%d does not divide the NVLink domain of %d GPUs", [tp, _domain]),
	)
}

# METADATA
# title: Expert parallel crosses the NVLink domain
# description: ep exceeds the NVLink domain, so the expert all-to-all crosses nodes.
# custom:
#   code: EP_EXCEEDS_NVLINK_DOMAIN
#   gate: parallelism
#   level: warn
#   fix: Keep ep within the NVLink domain, or expect all-to-all over the network to dominate.
warn contains v if {
	_layout.ep > _domain
	v := lib.violation(rego.metadata.rule(), sprintf("ep=%d exceeds the NVLink domain of %d GPUs", [_layout.ep, _domain]))
}

# METADATA
# title: Context parallel on short sequences
# description: cp > 1 with sequences shorter than 8192 tokens (bundle data); CP pays off from about 8K tokens.
# custom:
#   code: CP_ON_SHORT_SEQ
#   gate: parallelism
#   level: warn
#   fix: Use cp=1 and spend the GPUs on data parallel instead.
warn contains v if {
	_layout.cp > 1
	_seq < _cfg.context_parallel_min_sequence
	v := lib.violation(rego.metadata.rule(), sprintf("cp=%d for sequence length %d (< %d)", [
		_layout.cp, _seq, _cfg.context_parallel_min_sequence,
	]))
}

# METADATA
# title: Small model on many GPUs
# description: >-
#   The model states would fit on 8× fewer GPUs and each GPU computes less
#   than 1 s per optimizer step (T_comp = 6·P_act·tokens per GPU / (0.4 ·
#   peak FLOPS), 8 with full recompute; bundle data): more DP adds
#   communication, not useful work. Tokens per GPU alone is not the test: the
#   production Llama 3 405B layout runs ~1k tokens per GPU at ~6 s per step.
# custom:
#   code: OVERPROVISIONED_SMALL_MODEL
#   gate: parallelism
#   level: warn
#   fix: Use about 1/8 of the GPUs, or raise global_batch_size.
warn contains v if {
	factor := _cfg.overprovision_factor
	dp := _dp(_layout)
	dp >= factor
	seconds := _compute_seconds(_layout)
	seconds < _cfg.overprovision_compute_seconds_below
	smaller := _states_gb_at(dp / factor, _layout.tp, _layout.pp, _layout.cp, _layout.ep, _layout.etp, _layout.zero_stage) * _schedule_states_factor(_layout.schedule)
	smaller <= _states_budget_gb
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf(
			concat("", [
				"model states would fit on %d GPUs (1/%d of %d) and each GPU computes only %v s per step",
				" (%v tokens per GPU) < %v s",
			]),
			[
				lib.ceil_div(_world_size, factor), factor, _world_size, lib.round2(seconds),
				lib.round2(_tokens_per_gpu(_layout)), _cfg.overprovision_compute_seconds_below,
			],
		),
		sprintf("use about %d GPUs, or raise global_batch_size to ≥ %d", [
			lib.ceil_div(_world_size, factor),
			ceil((_gbs * _cfg.overprovision_compute_seconds_below) / seconds),
		]),
	)
}
