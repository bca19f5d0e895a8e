# METADATA
# title: Parallelism gate
# description: >-
#   Rejects impossible or wasteful distributed-training layouts before a run
#   is created, and warns about costly ones. Rules and formulas are those of
#   /work/shared/reference/parallelism.md (torchtitan, Megatron-LM, DeepSpeed,
#   TransformerEngine, the ZeRO paper); thresholds and the GPU and fabric
#   tables are bundle data (data.ito.config.parallelism, data.ito.tables.*).
#
#   W = nodes × gpus_per_node; dp = W / (tp·pp·cp); m = gbs / (mbs·dp).
#   Model-state bytes per parameter over the sharding group N = dp·cp:
#   DDP 16, ZeRO-1 4 + 12/N, ZeRO-2 2 + 14/N, ZeRO-3/FSDP 16/N (priced as
#   ZeRO-1 when pp > 1; parallelism.bytes_per_param overrides). Per-GPU
#   parameters P_loc = (P − P_exp)/(tp·pp) + P_exp/(ep·pp). GPU memory is
#   vendor decimal GB (1e9 bytes). Missing optional degrees (cp, ep, v) are 1;
#   a missing zero_stage is priced as DDP (the most memory).
package ito.parallelism

import data.ito.lib

_m := input.manifest

_hw := _m.hardware if is_object(_m.hardware)

_par := _m.parallelism if is_object(_m.parallelism)

_model := _m.model if is_object(_m.model)

_obj := _m.objective if is_object(_m.objective)

_cfg := data.ito.config.parallelism

_gpus := data.ito.tables.gpus

_fabrics := data.ito.tables.fabrics

_gpu := _gpus[_hw.gpu_type]

_fabric := _fabrics[_hw.fabric]

# Every number the layout arithmetic uses passes one of these guards: an
# ill-typed field leaves the rules that need it undefined (the manifest gate's
# MANIFEST_FIELD_INVALID denies) instead of raising a builtin error.
_count(x) := x if lib.is_count(x)

_optional_count(obj, key) := _count(object.get(obj, key, 1))

_gpn := _count(_hw.gpus_per_node)

_world_size := _count(_hw.nodes) * _gpn

_tp := _count(_par.tensor)

_pp := _count(_par.pipeline)

_cp := _optional_count(_par, "context")

_ep := _optional_count(_par, "expert")

_vpp := _optional_count(_par, "virtual_stages")

_model_parallel := (_tp * _pp) * _cp

_dp := _world_size / _model_parallel if _world_size % _model_parallel == 0

_mbs := _count(_obj.micro_batch_size)

_gbs := _count(_obj.global_batch_size)

_seq := _count(_obj.sequence_length)

_batch_unit := _mbs * _dp

_microbatches := _gbs / _batch_unit if {
	_gbs % _batch_unit == 0
	_gbs >= _batch_unit
}

_tokens_per_gpu := (_gbs * _seq) / _world_size

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

_active_params := _count(object.get(_moe, "active_parameters", _params))

_precision := _par.precision

_zero_stage := stage if {
	stage := object.get(_par, "zero_stage", _cfg.default_zero_stage)
	stage in {0, 1, 2, 3}
}

_checkpointing := object.get(_par, "activation_checkpointing", "none")

# ---------------------------------------------------------------------------
# Memory model

_effective_stage := 1 if {
	_pp > 1
	_zero_stage == 3
} else := _zero_stage

_shard_group := _dp * _cp

_stage_bytes(0, _) := 16

_stage_bytes(1, n) := 4 + (12 / n)

_stage_bytes(2, n) := 2 + (14 / n)

_stage_bytes(3, n) := 16 / n

_bytes_per_param_at(_) := b if {
	b := _par.bytes_per_param
	is_number(b)
	b > 0
}

_bytes_per_param_at(n) := _stage_bytes(_effective_stage, n) if not _par.bytes_per_param

_bytes_per_param := _bytes_per_param_at(_shard_group)

