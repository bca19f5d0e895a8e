package ito.parallelism_test

import data.ito.parallelism

# base: torchtitan llama3_8b on 8×8 A100-80GB, FSDP 64, bf16, selective checkpointing
_base := data.ito.testdata.base.input

_set(path, value) := {"op": "add", "path": path, "value": value}

_remove(path) := {"op": "remove", "path": path}

_par(field, value) := _set(concat("", ["/manifest/parallelism/", field]), value)

_gpu(name) := _set("/manifest/hardware/gpu_type", name)

_moe(experts) := _set("/manifest/model/moe", {"experts": experts, "top_k": 2})

# Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1 config.json; expert and active
# parameter counts from its shapes) on one node of 8 H100, Megatron's
# distributed optimizer
_mixtral_one_node := [
	_set("/manifest/model/parameters", 46702792704), _set("/manifest/model/vocab_size", 32000),
	_set("/manifest/model/moe", {
		"experts": 8, "top_k": 2,
		"expert_parameters": 45097156608, "active_parameters": 12879925248,
	}),
	_gpu("H100-SXM-80GB"), _set("/manifest/hardware/nodes", 1), _remove("/manifest/parallelism/data"),
	_par("zero_stage", 1), _par("engine", "megatron"), _par("expert", 8),
	_set("/manifest/objective/sequence_length", 4096), _set("/manifest/objective/global_batch_size", 256),
]

# Llama 3 70B (L 80, h 8192, ffn 28672, 64 heads, 8 kv heads, V 128256)
_llama3_70b := [
	_set("/manifest/model/parameters", 70553706496), _set("/manifest/model/layers", 80),
	_set("/manifest/model/hidden_size", 8192), _set("/manifest/model/ffn_hidden_size", 28672),
	_set("/manifest/model/attention_heads", 64), _set("/manifest/model/kv_heads", 8),
]

# the Megatron-Bridge / NeMo interleaved 70B layout: TP 4, PP 8, VP 5 on 8 × 8 H100, no recompute
_llama3_70b_interleaved := array.concat(_llama3_70b, [
	_gpu("H100-SXM-80GB"), _remove("/manifest/parallelism/data"), _par("tensor", 4), _par("pipeline", 8),
	_par("virtual_stages", 5), _par("zero_stage", 1), _par("engine", "megatron"),
	_par("activation_checkpointing", "none"), _set("/manifest/objective/global_batch_size", 128),
])

# Llama 3 405B as Meta trained it (Llama 3 paper, Dubey et al. 2024, Table 4):
# 16,384 H100, TP 8 × CP 1 × PP 16 × DP 128, sequence 8192, global batch
# 2048 sequences (16M tokens): ~1k tokens per GPU, ~6 s of compute per step
_llama3_405b_production := [
	_set("/manifest/model/parameters", 405853388800), _set("/manifest/model/layers", 126),
	_set("/manifest/model/hidden_size", 16384), _set("/manifest/model/ffn_hidden_size", 53248),
	_set("/manifest/model/attention_heads", 128), _set("/manifest/model/kv_heads", 8),
	_gpu("H100-SXM-80GB"), _set("/manifest/hardware/nodes", 2048), _remove("/manifest/parallelism/data"),
	_par("tensor", 8), _par("pipeline", 16), _par("virtual_stages", 4), _par("zero_stage", 1),
	_par("activation_checkpointing", "full"), _set("/manifest/objective/global_batch_size", 2048),
]

# Llama 3 8B at 512k tokens: TP 2 × CP 16 on 16 × 8 H100, no recompute
_long_context := [
	_gpu("H100-SXM-80GB"), _set("/manifest/hardware/nodes", 16), _remove("/manifest/parallelism/data"),
	_par("tensor", 2), _par("context", 16), _par("zero_stage", 1), _par("engine", "megatron"),
	_par("activation_checkpointing", "none"), _set("/manifest/objective/sequence_length", 524288),
	_set("/manifest/objective/global_batch_size", 4),
]

# Codes and the shape of every finding. The fix search is stubbed here (its
# own tests follow): these tests are about which rules fire, and each search
# costs milliseconds that, times every case, would crowd the test deadline.
# The cases are split over several test rules for the same reason.
test_parallelism_codes_1[name] if {
	some name, tc in _split(_cases, 5, 0)
	_assert_codes(name, tc)
}

test_parallelism_codes_2[name] if {
	some name, tc in _split(_cases, 5, 1)
	_assert_codes(name, tc)
}

test_parallelism_codes_3[name] if {
	some name, tc in _split(_cases, 5, 2)
	_assert_codes(name, tc)
}

test_parallelism_codes_4[name] if {
	some name, tc in _split(_cases, 5, 3)
	_assert_codes(name, tc)
}

test_parallelism_codes_5[name] if {
	some name, tc in _split(_cases, 5, 4)
	_assert_codes(name, tc)
}

_assert_codes(name, tc) if {
	inp := json.patch(_base, tc.patch)
	denied := parallelism.deny with input as inp with parallelism._fix_text as "(fix)"
	warned := parallelism.warn with input as inp
	got := {v.code | some v in denied}
	warned_codes := {v.code | some v in warned}
	print(name, "got", got, "warned", warned_codes)
	got == tc.want
	warned_codes == object.get(tc, "warn", set())
	every v in denied | warned {
		v.gate == "parallelism"
		is_string(v.code)
		is_string(v.message)
		is_string(v.fix)
	}
}

# part k of n of a case table, by the sorted case names
_split(cases, n, k) := {name: cases[name] | some i, name in sort(object.keys(cases)); i % n == k}

