# GPU memory per layout: ZeRO/FSDP model states (dense and expert), activations, logits.
# Part of package ito.parallelism (see parallelism.rego for the model and its inputs).
package ito.parallelism

_effective_stage(zero, pp) := 1 if {
	pp > 1
	zero == 3
} else := zero

# (stages are matched in the bodies, not the heads, so that OPA's rule index
# picks the one body of the stage instead of evaluating all four)
_stage_bytes(stage, _) := 16 if {
	stage == 0
	not _is_megatron
}

_stage_bytes(stage, _) := b[0] + b[1] if {
	stage == 0
	_is_megatron
	b := _megatron_bytes
}

_stage_bytes(stage, n) := 4 + (12 / n) if {
	stage == 1
	not _is_megatron
}

_stage_bytes(stage, n) := b[0] + (b[1] / n) if {
	stage == 1
	_is_megatron
	b := _megatron_bytes
}

_stage_bytes(stage, n) := 2 + (14 / n) if stage == 2

_stage_bytes(stage, n) := 16 / n if stage == 3

# Megatron-LM and NeMo (mixed precision, Megatron Core's DDP and optimizer):
# [bytes per parameter every data-parallel rank keeps, bytes the distributed
# optimizer shards over d ranks]. The Megatron Core distributed-optimizer
# guide gives fp16/bf16 parameters with 16-bit gradients 4 + 16/d (20 without
# the distributed optimizer), bf16 parameters with fp32 gradients 6 + 12/d
# (18), fp32 parameters 8 + 8/d (16): the fp32 main gradients of the 16-bit
# case are sharded, fp32 gradients are kept whole. Gradients are fp32 when
# _grad_bytes is 4 (the engine's default for bf16).
_megatron_bytes := [8, 8] if {
	_par.precision == "fp32"
} else := [6, 12] if {
	_grad_bytes == 4
} else := [4, 16]

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

_states_gb(l) := states * _schedule_states_factor(l.schedule) if {
	states := _states_gb_at(_dp(l), l.tp, l.pp, l.cp, l.ep, l.etp, l.zero_stage)
}

# dense states over dp·cp, expert states over edp (Megatron's distributed
# optimizer and DeepSpeed-MoE shard expert states over the expert-data-parallel
# group only; with ep = dp·cp·tp that group is one rank and nothing is sharded)
_states_gb_at(dp, tp, pp, cp, ep, etp, zero) := bytes / 1e9 if {
	dense := _dense_local(tp, pp) * _bytes_at(zero, pp, dp * cp)
	bytes := dense + _expert_states_bytes(dp, tp, pp, cp, ep, etp, zero)
}

_expert_states_bytes(_, _, _, _, _, _, _) := 0 if _expert_params == 0

_expert_states_bytes(dp, tp, pp, cp, ep, etp, zero) := local * bytes if {
	_expert_params > 0
	local := _expert_local(pp, ep, etp)
	bytes := _bytes_at(zero, pp, _edp_at(dp, tp, cp, ep, etp))
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
	last_layers := _stage_activation_bytes(tp, _end_stage_layers("last_stage_layers", pp), cp, mbs, 1, ckpt)
	last := last_layers + _logits(tp, cp, mbs)
}

# Layers on the first/last stage: as pipeline_split declares them
# (first/last_stage_layers, or the stage's entry of stage_layers), else the
# stage's share of the split units, ceil(L'/pp), less the embedding on the
# first stage and the loss on the last when they count as layers
# (Megatron-LM --account-for-embedding/loss-in-pipeline-split: the first
# stage of 126 + 2 units over pp 8 holds 15 transformer layers, not 16).
_end_stage_layers(key, pp) := n if {
	n := _count(_split[key])
	pp > 0
} else := n if {
	count(_stage_layers) == pp
	n := _stage_layers[_end_stage_index(key)]
} else := max([0, ceil(_split_units / pp) - _end_stage_unit(key)])

_end_stage_index("first_stage_layers") := 0

_end_stage_index("last_stage_layers") := count(_stage_layers) - 1

_end_stage_unit("first_stage_layers") := _flag(object.get(_split, "embedding_stage", false))

_end_stage_unit("last_stage_layers") := _flag(object.get(_split, "loss_stage", false))

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
_layer_activation(tp, cp, mbs) := tokens * (((18 + ((4 * _mlp_width) / _hidden)) / tp) + (10 * _unsharded(tp))) if {
	tokens := ((_seq / cp) * mbs) * _hidden
}

# The MLP width whose activations a token leaves behind: ffn in a dense
# layer. In a MoE layer every token is routed to top_k experts and each of
# them keeps that token's MLP activations (Megatron Core's MoE layer
# permutes each token top_k times before the grouped expert GEMMs), plus the
# shared experts' that every token passes: top_k × expert ffn + shared ffn
# (DeepSeek-V3: 8 × 2048 + 2048; Mixtral: 2 × 14336). Every layer is priced
# as a MoE layer (a few dense first layers are not told apart).
_mlp_width := _ffn if not _has_moe

_mlp_width := (_moe_top_k * _expert_ffn) + _shared_ffn if _has_moe

_moe_top_k := k if {
	k := _moe.top_k
	is_number(k)
	k >= 1
	k == floor(k)
}

_expert_ffn := f if {
	f := object.get(_moe, "expert_ffn_hidden_size", _ffn)
	is_number(f)
	f >= 1
	f == floor(f)
}

_shared_ffn := f if {
	f := object.get(_moe, "shared_expert_ffn_hidden_size", 0)
	is_number(f)
	f >= 0
	f == floor(f)
}

_checkpoint_activation(tp, cp, mbs) := ((2 * (_seq / cp)) * mbs) * (_hidden * ((1 / tp) + _unsharded(tp)))

_unsharded(tp) := 1 - (1 / tp) if {
	_par.sequence_parallel == false
} else := 0

# fp32 logits of one microbatch: each context-parallel rank holds its own s/cp tokens
_logits(tp, cp, mbs) := (((4 * (_seq / cp)) * mbs) * _vocab) / tp

_memory_gb(l) := _memory_gb_of(_states_gb(l), _activations_gb(l))

_memory_gb_of(states, activations) := (states + activations) + _cfg.memory_overhead_gb
