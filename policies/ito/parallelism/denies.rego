# The parallelism gate's denies: the table lookups and each hard rule applied to the manifest's layout.
# Part of package ito.parallelism (see parallelism.rego for the model and its inputs; rules.rego for the predicates).
package ito.parallelism

import data.ito.lib

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
	(_layout.nodes * _gpn) % ((_layout.tp * _layout.pp) * _layout.cp) != 0
	message := sprintf("world size %d (%d × %d GPUs) is not divisible by tp×pp×cp = %d×%d×%d = %d", [
		_world_size, _nodes, _gpn, _layout.tp, _layout.pp, _layout.cp, _model_parallel(_layout),
	])
	fix := sprintf("keep the layout on a multiple of %d nodes (e.g. %d nodes = %d GPUs)", [
		_node_step, _nodes_needed, _nodes_needed * _gpn,
	])
}

_world_size_problems contains {"message": message, "fix": fix} if {
	declared := _count(_par.data)
	dp := _f.dp
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
	_layout.tp > _domain
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("tensor parallel %d exceeds the NVLink domain of %d GPUs on %s", [_layout.tp, _domain, _hw.gpu_type]),
		_with_fix(sprintf("keep tensor parallel within the NVLink domain (tp ≤ %d)", [_domain])),
	)
}

# METADATA
# title: Attention heads not divisible by tp
# description: >-
#   Attention heads must be divisible by tp, and the hidden size by the
#   attention heads unless model.head_dim gives the head width (Megatron-LM
#   kv_channels: GLM-4.5-Air projects 4096 to 96 heads of 128).
# custom:
#   code: TP_HEADS_INDIVISIBLE
#   gate: parallelism
#   fix: Computed per deny - a tp that divides the attention heads.
deny contains v if {
	some p in _heads_problems
	v := lib.violation_fix(rego.metadata.rule(), p.message, p.fix)
}

_heads_problems contains {"message": message, "fix": fix} if {
	_heads % _layout.tp != 0
	message := sprintf("%d attention heads are not divisible by tp=%d", [_heads, _layout.tp])
	fix := _with_fix(sprintf("use a tp that divides the attention heads (%s)", [_divisors_text(_heads)]))
}

_heads_problems contains {"message": message, "fix": fix} if {
	not _is_head_shape_ok
	_hidden % _heads != 0
	message := sprintf("hidden size %d is not divisible by %d attention heads", [_hidden, _heads])
	fix := "check model.hidden_size and model.attention_heads, or declare model.head_dim when heads × head_dim ≠ hidden"
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
	not _is_kv_compatible(_layout.tp)
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
	group := (_f.dp * _layout.cp) * _layout.tp
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
	_experts % _layout.ep != 0
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
	cp := _layout.cp
	cp > 1
	_seq % (2 * cp) != 0
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
	_layout.pp * _layout.v > _layers + _cfg.extra_pipeline_stages
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
#   layers (each a multiple of v) that leave an equal split of the rest. A
#   declared per-stage layout (pipeline_split.stage_layers) must have pp
#   entries summing to the layers, for any engine.
# custom:
#   code: PP_LAYERS_INDIVISIBLE
#   gate: parallelism
#   fix: >-
#     Computed per deny - a pp (and v) that divides the layers, or declare
#     the uneven split in parallelism.pipeline_split.
deny contains v if {
	_layers_indivisible_at(_layout.pp, _layout.v)
	not _has_stage_layers
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("%d layers%s do not split into pp×v = %d×%d equal chunks (%s)", [
			_layers, _split_extra_text, _layout.pp, _layout.v, _declared_split_text,
		]),
		_with_fix(sprintf(
			"use a pp×v that divides %d%s, or declare parallelism.pipeline_split.first_stage_layers/last_stage_layers",
			[_split_units, _accounting_text(_layout.pp, _layout.v)],
		)),
	)
}

# METADATA
# title: Declared pipeline layout does not place the layers
# description: >-
#   pipeline_split.stage_layers must have one entry per pipeline stage and sum
#   to the model's layers (any engine).
# custom:
#   code: PP_LAYERS_INDIVISIBLE
#   gate: parallelism
#   fix: Computed per deny - list pp stage layer counts that sum to the layers.
deny contains v if {
	_layers_indivisible_at(_layout.pp, _layout.v)
	_has_stage_layers
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("pipeline_split.stage_layers %s does not place %d layers on pp=%d stages", [
			_stage_layers_text, _layers, _layout.pp,
		]),
		_with_fix(sprintf("list %d stage layer counts summing to %d", [_layout.pp, _layers])),
	)
}

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
	not _pp_exceeds_layers_at(_layout.pp, _layout.v)
	imbalance := _f.stage_imbalance
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
	_schedule_invalid
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
	_gbs_indivisible_at(_f.batch_unit)
	unit := _f.batch_unit
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("global batch %d is not a positive multiple of micro batch × dp = %d×%d = %d", [
			_gbs, _layout.mbs, _f.dp, unit,
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
	_too_few_microbatches_at(_layout.pp, _f.microbatches)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("%d microbatches per step for %d pipeline stages", [_f.microbatches, _layout.pp]),
		_with_fix(sprintf("raise global_batch_size to at least pp×mbs×dp = %d", [
			_layout.pp * _f.batch_unit,
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
	_engine == "deepspeed"
	_layout.zero_stage >= 2
	_layout.pp > 1
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
	_layout.precision == "fp8"
	_gpu
	not "fp8" in _gpu.precisions
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
	precision := _layout.precision
	precision in {"mxfp8", "nvfp4"}
	_gpu
	not precision in _gpu.precisions
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
	_layout.precision == "bf16"
	_gpu
	not "bf16" in _gpu.precisions
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
	_states_exceed_at(_f.model_states_gb)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("model states need %v GB per GPU (%s) + %v GB overhead > %v GB (%v × %v GB %s)", [
			_f.rounded.model_states_gb, _states_terms, _cfg.memory_overhead_gb,
			lib.round2(_states_limit_gb), _cfg.model_states_max_fraction, _gpu.memory_gb, _hw.gpu_type,
		]),
		_with_fix("use a GPU with more memory, or a lower bytes_per_param (8-bit optimizer states)"),
	)
}

_states_terms := sprintf("%v bytes/param × %vB params per GPU", [
	_f.rounded.bytes_per_param, lib.round2(_f.params_per_gpu / 1e9),
]) if {
	_expert_params == 0
} else := sprintf(
	concat("", [
		"%v bytes/param × %vB dense params + %v bytes/param × %vB expert params per GPU,",
		" experts sharded over %v ranks",
	]),
	[
		_f.rounded.bytes_per_param, lib.round2(_f.dense_params_per_gpu / 1e9),
		_f.rounded.expert_bytes_per_param, lib.round2(_f.expert_params_per_gpu / 1e9),
		lib.round2(_f.expert_data_parallel),
	],
)