_cases := {
	"valid": {"patch": [], "want": set()},
	"declared dp left out": {"patch": [_remove("/manifest/parallelism/data")], "want": set()},
	"unknown gpu": {"patch": [_gpu("TPU-v5p")], "want": {"GPU_TYPE_UNKNOWN"}},
	"gpu type missing": {"patch": [_remove("/manifest/hardware/gpu_type")], "want": {"GPU_TYPE_UNKNOWN"}},
	"unknown fabric": {"patch": [_set("/manifest/hardware/fabric", "myrinet")], "want": {"FABRIC_UNKNOWN"}},
	"tp×pp larger than the world": {
		"patch": [_set("/manifest/hardware/nodes", 1), _par("tensor", 8), _par("pipeline", 16), _remove("/manifest/parallelism/data")],
		"want": {"WORLD_SIZE_MISMATCH"},
	},
	"declared dp wrong": {"patch": [_par("data", 32)], "want": {"WORLD_SIZE_MISMATCH"}},
	"tp across nodes": {
		"patch": [_par("tensor", 16), _par("data", 4)],
		"want": {"TP_EXCEEDS_NVLINK_DOMAIN"},
	},
	"heads not divisible by tp": {
		"patch": [
			_set("/manifest/model/attention_heads", 36), _set("/manifest/model/hidden_size", 4608),
			_par("tensor", 8), _par("data", 8), _set("/manifest/objective/micro_batch_size", 8),
		],
		"want": {"TP_HEADS_INDIVISIBLE"},
	},
	"hidden not divisible by heads": {"patch": [_set("/manifest/model/hidden_size", 4100)], "want": {"TP_HEADS_INDIVISIBLE"}},
	"kv heads incompatible": {
		"patch": [_set("/manifest/model/kv_heads", 12), _par("tensor", 8), _par("data", 8), _set("/manifest/objective/micro_batch_size", 8)],
		"want": {"TP_KV_HEADS_INCOMPATIBLE"},
	},
	"ep without experts": {"patch": [_par("expert", 2)], "want": {"EP_LAYOUT_INVALID"}},
	"ep not dividing dp×cp×tp": {"patch": [_moe(6), _par("expert", 3)], "want": {"EP_LAYOUT_INVALID"}},
	"experts not divisible by ep": {"patch": [_moe(6), _par("expert", 4)], "want": {"EP_EXPERTS_INDIVISIBLE"}},
	"valid moe": {"patch": [_moe(8), _par("expert", 8)], "want": set()},
	"valid moe with expert tensor parallel": {"patch": [_moe(8), _par("expert", 8), _par("expert_tensor", 2)], "want": set()},
	"etp without experts": {"patch": [_par("expert_tensor", 2)], "want": {"EP_LAYOUT_INVALID"}},
	"ep×etp not dividing dp×cp×tp": {
		"patch": [_moe(8), _par("expert", 8), _par("expert_tensor", 16)],
		"want": {"EP_LAYOUT_INVALID"},
	},
	# expert states shard over W/(ep·pp) = 1 rank, not dp·cp = 8: ~90 GB per GPU
	"ep over every data-parallel rank leaves expert states unsharded": {
		"patch": _mixtral_one_node,
		"want": {"MODEL_STATES_EXCEED_GPU_MEMORY"},
		"warn": {"MEMORY_ESTIMATE_EXCEEDS_GPU"},
	},
	# 1 + (pp−1)/(pp·v) = 1.175 times pp microbatches in flight: 75.5 GB > 0.92 × 80
	"interleaved pipeline holds more microbatches in flight": {
		"patch": _llama3_70b_interleaved,
		"want": set(),
		"warn": {"MEMORY_ESTIMATE_EXCEEDS_GPU"},
	},
	"overprovisioned is judged on compute per GPU per step, not tokens per GPU": {
		"patch": _llama3_405b_production,
		"want": set(),
	},
	# 100 GbE warns with bf16 gradients (R ≈ 1.5); Megatron reduces them in fp32 (R ≈ 3)
	"fp32 gradient reduction doubles the sync (Megatron's default with bf16)": {
		"patch": [_set("/manifest/hardware/fabric", "ethernet-100g"), _par("engine", "megatron")],
		"want": {"DP_COMM_BOUND"},
	},
	"gradient reduction declared bf16 on Megatron": {
		"patch": [
			_set("/manifest/hardware/fabric", "ethernet-100g"), _par("engine", "megatron"),
			_par("gradient_reduce_precision", "bf16"),
		],
		"want": set(),
		"warn": {"DP_COMM_BOUND"},
	},
	"fp32 gradient reduction declared": {
		"patch": [_set("/manifest/hardware/fabric", "ethernet-100g"), _par("gradient_reduce_precision", "fp32")],
		"want": {"DP_COMM_BOUND"},
	},
	# Llama 3 70B's 80 layers on pp 6 (Megatron builds equal chunks)
	"layers not divisible by pp on Megatron": {
		"patch": array.concat(_llama3_70b, [
			_par("tensor", 8), _par("pipeline", 6), _remove("/manifest/parallelism/data"), _par("engine", "megatron"),
			_set("/manifest/hardware/nodes", 6), _set("/manifest/objective/global_batch_size", 48),
		]),
		"want": {"PP_LAYERS_INDIVISIBLE"},
	},
	"uneven split declared: 14 + 4 × 13 + 14 layers": {
		"patch": array.concat(_llama3_70b, [
			_par("tensor", 8), _par("pipeline", 6), _remove("/manifest/parallelism/data"), _par("engine", "megatron"),
			_set("/manifest/hardware/nodes", 6), _set("/manifest/objective/global_batch_size", 48),
			_par("pipeline_split", {"first_stage_layers": 14, "last_stage_layers": 14}),
		]),
		"want": set(),
	},
	"embedding and loss stages: 80 + 2 layers over pp 2 × v 41": {
		"patch": array.concat(_llama3_70b, [
			_par("tensor", 8), _par("pipeline", 2), _par("virtual_stages", 41), _remove("/manifest/parallelism/data"),
			_par("engine", "megatron"), _set("/manifest/objective/global_batch_size", 64),
			_par("pipeline_split", {"embedding_stage": true, "loss_stage": true}),
		]),
		"want": set(),
	},
	"uneven split declared wrongly": {
		"patch": array.concat(_llama3_70b, [
			_par("tensor", 8), _par("pipeline", 6), _remove("/manifest/parallelism/data"), _par("engine", "megatron"),
			_set("/manifest/hardware/nodes", 6), _set("/manifest/objective/global_batch_size", 48),
			_par("pipeline_split", {"first_stage_layers": 11}),
		]),
		"want": {"PP_LAYERS_INDIVISIBLE"},
	},
	"torchtitan splits 80 layers over pp 6 unevenly": {
		"patch": array.concat(_llama3_70b, [
			_par("tensor", 8), _par("pipeline", 6), _remove("/manifest/parallelism/data"),
			_set("/manifest/hardware/nodes", 6), _set("/manifest/objective/global_batch_size", 48),
		]),
		"want": set(),
	},
	"unbalanced stages on torchtitan: 32 layers over pp 24": {
		"patch": [_par("pipeline", 24), _remove("/manifest/parallelism/data"), _set("/manifest/hardware/nodes", 3), _set("/manifest/objective/global_batch_size", 48)],
		"want": set(),
		"warn": {"PP_LAYERS_UNBALANCED", "PP_BUBBLE_TOO_LARGE"},
	},
	# 10 GbE: 0.16 GB/s per GPU for the gradient all-reduce across nodes
	"10 GbE": {"patch": [_set("/manifest/hardware/fabric", "ethernet-10g")], "want": {"DP_COMM_BOUND"}},
	"V100 16 GB in fp16": {
		"patch": [_gpu("V100-16GB"), _par("precision", "fp16")],
		"want": set(),
		"warn": {"MEMORY_ESTIMATE_EXCEEDS_GPU"},
	},
	"H100 NVL: tensor parallel within its NVLink pair only": {
		"patch": [_gpu("H100-NVL"), _par("tensor", 4), _par("data", 16)],
		"want": {"TP_EXCEEDS_NVLINK_DOMAIN"},
	},
	"H100 96 GB": {"patch": [_gpu("H100-96GB")], "want": set(), "warn": {"OVERPROVISIONED_SMALL_MODEL"}},
	"interleaved schedule without virtual stages": {
		"patch": [_par("pipeline", 2), _par("data", 32), _par("pipeline_schedule", "interleaved")],
		"want": {"PP_SCHEDULE_INVALID"},
		"warn": {"PP_BUBBLE_TOO_LARGE"},
	},
	"virtual stages with a zero-bubble schedule": {
		"patch": [_par("pipeline", 2), _par("data", 32), _par("virtual_stages", 2), _par("pipeline_schedule", "zero_bubble")],
		"want": {"PP_SCHEDULE_INVALID"},
	},
	# 1F1B leaves (pp−1)/(m+pp−1) = 0.33 idle at m = 2; ZB-H1 a third of it
	"zero-bubble schedule shrinks the bubble": {
		"patch": [_par("pipeline", 2), _par("data", 32), _par("pipeline_schedule", "zero_bubble")],
		"want": set(),
	},
	"dualpipe schedule": {
		"patch": [_par("pipeline", 4), _par("data", 16), _par("pipeline_schedule", "dualpipe"), _set("/manifest/objective/global_batch_size", 256)],
		"want": set(),
	},
	# logits per CP rank (s/cp): 97 GB, below the 1.5 × 80 GB deny line
	"long context with cp is not denied on the logits": {
		"patch": _long_context,
		"want": set(),
		"warn": {"MEMORY_ESTIMATE_EXCEEDS_GPU"},
	},
	"moe top_k above the experts": {
		"patch": [_set("/manifest/model/moe", {"experts": 8, "top_k": 16, "expert_ffn_hidden_size": 1024})],
		"want": {"MOE_CONFIG_INVALID"},
	},
	"moe expert parameters above the total": {
		"patch": [_set("/manifest/model/moe", {"experts": 8, "top_k": 2, "expert_parameters": 9000000000})],
		"want": {"MOE_CONFIG_INVALID"},
	},
	"moe active parameters above the total": {
		"patch": [_set("/manifest/model/moe", {"experts": 8, "top_k": 2, "active_parameters": 9000000000})],
		"want": {"MOE_CONFIG_INVALID"},
	},
	"zero-2": {"patch": [_par("zero_stage", 2)], "want": set()},
	"heads on an unknown gpu": {
		"patch": [
			_gpu("TPU-v5p"), _set("/manifest/model/attention_heads", 36), _set("/manifest/model/hidden_size", 4608),
			_par("tensor", 8), _par("data", 8), _set("/manifest/objective/micro_batch_size", 8),
		],
		"want": {"GPU_TYPE_UNKNOWN", "TP_HEADS_INDIVISIBLE"},
	},
	"sequence not divisible by 2cp": {
		"patch": [_par("context", 2), _par("data", 32), _set("/manifest/objective/sequence_length", 8190)],
		"want": {"CP_SEQ_INDIVISIBLE"},
		"warn": {"CP_ON_SHORT_SEQ"},
	},
	"more stages than layers": {
		"patch": [_set("/manifest/model/layers", 4), _par("pipeline", 8), _par("data", 8)],
		"want": {"PP_EXCEEDS_LAYERS"},
		"warn": {"PP_BUBBLE_TOO_LARGE"},
	},
	"global batch not a multiple": {
		"patch": [_set("/manifest/objective/global_batch_size", 100)],
		"want": {"GBS_NOT_DIVISIBLE"},
	},
	"global batch below mbs×dp": {
		"patch": [_set("/manifest/objective/global_batch_size", 32)],
		"want": {"GBS_NOT_DIVISIBLE"},
	},
	"too few microbatches": {
		"patch": [_par("pipeline", 2), _par("data", 32), _set("/manifest/objective/global_batch_size", 32)],
		"want": {"PP_TOO_FEW_MICROBATCHES"},
		"warn": {"PP_BUBBLE_TOO_LARGE"},
	},
	"bubble above the deny threshold": {
		"patch": [_par("pipeline", 4), _par("data", 16), _set("/manifest/objective/global_batch_size", 32)],
		"want": {"PP_TOO_FEW_MICROBATCHES", "PP_BUBBLE_TOO_LARGE"},
	},
	"bubble above the warn threshold": {
		"patch": [_par("pipeline", 2), _par("data", 32)],
		"want": set(),
		"warn": {"PP_BUBBLE_TOO_LARGE"},
	},
	"interleaving shrinks the bubble": {
		"patch": [_par("pipeline", 2), _par("data", 32), _par("virtual_stages", 2)],
		"want": set(),
	},
	"deepspeed zero-3 with pp": {
		"patch": [_par("engine", "deepspeed"), _par("pipeline", 2), _par("data", 32), _set("/manifest/objective/global_batch_size", 128)],
		"want": {"ZERO23_WITH_PP"},
	},
	"torchtitan fsdp with pp": {
		"patch": [_par("pipeline", 2), _par("data", 32), _set("/manifest/objective/global_batch_size", 128)],
		"want": set(),
	},
	"fp8 on A100": {"patch": [_par("precision", "fp8")], "want": {"FP8_UNSUPPORTED_GPU"}},
	# (on an H100 the base layout computes 0.99 s per step: the 8B model would fit on 8 GPUs)
	"fp8 on H100": {
		"patch": [_par("precision", "fp8"), _gpu("H100-SXM-80GB")],
		"want": set(),
		"warn": {"OVERPROVISIONED_SMALL_MODEL"},
	},
	"mxfp8 on H100": {
		"patch": [_par("precision", "mxfp8"), _gpu("H100-SXM-80GB")],
		"want": {"MXFP8_UNSUPPORTED_GPU"},
		"warn": {"OVERPROVISIONED_SMALL_MODEL"},
	},
	"nvfp4 on MI355X": {
		"patch": [_par("precision", "nvfp4"), _gpu("MI355X")],
		"want": {"MXFP8_UNSUPPORTED_GPU"},
		"warn": {"OVERPROVISIONED_SMALL_MODEL"},
	},
	"nvfp4 on B200": {
		"patch": [_par("precision", "nvfp4"), _gpu("B200")],
		"want": set(),
		"warn": {"OVERPROVISIONED_SMALL_MODEL"},
	},
	"bf16 on V100": {
		"patch": [_gpu("V100-32GB")],
		"want": {"BF16_UNSUPPORTED_GPU"},
		"warn": {"MEMORY_ESTIMATE_EXCEEDS_GPU"},
	},
	"fp16 on V100": {
		"patch": [_gpu("V100-32GB"), _par("precision", "fp16")],
		"want": set(),
		"warn": {"MEMORY_ESTIMATE_EXCEEDS_GPU"},
	},
	"70B with plain DDP": {
		"patch": [_set("/manifest/model/parameters", 70000000000), _par("zero_stage", 0)],
		"want": {"MODEL_STATES_EXCEED_GPU_MEMORY"},
		"warn": {"MEMORY_ESTIMATE_EXCEEDS_GPU"},
	},
	"bytes per param override too large": {
		"patch": [_par("bytes_per_param", 16)],
		"want": {"MODEL_STATES_EXCEED_GPU_MEMORY"},
		"warn": {"MEMORY_ESTIMATE_EXCEEDS_GPU"},
	},
	"slow ethernet": {
		"patch": [_set("/manifest/hardware/fabric", "ethernet-25g")],
		"want": {"DP_COMM_BOUND"},
	},
	"100 GbE": {
		"patch": [_set("/manifest/hardware/fabric", "ethernet-100g")],
		"want": set(),
		"warn": {"DP_COMM_BOUND"},
	},
	"tiny sequences": {
		"patch": [_set("/manifest/objective/sequence_length", 64)],
		"want": {"TOKENS_PER_GPU_TOO_SMALL", "DP_COMM_BOUND"},
		"warn": {"OVERPROVISIONED_SMALL_MODEL"},
	},
	"short sequences": {
		"patch": [_set("/manifest/objective/sequence_length", 256)],
		"want": {"DP_COMM_BOUND"},
		"warn": {"TOKENS_PER_GPU_TOO_SMALL", "OVERPROVISIONED_SMALL_MODEL"},
	},
	"no checkpointing, big micro batch": {
		"patch": [
			_par("activation_checkpointing", "none"), _set("/manifest/objective/micro_batch_size", 8),
			_set("/manifest/objective/global_batch_size", 512),
		],
		"want": {"MEMORY_ESTIMATE_EXCEEDS_GPU"},
	},
	"micro batch 2 near the limit": {
		"patch": [_set("/manifest/objective/micro_batch_size", 2), _set("/manifest/objective/global_batch_size", 128)],
		"want": set(),
		"warn": {"MEMORY_ESTIMATE_EXCEEDS_GPU"},
	},
	"tp straddling the NVL72 domain": {
		"patch": [_gpu("GB200"), _par("tensor", 16), _par("data", 4)],
		"want": set(),
		"warn": {"TP_GROUP_STRADDLES_DOMAIN"},
	},
	"ep across nodes": {
		"patch": [_moe(16), _par("expert", 16)],
		"want": set(),
		"warn": {"EP_EXCEEDS_NVLINK_DOMAIN"},
	},
	"cp on short sequences": {
		"patch": [_par("context", 2), _par("data", 32), _set("/manifest/objective/sequence_length", 4096)],
		"want": set(),
		"warn": {"CP_ON_SHORT_SEQ"},
	},
	"small model, small batch, many GPUs": {
		"patch": [_set("/manifest/objective/sequence_length", 2048)],
		"want": set(),
		"warn": {"OVERPROVISIONED_SMALL_MODEL"},
	},
}

