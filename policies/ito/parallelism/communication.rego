# Data-parallel communication against compute per step.
# Part of package ito.parallelism (see parallelism.rego for the model and its inputs).
package ito.parallelism

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

_comm_ratio_at(dp, tp, pp, cp, ep, etp, zero, ckpt, world) := comm / _compute_seconds_at(ckpt, world) if {
	comm := _comm_seconds_at(dp, tp, pp, cp, ep, etp, zero)
}