_params_per_gpu := ((_params - _expert_params) / (_tp * _pp)) + (_expert_params / (_ep * _pp))

_states_gb := (_params_per_gpu * _bytes_per_param) / 1e9

_states_limit_gb := _cfg.model_states_max_fraction * _gpu.memory_gb

_states_budget_gb := _states_limit_gb - _cfg.memory_overhead_gb

# activations (Megatron theoretical_memory_usage.py, sequence parallel + flash attention)
_seq_local := _seq / _cp

_layer_activation := (((_seq_local * _mbs) * _hidden) * (18 + ((4 * _ffn) / _hidden))) / _tp

_checkpoint_activation := (((2 * _seq_local) * _mbs) * _hidden) / _tp

_layers_per_stage := ceil(_layers / _pp)

_in_flight := min([_pp, _microbatches])

_logits := (((4 * _seq) * _mbs) * _vocab) / _tp

_activation_bytes := ((_layers_per_stage * _layer_activation) * _in_flight) + _logits if _checkpointing != "full"

_activation_bytes := (((_layers_per_stage * _checkpoint_activation) * _in_flight) + _layer_activation) + _logits if {
	_checkpointing == "full"
}

_activations_gb := _activation_bytes / 1e9

_memory_gb := (_states_gb + _activations_gb) + _cfg.memory_overhead_gb

# ---------------------------------------------------------------------------
# Communication vs compute

_comm_volume := (((2 * (_dp - 1)) / _dp) * (_params_per_gpu * 2)) * _zero3_factor

_zero3_factor := _cfg.zero3_comm_factor if _effective_stage == 3

else := 1

_dp_per_node := min([_dp, max([1, floor(_gpn / (_tp * _cp))])])

_comm_seconds := (_comm_volume / _dp_per_node) / ((_cfg.bandwidth_efficiency * _fabric.gbytes_per_s_per_gpu) * 1e9) if {
	_dp > _dp_per_node
}

_comm_seconds := _comm_volume / ((_cfg.bandwidth_efficiency * _gpu.intra_node_gbytes_per_s) * 1e9) if {
	_dp <= _dp_per_node
}

_flops_factor := 8 if _checkpointing == "full"

else := 6

_compute_seconds := ((_flops_factor * _active_params) * _tokens_per_gpu) / _effective_flops

_effective_flops := (_cfg.model_flops_utilization * _gpu.peak_tflops_16bit) * 1e12

_comm_ratio := _comm_seconds / _compute_seconds

_bubble := (_pp - 1) / ((_vpp * _microbatches) + (_pp - 1))

# ---------------------------------------------------------------------------
# Estimates

# METADATA
# title: Layout estimates
# description: >-
#   The numbers the rules use, for the decision's estimates: world size,
#   degrees, microbatches, tokens per GPU, memory per GPU (GB), pipeline bubble
#   and DP communication/compute ratio. Absent when not computable.
estimates := {k: v | some k, v in _estimates}

_estimates["world_size"] := _world_size

_estimates["dp"] := _dp

_estimates["tp"] := _tp

_estimates["pp"] := _pp

_estimates["cp"] := _cp

_estimates["ep"] := _ep

_estimates["microbatches"] := _microbatches

_estimates["tokens_per_gpu"] := _tokens_per_gpu

_estimates["bytes_per_param"] := lib.round2(_bytes_per_param)

_estimates["model_states_gb_per_gpu"] := lib.round2(_states_gb)

_estimates["activations_gb_per_gpu"] := lib.round2(_activations_gb)

_estimates["memory_gb_per_gpu"] := lib.round2(_memory_gb)

_estimates["gpu_memory_gb"] := _gpu.memory_gb

_estimates["bubble_fraction"] := lib.round2(_bubble)

_estimates["dp_comm_compute_ratio"] := lib.round2(_comm_ratio)

# ---------------------------------------------------------------------------
# Tables