test_base_estimates if {
	parallelism.estimates == {
		"world_size": 64, "dp": 64, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "etp": 1, "virtual_stages": 1,
		"microbatches": 1, "tokens_per_gpu": 8192, "bytes_per_param": 0.25, "pipeline_schedule": "1f1b",
		"model_states_gb_per_gpu": 2.01, "activations_gb_per_gpu": 38.56, "memory_gb_per_gpu": 43.57,
		"gpu_memory_gb": 80, "bubble_fraction": 0, "dp_comm_compute_ratio": 0.11,
	} with input as _base
}

_violation(patch) := [v | some v in parallelism.deny with input as json.patch(_base, patch)]

# The model's numbers for the found kinds, each against the formula by hand.
test_expert_states_shard_over_the_expert_data_parallel_group if {
	est := parallelism.estimates with input as json.patch(_base, _mixtral_one_node) with parallelism._fix_text as "(fix)"
	est.expert_data_parallel == 1 # W/(ep·etp·pp) = 8/8

	# Megatron's distributed optimizer with fp32 gradients (its default for bf16):
	# 6 + 12/d bytes per parameter (Megatron Core distributed-optimizer guide), not 4 + 12/d
	est.expert_bytes_per_param == 18 # over 1 rank: 6 + 12/1
	est.bytes_per_param == 7.5 # dense: 6 + 12/8

	# 1.6056e9 × 7.5 + 45.097e9/8 × 18
	est.model_states_gb_per_gpu == 113.51

	# four nodes: ep 8 over dp 32 → edp 4, 6 + 12/4 = 9 bytes per expert parameter
	four := parallelism.estimates with input as json.patch(_base, array.concat(_mixtral_one_node, [_set("/manifest/hardware/nodes", 4)]))
	four.expert_data_parallel == 4
	four.expert_bytes_per_param == 9
}

