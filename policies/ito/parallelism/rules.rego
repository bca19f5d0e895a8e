# The hard rules' helpers: what the denies (denies.rego) compute beyond a comparison.
# Part of package ito.parallelism (see parallelism.rego for the model and its inputs).
package ito.parallelism

import data.ito.lib

# ---------------------------------------------------------------------------
# The parts of the hard rules that are more than a comparison: the deny rules
# in denies.rego test the manifest's layout (_layout) and its facts (_f)
# directly, and call these with the numbers they judge. (Go's layout search,
# gatekeeper/plan, proposes layouts that these same denies confirm:
# data.ito.parallelism.confirm.)

# More pipeline stages than layers (and the extra stages the bundle allows).
# PP_LAYERS_UNBALANCED negates it through this helper, not the comparison
# inline: OPA takes arithmetic out of a negation, so without
# extra_pipeline_stages in the bundle the warn would be dropped, not kept.
_pp_exceeds_layers_at(pp, v) if pp * v > _layers + _cfg.extra_pipeline_stages

# Megatron builds equal pipeline chunks: L' = L (+1 when the embedding, +1
# when the loss counts as a layer) must split into pp·v equal chunks, or the
# declared first/last stage layers must leave an equal split of the rest over
# the other stages (Megatron-LM megatron/training/arguments.py and
# megatron/core/transformer/transformer_block.py:
# --decoder-first/last-pipeline-num-layers,
# --account-for-embedding/loss-in-pipeline-split). Other engines split
# unevenly (torchtitan) and only warn (PP_LAYERS_UNBALANCED).
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

# for the message: counts only can be shown (up to 64); anything else goes
# through lib.show, which withholds it
_stage_layers_text := json.marshal(_stage_layers) if count(_stage_layers) <= 64

else := lib.show(_split.stage_layers)

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

# unit = mbs·dp
_gbs_indivisible_at(unit) if {
	unit > 0
	not _microbatches_at(unit)
}

_too_few_microbatches_at(pp, m) if {
	pp > 1
	m < pp
}

_tokens_too_few_at(tokens) if tokens < _cfg.tokens_per_gpu_deny_below

_bubble_too_large_at(bubble) if bubble > _cfg.bubble_deny_above

_states_exceed_at(states_gb) if states_gb > _states_budget_gb

_memory_far_exceeds_at(ckpt, memory_gb) if {
	ckpt == "none"
	memory_gb > _cfg.memory_deny_fraction_without_checkpointing * _gpu.memory_gb
}

_comm_bound_at(ratio) if ratio > _cfg.dp_comm_deny_above

_is_kv_compatible(t) if _kv_heads % t == 0

_is_kv_compatible(t) if t % _kv_heads == 0

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