# METADATA
# title: Unknown GPU type
# description: hardware.gpu_type is not in the bundle's GPU table; there is no silent default.
# custom:
#   code: GPU_TYPE_UNKNOWN
#   gate: parallelism
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
deny contains v if {
	some p in _world_size_problems
	v := lib.violation_fix(rego.metadata.rule(), p.message, p.fix)
}

_world_size_problems contains {"message": message, "fix": fix} if {
	_world_size % _model_parallel != 0
	message := sprintf("world size %d (%d × %d GPUs) is not divisible by tp×pp×cp = %d×%d×%d = %d", [
		_world_size, _hw.nodes, _gpn, _tp, _pp, _cp, _model_parallel,
	])
	fix := concat("", [
		sprintf("use a multiple of %d nodes (e.g. %d nodes = %d GPUs)", [
			_node_step, _nodes_needed, _nodes_needed * _gpn,
		]),
		_smaller_pp_hint,
	])
}

_world_size_problems contains {"message": message, "fix": fix} if {
	declared := _count(_par.data)
	declared != _dp
	message := sprintf("declared data parallel %d, but W/(tp×pp×cp) = %d/%d = %d", [
		declared, _world_size, _model_parallel, _dp,
	])
	fix := sprintf("set parallelism.data to %d or leave it out", [_dp])
}

# nodes must be a multiple of K / gcd(K, gpus_per_node) for K = tp·pp·cp to divide W
_node_step := _model_parallel / _gcd(_model_parallel, _gpn)

_nodes_needed := lib.ceil_div(_hw.nodes, _node_step) * _node_step

_gcd(a, b) := max({d | some d in numbers.range(1, min([a, b])); a % d == 0; b % d == 0})

_smaller_pp_hint := sprintf(", or pp=%d on %d GPUs", [pp, _world_size]) if {
	_world_size % (_tp * _cp) == 0
	pp := _largest_divisor_at_most(_world_size / (_tp * _cp), _pp)
} else := ""

_largest_divisor_at_most(n, limit) := max({d | some d in numbers.range(1, min([n, limit])); n % d == 0})

# METADATA
# title: Tensor parallel crosses the NVLink domain
# description: >-
#   tp must not exceed the GPU's NVLink/NVSwitch domain; crossing nodes drops
#   bandwidth from 450-900 GB/s to about 50 GB/s per GPU.
# custom:
#   code: TP_EXCEEDS_NVLINK_DOMAIN
#   gate: parallelism
deny contains v if {
	_tp > _domain
	tp := _best_tp(_domain)
	pp := _pp * lib.ceil_div(_tp, tp)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("tensor parallel %d exceeds the NVLink domain of %d GPUs on %s", [_tp, _domain, _hw.gpu_type]),
		sprintf("keep tensor parallel within the node: tp ≤ %d; try tp=%d, pp=%d", [_domain, tp, pp]),
	)
}

# the largest tp ≤ limit that divides the attention heads and is compatible with the kv heads
_best_tp(limit) := max({t |
	some t in numbers.range(1, limit)
	_heads % t == 0
	_is_kv_compatible(t)
})

_is_kv_compatible(t) if _kv_heads % t == 0

_is_kv_compatible(t) if t % _kv_heads == 0

# METADATA
# title: Attention heads not divisible by tp
# description: Attention heads must be divisible by tp, and the hidden size by the attention heads.
# custom:
#   code: TP_HEADS_INDIVISIBLE
#   gate: parallelism
deny contains v if {
	some p in _heads_problems
	v := lib.violation_fix(rego.metadata.rule(), p.message, p.fix)
}

_heads_problems contains {"message": message, "fix": fix} if {
	_heads % _tp != 0
	message := sprintf("%d attention heads are not divisible by tp=%d", [_heads, _tp])
	fix := sprintf("use a tp that divides the attention heads, e.g. tp=%d", [_best_tp(min([_tp, _tp_limit]))])
}