# Megatron's other rows: bf16 gradients 4 + 16/d (the fp32 main gradients are
# sharded too), fp32 training 8 + 8/d; without the distributed optimizer the
# same bytes unsharded (20, 18, 16)
test_megatron_distributed_optimizer_rows if {
	bf16 := parallelism.estimates with input as json.patch(_base, array.concat(_mixtral_one_node, [_par("gradient_reduce_precision", "bf16")]))
	bf16.bytes_per_param == 6 # 4 + 16/8
	bf16.expert_bytes_per_param == 20
	fp32 := parallelism.estimates with input as json.patch(_base, array.concat(_mixtral_one_node, [_par("precision", "fp32")]))
	fp32.bytes_per_param == 9 # 8 + 8/8
	ddp := parallelism.estimates with input as json.patch(_base, array.concat(_mixtral_one_node, [_par("zero_stage", 0)]))
	ddp.bytes_per_param == 18
	torchtitan := parallelism.estimates with input as json.patch(_base, array.concat(_mixtral_one_node, [_par("engine", "torchtitan")]))
	torchtitan.bytes_per_param == 5.5 # ZeRO-1 4 + 12/8 outside Megatron
}

test_expert_tensor_parallel_divides_the_expert_shard if {
	patch := array.concat(_mixtral_one_node, [_set("/manifest/hardware/nodes", 4), _par("expert", 4), _par("expert_tensor", 2)])
	est := parallelism.estimates with input as json.patch(_base, patch)
	est.etp == 2
	est.expert_data_parallel == 4 # 32/(4·2)
	est.expert_bytes_per_param == 9 # 6 + 12/4
}

