package ito.parallelism_test

import data.ito.parallelism

# base: torchtitan llama3_8b on 8×8 A100-80GB, FSDP 64, bf16, selective checkpointing
_base := data.ito.testdata.base.input

_set(path, value) := {"op": "add", "path": path, "value": value}

_remove(path) := {"op": "remove", "path": path}

_par(field, value) := _set(concat("", ["/manifest/parallelism/", field]), value)

_gpu(name) := _set("/manifest/hardware/gpu_type", name)

_moe(experts) := _set("/manifest/model/moe", {"experts": experts, "top_k": 2})

test_parallelism_codes[name] if {
	some name, tc in _cases
	inp := json.patch(_base, tc.patch)
	got := {v.code | some v in parallelism.deny with input as inp}
	warned := {v.code | some v in parallelism.warn with input as inp}
	print(name, "got", got, "warned", warned)
	got == tc.want
	warned == object.get(tc, "warn", set())
}

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
	"fp8 on H100": {"patch": [_par("precision", "fp8"), _gpu("H100-SXM-80GB")], "want": set()},
	"mxfp8 on H100": {"patch": [_par("precision", "mxfp8"), _gpu("H100-SXM-80GB")], "want": {"MXFP8_UNSUPPORTED_GPU"}},
	"nvfp4 on MI355X": {"patch": [_par("precision", "nvfp4"), _gpu("MI355X")], "want": {"MXFP8_UNSUPPORTED_GPU"}},
	"nvfp4 on B200": {"patch": [_par("precision", "nvfp4"), _gpu("B200")], "want": set()},
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
		"world_size": 64, "dp": 64, "tp": 1, "pp": 1, "cp": 1, "ep": 1,
		"microbatches": 1, "tokens_per_gpu": 8192, "bytes_per_param": 0.25,
		"model_states_gb_per_gpu": 2.01, "activations_gb_per_gpu": 38.56, "memory_gb_per_gpu": 43.57,
		"gpu_memory_gb": 80, "bubble_fraction": 0, "dp_comm_compute_ratio": 0.11,
	} with input as _base
}

_violation(patch) := [v | some v in parallelism.deny with input as json.patch(_base, patch)]

test_fixes[name] if {
	some name, tc in {
		"tp across nodes": {
			"patch": [_par("tensor", 16), _par("data", 4)],
			"fix": "keep tensor parallel within the node: tp ≤ 8; try tp=8, pp=2",
		},
		"world size": {
			"patch": [_set("/manifest/hardware/nodes", 1), _par("tensor", 8), _par("pipeline", 16), _remove("/manifest/parallelism/data")],
			"fix": "use a multiple of 16 nodes (e.g. 16 nodes = 128 GPUs), or pp=1 on 8 GPUs",
		},
		"declared dp": {"patch": [_par("data", 32)], "fix": "set parallelism.data to 64 or leave it out"},
		"world size without a smaller pp": {
			"patch": [_set("/manifest/hardware/nodes", 1), _set("/manifest/hardware/gpus_per_node", 6), _par("tensor", 4), _remove("/manifest/parallelism/data")],
			"fix": "use a multiple of 2 nodes (e.g. 2 nodes = 12 GPUs)",
		},
		"states with pp": {
			"patch": [_set("/manifest/model/parameters", 35000000000), _par("pipeline", 2), _par("data", 32), _set("/manifest/objective/global_batch_size", 128)],
			"fix": "shard further: ZeRO-1 (with pp > 1 stage weights and gradients stay unsharded) over dp×cp ≥ 70 GPUs fits (18 nodes of 8), or add tensor/pipeline parallelism, or use a GPU with more memory",
		},
		"states with pp, ZeRO-1 cannot fit": {
			"patch": [_set("/manifest/model/parameters", 70000000000), _par("pipeline", 2), _par("data", 32), _set("/manifest/objective/global_batch_size", 128)],
			"fix": "add tensor/pipeline parallelism to cut parameters per GPU, lower bytes_per_param, or use a GPU with more memory",
		},
		"heads on an unknown gpu": {
			"patch": [
				_gpu("TPU-v5p"), _set("/manifest/model/attention_heads", 36), _set("/manifest/model/hidden_size", 4608),
				_par("tensor", 8), _par("data", 8), _set("/manifest/objective/micro_batch_size", 8),
			],
			"fix": "use a tp that divides the attention heads, e.g. tp=4",
		},
		"heads": {
			"patch": [
				_set("/manifest/model/attention_heads", 36), _set("/manifest/model/hidden_size", 4608),
				_par("tensor", 8), _par("data", 8), _set("/manifest/objective/micro_batch_size", 8),
			],
			"fix": "use a tp that divides the attention heads, e.g. tp=4",
		},
		"global batch": {
			"patch": [_set("/manifest/objective/global_batch_size", 100)],
			"fix": "set global_batch_size to a multiple of 64, e.g. 128",
		},
		"states": {
			"patch": [_set("/manifest/model/parameters", 70000000000), _par("zero_stage", 0)],
			"fix": "shard further: ZeRO-3/FSDP over dp×cp ≥ 16 GPUs fits (2 nodes of 8), or add tensor/pipeline parallelism, or use a GPU with more memory",
		},
		"fp8": {
			"patch": [_par("precision", "fp8")],
			"fix": "use bf16 on A100-80GB, or a GPU with FP8: B200, GB200, H100-PCIe, H100-SXM-80GB, H200, L40S, MI300X, MI355X",
		},
		"bubble": {
			"patch": [_par("pipeline", 4), _par("data", 16), _set("/manifest/objective/global_batch_size", 32)],
			"fix": "raise microbatches per step to ≥ 12 (global batch ≥ 192) or interleave stages (virtual_stages)",
		},
	}
	fixes := {v.fix | some v in _violation(tc.patch)}
	print(name, fixes)
	tc.fix in fixes
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
	}
	messages := {v.message | some v in _violation(tc.patch)}
	print(name, messages)
	tc.message in messages
}

test_every_violation_is_well_formed if {
	every tc in _cases {
		inp := json.patch(_base, tc.patch)
		findings := parallelism.deny | parallelism.warn with input as inp
		every v in findings {
			v.gate == "parallelism"
			is_string(v.code)
			is_string(v.message)
			is_string(v.fix)
		}
	}
}