_heads_problems contains {"message": message, "fix": "check model.hidden_size and model.attention_heads"} if {
	_hidden % _heads != 0
	message := sprintf("hidden size %d is not divisible by %d attention heads", [_hidden, _heads])
}

_tp_limit := _domain

_tp_limit := _tp if not _gpu

# METADATA
# title: KV heads incompatible with tp
# description: kv heads must divide tp or be divisible by it (kv % tp == 0 or tp % kv == 0).
# custom:
#   code: TP_KV_HEADS_INCOMPATIBLE
#   gate: parallelism
deny contains v if {
	not _is_kv_compatible(_tp)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("%d kv heads and tp=%d: neither divides the other", [_kv_heads, _tp]),
		sprintf("use a tp that divides the kv heads or is a multiple of them, e.g. tp=%d", [_best_tp(_tp)]),
	)
}

# METADATA
# title: Expert parallel layout invalid
# description: With ep > 1 the model must have experts and dp·cp·tp must be divisible by ep.
# custom:
#   code: EP_LAYOUT_INVALID
#   gate: parallelism
deny contains v if {
	some p in _ep_problems
	v := lib.violation_fix(rego.metadata.rule(), p.message, p.fix)
}

_ep_problems contains {"message": message, "fix": "set parallelism.expert to 1"} if {
	_ep > 1
	not _has_moe
	message := sprintf("expert parallel %d on a model without experts", [_ep])
}

_ep_problems contains {"message": message, "fix": "choose ep dividing dp×cp×tp"} if {
	_ep > 1
	((_dp * _cp) * _tp) % _ep != 0
	message := sprintf("expert parallel %d does not divide dp×cp×tp = %d", [_ep, (_dp * _cp) * _tp])
}

# METADATA
# title: Experts not divisible by ep
# description: The number of experts must be divisible by ep.
# custom:
#   code: EP_EXPERTS_INDIVISIBLE
#   gate: parallelism
deny contains v if {
	_experts % _ep != 0
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("%d experts are not divisible by ep=%d", [_experts, _ep]),
		sprintf("use an ep that divides the experts, e.g. ep=%d", [_largest_divisor_at_most(_experts, _ep)]),
	)
}

# METADATA
# title: Sequence not divisible for context parallel
# description: With cp > 1 the sequence length must be divisible by 2·cp (load-balanced causal attention).
# custom:
#   code: CP_SEQ_INDIVISIBLE
#   gate: parallelism
deny contains v if {
	_cp > 1
	_seq % (2 * _cp) != 0
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("sequence length %d is not divisible by 2×cp = %d", [_seq, 2 * _cp]),
		sprintf("use a sequence length that is a multiple of %d (e.g. %d), or a smaller cp", [
			2 * _cp,
			lib.ceil_div(_seq, 2 * _cp) * (2 * _cp),
		]),
	)
}

# METADATA
# title: More pipeline stages than layers
# description: pp·v must not exceed layers + 2 (embedding and loss may take a stage each).
# custom:
#   code: PP_EXCEEDS_LAYERS
#   gate: parallelism
deny contains v if {
	limit := _layers + _cfg.extra_pipeline_stages
	_pp * _vpp > limit
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("pp×v = %d×%d = %d pipeline stages for %d layers", [_pp, _vpp, _pp * _vpp, _layers]),
		sprintf("keep pp×v ≤ layers + %d = %d", [_cfg.extra_pipeline_stages, limit]),
	)
}

# METADATA
# title: Global batch not divisible
# description: The global batch must be a positive multiple of micro_batch_size × dp.
# custom:
#   code: GBS_NOT_DIVISIBLE
#   gate: parallelism
deny contains v if {
	not _microbatches
	_batch_unit > 0
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("global batch %d is not a positive multiple of micro batch × dp = %d×%d = %d", [
			_gbs, _mbs, _dp, _batch_unit,
		]),
		sprintf("set global_batch_size to a multiple of %d, e.g. %d", [
			_batch_unit,
			max([1, lib.ceil_div(_gbs, _batch_unit)]) * _batch_unit,
		]),
	)
}

