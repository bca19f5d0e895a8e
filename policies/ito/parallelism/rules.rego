# The hard rules as predicates of a layout, shared by the manifest's own layout and the fix search
# (their denies are in denies.rego).
# Part of package ito.parallelism (see parallelism.rego for the model and its inputs).
package ito.parallelism

# ---------------------------------------------------------------------------
# Hard rules as functions of a layout: each predicate is true when layout l
# violates the rule (its deny in denies.rego names the code). Only the fields a rule
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
	not _has_stage_layers
	_is_megatron
	pp > 1
	not _is_layer_split_even(pp, v)
}

# An explicit per-stage layout (pipeline_split.stage_layers: the transformer
# layers of each pipeline rank, its virtual chunks together; Megatron-LM's
# pipeline_model_parallel_layout, which the DeepSeek-V3 recipes use) must
# have one entry per stage and place every layer, for any engine.
_layers_indivisible_at(pp, _) if {
	_has_stage_layers
	not _is_stage_layout_ok(pp)
}

_has_stage_layers if object.get(_split, "stage_layers", null) != null

_stage_layers := s if {
	s := _split.stage_layers
	is_array(s)
	every n in s {
		is_number(n)
		n >= 0
		n == floor(n)
	}
}

_is_stage_layout_ok(pp) if {
	count(_stage_layers) == pp
	sum(_stage_layers) == _layers
}

_split := s if {
	s := _par.pipeline_split
	is_object(s)
} else := {}

_split_units := (layers + _flag(object.get(_split, "embedding_stage", false))) + loss if {
	layers := _layers
	loss := _flag(object.get(_split, "loss_stage", false))
}

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
	not _end_stage_off_chunks(v)
	stages := pp - k
	stages > 0
	rest := _split_units - fixed
	rest > 0
	rest % (stages * v) == 0
}

_is_layer_split_even(pp, v) if {
	[fixed, k] := _declared_end_stages
	not _end_stage_off_chunks(v)
	pp == k
	_split_units == fixed
	v == 1
}

# the texts of PP_LAYERS_INDIVISIBLE
_split_extra_text := sprintf(" (+%d for embedding/loss stages)", [_split_units - _layers]) if _split_units > _layers

else := ""

_declared_split_text := "no uneven split declared" if _declared_end_stages[1] == 0

else := sprintf("the declared first/last stage layers are not a multiple of v=%d", [
	_layout.v,
]) if {
	_end_stage_off_chunks(_layout.v)
}

else := sprintf("the declared first/last stage layers leave %d layers for %d stages", [
	_split_units - _declared_end_stages[0], _layout.pp - _declared_end_stages[1],
])

# The NVIDIA recipes balance a layer count that pp×v does not divide by
# counting the embedding and/or the loss as layers (Llama 3 405B: 126 + 2 =
# 128 over pp 8 × v 8); name that option when it makes the split even.
_accounting_text(pp, v) := sprintf(", or count %s as layers (%s: %d = %d×%d×%d)", [
	option.what, option.fields, option.units, pp, v, option.units / (pp * v),
]) if {
	not _declared_end_stages[1] > 0
	options := [o |
		some o in _accounting_options
		o.units > _split_units
		o.units % (pp * v) == 0
	]
	option := options[0]
} else := ""

_accounting_options := [
	{"what": "the embedding", "fields": "pipeline_split.embedding_stage", "units": _layers + 1},
	{"what": "the loss", "fields": "pipeline_split.loss_stage", "units": _layers + 1},
	{
		"what": "the embedding and the loss", "fields": "pipeline_split.embedding_stage and loss_stage",
		"units": _layers + 2,
	},
]

# Megatron Core splits a declared first/last stage into v equal chunks too:
# its layers must be a multiple of v (TransformerConfig: "number of layers at
# first stage ... must be divisible by virtual pipeline parallel degree")
_end_stage_off_chunks(v) if {
	some key in ["first_stage_layers", "last_stage_layers"]
	_count(_split[key]) % v != 0
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

_tokens_too_few(l) if _tokens_too_few_at(_tokens_per_gpu(l))

_tokens_too_few_at(tokens) if tokens < _cfg.tokens_per_gpu_deny_below

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
	_is_head_shape_ok
	count(_moe_problems) == 0
}

# Megatron-LM derives the head width as hidden / heads (so hidden must be a
# multiple of the heads) unless kv_channels gives it; models such as
# GLM-4.5-Air (hidden 4096, 96 heads of 128) project to heads × head_dim ≠
# hidden. With model.head_dim declared the shapes are consistent by
# construction (Megatron-LM megatron/core/transformer/transformer_config.py,
# kv_channels; Hugging Face transformers Glm4MoeConfig.head_dim).
_is_head_shape_ok if _count(_model.head_dim)

_is_head_shape_ok if {
	not _model.head_dim
	_hidden % _heads == 0
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
