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
#   checkpointing, precision}. The hard rules (denies.rego) judge the
#   manifest's own layout and its facts; Go's layout search proposes fixes
#   and plans that the same rules confirm (confirm, fix.rego), so a
#   suggested fix passes exactly the rules that judged the manifest.
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

_m := lib.train_manifest

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

# the manifest's layout (the reference of _layout); undefined when a field is missing or ill-typed
_manifest_layout := {
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