# METADATA
# title: Too few microbatches for the pipeline
# description: With pp > 1 there must be at least pp microbatches per step (m = gbs / (mbs·dp)).
# custom:
#   code: PP_TOO_FEW_MICROBATCHES
#   gate: parallelism
deny contains v if {
	_pp > 1
	_microbatches < _pp
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("%d microbatches per step for %d pipeline stages", [_microbatches, _pp]),
		sprintf("raise global_batch_size to at least pp×mbs×dp = %d, or lower pp", [_pp * _batch_unit]),
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
	_par.engine == "deepspeed"
	_zero_stage >= 2
	_pp > 1
	v := lib.violation(rego.metadata.rule(), sprintf("DeepSpeed ZeRO stage %d with pp=%d", [_zero_stage, _pp]))
}

# METADATA
# title: FP8 on a GPU without FP8 tensor cores
# description: fp8 needs compute capability 8.9 or newer (not V100, A100, A10, RTX 30xx).
# custom:
#   code: FP8_UNSUPPORTED_GPU
#   gate: parallelism
deny contains v if {
	_precision == "fp8"
	not "fp8" in _gpu.precisions
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("fp8 on %s (%s), which has no FP8 tensor cores", [_hw.gpu_type, _gpu.arch]),
		sprintf("use bf16 on %s, or a GPU with FP8: %s", [_hw.gpu_type, concat(", ", _gpus_with("fp8"))]),
	)
}

_gpus_with(precision) := sort([name | some name, gpu in _gpus; precision in gpu.precisions])

# METADATA
# title: MXFP8/NVFP4 below Blackwell
# description: mxfp8 and nvfp4 need a GPU with block-scaled formats (compute capability 10.0 or an equivalent).
# custom:
#   code: MXFP8_UNSUPPORTED_GPU
#   gate: parallelism
deny contains v if {
	_precision in {"mxfp8", "nvfp4"}
	not _precision in _gpu.precisions
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("%s on %s (%s), which does not support it", [_precision, _hw.gpu_type, _gpu.arch]),
		sprintf("use fp8 or bf16 on %s, or a GPU with %s: %s", [
			_hw.gpu_type, _precision, concat(", ", _gpus_with(_precision)),
		]),
	)
}

# METADATA
# title: BF16 on a pre-Ampere GPU
# description: bf16 needs an Ampere-or-newer GPU (V100 has none).
# custom:
#   code: BF16_UNSUPPORTED_GPU
#   gate: parallelism
deny contains v if {
	_precision == "bf16"
	not "bf16" in _gpu.precisions
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("bf16 on %s (%s), which has no bf16 support", [_hw.gpu_type, _gpu.arch]),
		sprintf("use fp16 with loss scaling on %s, or an Ampere-or-newer GPU (e.g. A100-80GB, H100-SXM-80GB)", [
			_hw.gpu_type,
		]),
	)
}

# METADATA
# title: Model states exceed GPU memory
# description: Per-GPU model states (weights, gradients, optimizer) + 3 GB overhead must fit in 0.95 × GPU memory.
# custom:
#   code: MODEL_STATES_EXCEED_GPU_MEMORY
#   gate: parallelism
deny contains v if {
	_states_gb > _states_budget_gb
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf(
			concat("", [
				"model states need %v GB per GPU (%v bytes/param × %vB params per GPU)",
				" + %v GB overhead > %v GB (%v × %v GB %s)",
			]),
			[
				lib.round2(_states_gb), lib.round2(_bytes_per_param), lib.round2(_params_per_gpu / 1e9),
				_cfg.memory_overhead_gb,
				lib.round2(_states_limit_gb), _cfg.model_states_max_fraction, _gpu.memory_gb, _hw.gpu_type,
			],
		),
		_states_fix,
	)
}