test_interleaved_penalty_on_activations if {
	est := parallelism.estimates with input as json.patch(_base, _llama3_70b_interleaved)

	# first stage: 10 layers × 8 × 1.175 microbatches × 8192·8192·(18 + 4·3.5)/4 bytes = 50.47 GB
	est.activations_gb_per_gpu == 50.47
	flat := parallelism.estimates with input as json.patch(_base, array.concat(_llama3_70b_interleaved, [_par("virtual_stages", 1)]))
	flat.activations_gb_per_gpu == 42.95
}

test_logits_per_context_parallel_rank if {
	est := parallelism.estimates with input as json.patch(_base, _long_context)

	# 32 layers × 32768·4096·32/2 + 4·32768·128256/2 (logits of s/cp tokens) = 77.12 GB
	est.activations_gb_per_gpu == 77.12
}

test_sequence_parallel_off_keeps_layernorm_activations_whole if {
	tp8 := [_gpu("H100-SXM-80GB"), _par("tensor", 8), _par("data", 8), _par("activation_checkpointing", "none")]
	on := parallelism.estimates with input as json.patch(_base, tp8)
	off := parallelism.estimates with input as json.patch(_base, array.concat(tp8, [_par("sequence_parallel", false)]))

	# per layer 8192·4096·(18 + 4·3.5)/8 with, + 10·8192·4096·(1 − 1/8) without; 32 layers + logits
	on.activations_gb_per_gpu == 4.82
	off.activations_gb_per_gpu == 14.22
}