# the smallest sharding group that fits with the strongest sharding this layout allows
_states_fix := sprintf(
	concat("", [
		"shard further: %s over dp×cp ≥ %d GPUs fits (%d nodes of %d),",
		" or add tensor/pipeline parallelism, or use a GPU with more memory",
	]),
	[
		_stage_name[_fix_stage], n, lib.ceil_div(n * _model_parallel, _gpn), _gpn,
	],
) if {
	not _par.bytes_per_param
	n := _min_shards(_fix_stage, _params_per_gpu, _states_budget_gb * 1e9)
} else := concat("", [
	"add tensor/pipeline parallelism to cut parameters per GPU, lower bytes_per_param,",
	" or use a GPU with more memory",
])

_fix_stage := 1 if _pp > 1

else := 3

_stage_name := {1: "ZeRO-1 (with pp > 1 stage weights and gradients stay unsharded)", 3: "ZeRO-3/FSDP"}

_min_shards(3, p, budget) := ceil((16 * p) / budget) if budget > 0

_min_shards(1, p, budget) := ceil((12 * p) / (budget - (4 * p))) if budget > 4 * p

# ---------------------------------------------------------------------------
# Waste rules

# METADATA
# title: Pipeline bubble too large
# description: The idle pipeline share (pp−1)/(v·m + pp−1) is above the deny threshold (bundle data, 0.50).
# custom:
#   code: PP_BUBBLE_TOO_LARGE
#   gate: parallelism
deny contains v if {
	_bubble > _cfg.bubble_deny_above
	v := lib.violation_fix(rego.metadata.rule(), _bubble_message(_cfg.bubble_deny_above), _bubble_fix)
}

# METADATA
# title: Pipeline bubble large
# description: The idle pipeline share (pp−1)/(v·m + pp−1) is above the warn threshold (bundle data, 0.20).
# custom:
#   code: PP_BUBBLE_TOO_LARGE
#   gate: parallelism
#   level: warn
warn contains v if {
	_bubble > _cfg.bubble_warn_above
	_bubble <= _cfg.bubble_deny_above
	v := lib.violation_fix(rego.metadata.rule(), _bubble_message(_cfg.bubble_warn_above), _bubble_fix)
}

_bubble_message(limit) := sprintf("pipeline bubble %v (pp=%d, v=%d, m=%d) is above %v", [
	lib.round2(_bubble), _pp, _vpp, _microbatches, limit,
])

_bubble_fix := sprintf(
	concat("", [
		"raise microbatches per step to ≥ %d (global batch ≥ %d)",
		" or interleave stages (virtual_stages)",
	]),
	[
		m, m * _batch_unit,
	],
) if {
	t := _cfg.bubble_warn_above
	m := ceil((((_pp - 1) * (1 - t)) / (t * _vpp)) - 1e-9)
}

# METADATA
# title: Data parallel communication-bound
# description: Gradient sync time over compute time R = T_comm/T_comp is above the deny threshold (bundle data, 2).
# custom:
#   code: DP_COMM_BOUND
#   gate: parallelism
#   fix: Use a faster fabric, raise tokens per GPU (global batch), or keep data parallel inside nodes (more tp/pp).
deny contains v if {
	_comm_ratio > _cfg.dp_comm_deny_above
	v := lib.violation(rego.metadata.rule(), _comm_message(_cfg.dp_comm_deny_above))
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
	_comm_ratio > _cfg.dp_comm_warn_above
	_comm_ratio <= _cfg.dp_comm_deny_above
	v := lib.violation(rego.metadata.rule(), _comm_message(_cfg.dp_comm_warn_above))
}

_comm_message(limit) := sprintf("gradient sync takes %v s per step against %v s of compute (R = %v > %v) over %s", [
	lib.round2(_comm_seconds), lib.round2(_compute_seconds), lib.round2(_comm_ratio), limit, _hw.fabric,
])

# METADATA
# title: Too few tokens per GPU
# description: Tokens per GPU per step gbs·s/W below the deny threshold (bundle data, 128) leave matmuls too small.
# custom:
#   code: TOKENS_PER_GPU_TOO_SMALL
#   gate: parallelism
deny contains v if {
	_tokens_per_gpu < _cfg.tokens_per_gpu_deny_below
	v := lib.violation_fix(rego.metadata.rule(), _tokens_message(_cfg.tokens_per_gpu_deny_below), _tokens_fix)
}

# METADATA
# title: Few tokens per GPU
# description: Tokens per GPU per step gbs·s/W below the warn threshold (bundle data, 512).
# custom:
#   code: TOKENS_PER_GPU_TOO_SMALL
#   gate: parallelism
#   level: warn
warn contains v if {
	_tokens_per_gpu < _cfg.tokens_per_gpu_warn_below
	_tokens_per_gpu >= _cfg.tokens_per_gpu_deny_below
	v := lib.violation_fix(rego.metadata.rule(), _tokens_message(_cfg.tokens_per_gpu_warn_below), _tokens_fix)
}

_tokens_message(limit) := sprintf("%v tokens per GPU per step (global batch %d × sequence %d / %d GPUs) is below %v", [
	lib.round2(_tokens_per_gpu), _gbs, _seq, _world_size, limit,
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
	_checkpointing == "none"
	limit := _cfg.memory_deny_fraction_without_checkpointing * _gpu.memory_gb
	_memory_gb > limit
	v := lib.violation(rego.metadata.rule(), _memory_message(limit))
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
	_memory_gb > limit
	not _is_memory_deny
	v := lib.violation(rego.metadata.rule(), _memory_message(limit))
}

_is_memory_deny if {
	_checkpointing == "none"
	_memory_gb > _cfg.memory_deny_fraction_without_checkpointing * _gpu.memory_gb
}

_memory_message(limit) := sprintf("estimated %v GB per GPU (states %v + activations %v + overhead %v) > %v GB on %s", [
	lib.round2(_memory_gb), lib.round2(_states_gb), lib.round2(_activations_gb), _cfg.memory_overhead_gb,
	lib.round2(limit), _hw.gpu_type,
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
	_tp <= _domain
	_domain % _tp != 0
	v := lib.violation(
		rego.metadata.rule(),
		sprintf("tp=%d does not divide the NVLink domain of %d GPUs", [_tp, _domain]),
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
	_ep > _domain
	v := lib.violation(rego.metadata.rule(), sprintf("ep=%d exceeds the NVLink domain of %d GPUs", [_ep, _domain]))
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
	_cp > 1
	_seq < _cfg.context_parallel_min_sequence
	v := lib.violation(rego.metadata.rule(), sprintf("cp=%d for sequence length %d (< %d)", [
		_cp, _seq, _cfg.context_parallel_min_sequence,
	]))
}

# METADATA
# title: Small model on many GPUs
# description: >-
#   The model states would fit on 8× fewer GPUs and tokens per GPU are below
#   4096; more DP adds communication, not useful batch.
# custom:
#   code: OVERPROVISIONED_SMALL_MODEL
#   gate: parallelism
#   level: warn
warn contains v if {
	factor := _cfg.overprovision_factor
	_dp >= factor
	_tokens_per_gpu < _cfg.overprovision_tokens_per_gpu_below
	smaller_states_gb := (_params_per_gpu * _bytes_per_param_at(_shard_group / factor)) / 1e9
	smaller_states_gb <= _states_budget_gb
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("model states would fit on %d GPUs (1/%d of %d) and each GPU sees only %v tokens per step", [
			lib.ceil_div(_world_size, factor), factor, _world_size, lib.round2(_tokens_per_gpu),
		]),
		sprintf("use about %d GPUs, or raise global_batch_size to ≥ %d", [
			lib.ceil_div(_world_size, factor),
			lib.ceil_div(_cfg.overprovision_tokens_per_gpu_below * _world_size, _seq),
		]),
	)
}