test_pipeline_schedules if {
	pp4 := [_par("pipeline", 4), _par("data", 16), _set("/manifest/objective/global_batch_size", 64)]
	est := {s: e |
		some s in ["1f1b", "zero_bubble", "dualpipe"]
		e := parallelism.estimates with input as json.patch(_base, array.concat(pp4, [_par("pipeline_schedule", s)]))
	}

	# m = 4: 1F1B 3/7; ZB-H1 1/(4+1); DualPipe (4/2 − 1)/(4 + 1)
	est["1f1b"].bubble_fraction == 0.43
	est.zero_bubble.bubble_fraction == 0.2
	est.dualpipe.bubble_fraction == 0.2

	# DualPipe holds two chunks' parameters
	abs(est.dualpipe.model_states_gb_per_gpu - (2 * est["1f1b"].model_states_gb_per_gpu)) <= 0.015
	est["1f1b"].pipeline_schedule == "1f1b"
	interleaved := parallelism.estimates with input as json.patch(_base, array.concat(pp4, [_par("virtual_stages", 2)]))
	interleaved.pipeline_schedule == "interleaved"
}

test_no_fix_layout_on_allow if {
	not parallelism.estimates.fix_layout with input as _base
	not parallelism._fix with input as json.patch(_base, [_gpu("TPU-v5p")])
}

# The narrow query Go confirms each proposed layout with names exactly the
# gate's denies: each case's codes, sorted (a fix or plan it passes has no deny).
test_confirm_names_every_deny[name] if {
	some name, tc in _cases
	inp := json.patch(_base, tc.patch)
	parallelism.confirm.deny == sort(tc.want) with input as inp with parallelism._fix_text as "(fix)"
}

test_declared_dp_is_not_a_layout_failure if {
	inp := json.patch(_base, [_par("data", 32)])
	[v.code | some v in parallelism.deny with input as inp] == ["WORLD_SIZE_MISMATCH"]
}

test_messages[name] if {
	some name, tc in {
		"tp across nodes": {
			"patch": [_par("tensor", 16), _par("data", 4)],
			"message": "tensor parallel 16 exceeds the NVLink domain of 8 GPUs on A100-80GB",
		},
		"states": {
			"patch": [_set("/manifest/model/parameters", 70000000000), _par("zero_stage", 0)],
			"message": "model states need 1120 GB per GPU (16 bytes/param × 70B params per GPU) + 3 GB overhead > 76 GB (0.95 × 80 GB A100-80GB)",
		},
		"moe": {
			"patch": [_set("/manifest/model/moe", {"experts": 8, "top_k": 16})],
			"message": "moe.top_k 16 exceeds the 8 experts",
		},
	}
	denied := parallelism.deny with input as json.patch(_base, tc.patch) with parallelism._fix_text as "(fix)"
	messages := {v.message | some v in denied}
	print(name, messages)
	tc.message in messages
}

# GLM-4.5-Air (hidden 4096, 96 heads of head_dim 128, 8 kv heads): with
# model.head_dim the hidden size need not be a multiple of the heads; without
# it, it must.
test_head_dim_lets_heads_times_head_dim_differ_from_hidden if {
	glm := [
		_set("/manifest/model/attention_heads", 96), _set("/manifest/model/kv_heads", 8),
		_set("/manifest/model/head_dim", 128),
	]
	with_dim := json.patch(_base, glm)
	codes := {v.code | some v in parallelism.deny} with input as with_dim with parallelism._fix_text as "(fix)"
	not "TP_HEADS_INDIVISIBLE" in codes
	without := json.patch(_base, array.slice(glm, 0, 2))
	"TP_HEADS_INDIVISIBLE" in {v.code | some v in parallelism.deny} with input as without with parallelism._fix_text as "(fix)"
}

# A routed token keeps the MLP activations of each of its top_k experts (and
# of the shared experts): Mixtral's per-layer term is 18 + 4·2·14336/4096 = 46
# bytes per token and hidden unit, not 18 + 4·14336/4096 = 32.
test_moe_activations_count_the_top_k_experts if {
	one_expert := array.concat(_mixtral_one_node, [_set("/manifest/model/moe/top_k", 1)])
	top1 := parallelism._mlp_width with input as json.patch(_base, one_expert)
	top2 := parallelism._mlp_width with input as json.patch(_base, _mixtral_one_node)
	top1 == 14336
	top2 == 28672
	shared := array.concat(_mixtral_one_node, [
		_set("/manifest/model/moe/expert_ffn_hidden_size", 2048),
		_set("/manifest/model/moe/shared_expert_ffn_hidden_size", 2048),
	])
	parallelism._mlp_width == 6144 with input as json.patch(_base, shared) # 2 × 2048 + 2048

	# 32 layers × 4096·4096·(18 + 4·28672/4096)/1 + 4·4096·32000 fp32 logits
	est := parallelism.estimates with input as json.patch(_base, _mixtral_one_node) with parallelism._fix_text as "(fix)"
	est.activations_gb_per_gpu == 25.22
}

# Megatron-LM: the embedding (first stage) and the loss (last stage) count as
# layers: 126 + 2 = 128 units over pp 8 leave 15 transformer layers on the
# first and the last stage, not ceil(126/8) = 16.
test_end_stages_price_the_embedding_and_loss_units if {
	llama405 := [
		_set("/manifest/model/layers", 126), _par("engine", "megatron"),
		_par("pipeline_split", {"embedding_stage": true, "loss_stage": true}),
	]
	inp := json.patch(_base, llama405)
	parallelism._end_stage_layers("first_stage_layers", 8) == 15 with input as inp
	parallelism._end_stage_layers("last_stage_layers", 8) == 15 with input as inp
	plain := json.patch(_base, [_set("/manifest/model/layers", 126)])
	parallelism._end_stage_layers("first_stage_layers", 8) == 16 with input as plain
}

# Megatron Core splits a declared first/last stage into v chunks as well, so
# its layers must be a multiple of v: 9 + 32 + 32 + 7 over pp 4 × v 2 is
# refused (9 and 7 are odd), 10 + 30 + 30 + 10 is not.
test_end_stage_layers_must_be_whole_chunks if {
	odd := json.patch(_base, [_par("engine", "megatron"), _set("/manifest/model/layers", 80), _par("pipeline_split", {
		"first_stage_layers": 9,
		"last_stage_layers": 7,
	})])
	parallelism._layers_indivisible_at(4, 2) with input as odd
	not parallelism._layers_indivisible_at(4, 1) with input as odd
	even := json.patch(_base, [_par("engine", "megatron"), _set("/manifest/model/layers", 80), _par("pipeline_split", {
		"first_stage_layers": 10,
		"last_stage_layers": 10,
	})])
	not parallelism._layers_indivisible_at(4, 2) with input as even
}

# An explicit per-stage layout (DeepSeek-V3's 61 layers on pp 16: 3, 14 × 4, 2):
# one entry per stage summing to the layers; its end entries price the end stages.
test_explicit_stage_layout if {
	layout := array.concat(array.concat([3], [n | some _ in numbers.range(1, 14); n := 4]), [2])
	inp := json.patch(_base, [
		_par("engine", "nemo"), _set("/manifest/model/layers", 61),
		_par("pipeline_split", {"stage_layers": layout}),
	])
	not parallelism._layers_indivisible_at(16, 1) with input as inp
	parallelism._layers_indivisible_at(8, 1) with input as inp
	parallelism._end_stage_layers("first_stage_layers", 16) == 3 with input as inp
	parallelism._end_stage_layers("last_stage_layers", 16) == 2 with input as inp
	short := json.patch(_base, [
		_set("/manifest/model/layers", 61),
		_par("pipeline_split", {"stage_layers": [4, 4]}),
	])
	parallelism._layers_indivisible_at(2, 1) with input as short # 8 of 61 layers, any engine
}

# The PP_LAYERS_INDIVISIBLE fix names the option the NVIDIA recipes use:
# Llama 3 405B's 126 layers over pp 8 × v 8 balance with the embedding and the
# loss counted as layers (128 = 8 × 8 × 2).
test_layers_fix_names_embedding_and_loss_accounting if {
	inp := json.patch(_base, [_par("engine", "megatron"), _set("/manifest/model/layers", 126)])
	text := parallelism._accounting_text(8, 8) with input as inp
	text == concat("", [
		", or count the embedding and the loss as layers",
		" (pipeline_split.embedding_stage and loss_stage: 128 = 8×8×2)",
	])
	parallelism._accounting_text(5, 1) == "" with input as inp # neither 127 nor 128 splits over 5
}

# The fix as data and text: Go's search (gatekeeper/plan, its own tests)
# hands the fix over as input.facts.parallelism.fix; here it is mocked.
_a_fix := {
	"on_booked_hardware": true, "searched_nodes": [8], "evaluated": 100,
	"layout": {
		"nodes": 8, "tp": 2, "pp": 1, "cp": 1, "ep": 1, "etp": 1, "v": 1, "mbs": 1, "zero_stage": 3,
		"checkpointing": "selective", "precision": "bf16", "schedule": "1f1b",
	},
	"figures": {
		"data": 32, "microbatches": 2, "bubble_fraction": 0, "model_states_gb_per_gpu": 2.51,
		"memory_gb_per_gpu": 40.1, "dp_comm_compute_ratio": 0.05,
	},
}

_tp16 := json.patch(_base, [_par("tensor", 16), _par("data", 4)])

test_fix_text_names_the_nearest_layout if {
	some v in parallelism.deny with input as _tp16 with parallelism._fix as _a_fix
	v.code == "TP_EXCEEDS_NVLINK_DOMAIN"
	startswith(v.fix, concat("", [
		"nearest passing layout on 8 × 8 A100-80GB (1 change: tensor 16 → 2): tensor=2, pipeline=1, context=1,",
		" expert=1, virtual_stages=1, data=32, micro_batch_size=1, zero_stage=3, activation_checkpointing=selective,",
		" precision=bf16. Or: ",
	]))
	fix := parallelism.estimates.fix_layout with input as _tp16 with parallelism._fix as _a_fix
	fix.tensor == 2
	fix.memory_gb_per_gpu == 40.1
	fix.changes == ["tensor 16 → 2"]
	not fix.best
}

test_fix_text_names_the_best_layout if {
	best := {"layout": object.union(_a_fix.layout, {"tp": 1}), "figures": _a_fix.figures, "estimates": {"step_seconds": 3.2}}
	fix := object.union(_a_fix, {"best": best})
	some v in parallelism.deny with input as _tp16 with parallelism._fix as fix
	v.code == "TP_EXCEEDS_NVLINK_DOMAIN"
	contains(v.fix, "; least estimated cost: tensor=1, pipeline=1, context=1, expert=1, virtual_stages=1, data=64, ")
	contains(v.fix, "precision=bf16, 3.2 s per step. Or: ")
	layout := parallelism.estimates.fix_layout with input as _tp16 with parallelism._fix as fix
	layout.best.tensor == 1
	layout.best.estimates.step_seconds == 3.2
}

# expert_tensor is named only in a layout that uses it
test_fix_text_names_expert_tensor_where_used if {
	layout := object.union(_a_fix.layout, {"ep": 2, "etp": 2})
	some v in parallelism.deny with input as _tp16 with parallelism._fix as object.union(_a_fix, {"layout": layout})
	v.code == "TP_EXCEEDS_NVLINK_DOMAIN"
	startswith(v.fix, concat("", [
		"nearest passing layout on 8 × 8 A100-80GB (3 changes: tensor 16 → 2, expert 1 → 2, expert_tensor 1 → 2):",
		" tensor=2, pipeline=1, context=1, expert=2, expert_tensor=2, virtual_stages=1, data=32, micro_batch_size=1,",
		" zero_stage=3, activation_checkpointing=selective, precision=bf16. Or: ",
	]))
}

test_fix_text_past_the_budget if {
	fix := {"on_booked_hardware": true, "searched_nodes": [8], "evaluated": 200000, "budget_exceeded": true}
	some v in parallelism.deny with input as _tp16 with parallelism._fix as fix
	v.code == "TP_EXCEEDS_NVLINK_DOMAIN"
	startswith(v.fix, "the layout search stopped at its budget of 200000 layouts on 8 × 8 A100-80GB before finding one that passes. Or: ")
	layout := parallelism.estimates.fix_layout with input as _tp16 with parallelism._fix as fix
	layout == {"on_booked_hardware": false, "budget_exceeded": true, "evaluated_layouts": 200000}
}

test_fix_text_no_layout_on_any_searched_count if {
	fix := {"on_booked_hardware": false, "searched_nodes": [8, 2, 3], "evaluated": 900}
	some v in parallelism.deny with input as _tp16 with parallelism._fix as fix
	v.code == "TP_EXCEEDS_NVLINK_DOMAIN"
	startswith(v.fix, "no layout on 8 × 8 A100-80GB passes every parallelism rule, nor on 2, 3 nodes of 8 A100-80GB. Or: ")
	layout := parallelism.estimates.fix_layout with input as _tp16 with parallelism._fix as fix
	layout == {"on_booked_hardware": false, "searched_nodes": [8, 2, 3]}
}

test_fix_text_without_facts if {
	some v in parallelism.deny with input as _tp16
	v.code == "TP_EXCEEDS_NVLINK_DOMAIN"
	startswith(v.fix, "no layout search: ")
}

test_confirm if {
	parallelism.confirm == {"deny": [], "memory_over_margin": false} with input as _base
	parallelism.confirm == {"deny": ["TP_EXCEEDS_NVLINK_DOMAIN"], "memory_over_margin": false} with input as _tp16
	c := parallelism.confirm with input as _base with data.ito.config.parallelism.memory_warn_fraction as 0.1
	c.memory_over_margin
}

# estimates is one object when every figure is there: the same keys and
# values as the per-key rules, with an MoE model and with a deny's fix too
test_estimates_are_the_per_key_rules[name] if {
	some name, inp in {
		"base": _base,
		"moe": json.patch(_base, _mixtral_one_node),
		"deny with a fix": _tp16,
	}
	est := parallelism.estimates with input as inp with parallelism._fix as _a_fix
	est == {k: v | some k, v in parallelism._estimates} with input as inp with parallelism._fix as _a_fix
	count(est) >= 18
}

# An explicit per-stage layout must list one count per stage and place every layer (any engine);
# the message shows a list of counts, and withholds a list of anything else.
test_stage_layers_must_place_every_layer if {
	inp := json.patch(_base, [_par("pipeline", 2), _par("data", 32), _par("pipeline_split", {"stage_layers": [16, 15]})])
	[v.message | some v in parallelism.deny with input as inp with parallelism._fix_text as "(fix)"] == [
		"pipeline_split.stage_layers [16,15] does not place 32 layers on pp=2 stages",
	]
	odd := json.patch(_base, [_par("pipeline", 2), _par("data", 32), _par("pipeline_split", {"stage_layers": [16, "sk-live-0123"]})])
	[v.message | some v in parallelism.deny with input as odd with parallelism._fix_text as "(fix)"] == [
		"pipeline_split.stage_layers (withheld) does not place 32 layers on pp=2 stages",
	]
	ok := json.patch(_base, [_par("pipeline", 2), _par("data", 32), _par("pipeline_split", {"stage_layers": [17, 15]})])
	not "PP_LAYERS_INDIVISIBLE" in {v.code | some v in parallelism.deny} with input as ok
}

# A bundle without extra_pipeline_stages leaves the stage-count deny undefined,
# and PP_LAYERS_UNBALANCED still warns (its negation goes through a helper).
test_unbalanced_warn_without_extra_stages if {
	tc := _cases["unbalanced stages on torchtitan: 32 layers over pp 24"]
	inp := json.patch(_base, tc.patch)
	cfg := object.remove(data.ito.config.parallelism, ["extra_pipeline_stages"])
	{v.code | some v in parallelism.warn} == tc.warn with input as inp with data.ito.config.parallelism as cfg
}
