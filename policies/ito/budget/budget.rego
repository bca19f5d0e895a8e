# METADATA
# title: Budget gate
# description: >-
#   Estimates what a train.create run costs and checks it against the
#   manifest's budget. All money is exact integer micro-USD parsed from decimal
#   strings; hours are exact integer centi-hours; every estimated amount is
#   rounded UP to the next cent, and totals are sums of those rounded amounts
#   (so a total is never below the exact cost, and at most a few cents above).
#
#   W            = hardware.nodes × hardware.gpus_per_node
#   H            = budget.max_wall_clock_hours (at most 2 decimals)
#   lost_gpu_h   = ceil(W × H × lost_fraction, to the hundredth)  (the checkpoint gate's expected share of
#                  the run lost to failures, data.ito.checkpoint.lost_fraction: those GPU-hours are paid for)
#   compute      = W × H × entitlement.price_per_gpu_hour_usd + lost_gpu_h × price   (each rounded up to the cent)
#   months       = max(1, ceil(H / hours_per_month))            (hours_per_month = 730, bundle data)
#   storage      = ceil(checkpoint.size_estimate_gib) × checkpoint.retention
#                  × storage_price_per_gib_month_usd × months
#                  + checkpoint GiB written across regions × egress_price_per_gib_usd
#                  (0 without a checkpoint policy; the cross-region GiB come from the
#                  checkpoint gate, data.ito.checkpoint.remote_write_gib, 0 in the booking's region)
#   run_tokens   = min(objective.max_tokens, max_steps × global_batch_size × sequence_length)
#   remote       = data[] whose region is not the booking's region (entitlement.region)
#   egress_gib   = ceil(min(run_tokens, Σ remote tokens) × bytes_per_token / 2^30)
#   egress       = egress_gib × egress_price_per_gib_usd        (0 with no remote dataset)
#   past_term_s  = max(0, now + H × 3600 − entitlement.term.end)
#   incremental  = W × past_term_s / 3600 × price + storage + egress   (spend beyond what the booking covers)
#   total        = compute + storage + egress
#
#   Egress assumes each remote token crosses regions at most once (staged or
#   cached on first read), so it is bounded by both the run's tokens and the
#   remote datasets' size; streaming a remote dataset again every epoch costs
#   more and is what DATA_REGION_REMOTE warns about. The price is the
#   internet-egress list price, the dearest way data leaves a region.
#
#   Deny when total > budget.ceiling_usd or incremental > budget.max_incremental_usd.
package ito.budget

import data.ito.lib

_m := lib.train_manifest

_cfg := data.ito.config.budget

# METADATA
# title: Estimated compute cost (micro-USD)
# description: >-
#   W × hours × price per GPU-hour, plus the GPU-hours expected lost to
#   failures at the same price (lost_work_micro_usd), each exact and rounded
#   up to the cent. A confirmation must cover it, lost work included.
compute_micro_usd := _f.compute_micro_usd

# METADATA
# title: Expected lost work (micro-USD)
# description: >-
#   ceil(W × hours × the checkpoint gate's lost_fraction, in hundredths of a
#   GPU-hour) × price per GPU-hour, rounded up to the cent; part of compute.
lost_work_micro_usd := _f.lost_work_micro_usd

# METADATA
# title: Estimated checkpoint storage cost (micro-USD)
# description: >-
#   ceil(size GiB) × retention × price per GiB-month × months of the run
#   (min 1), plus the checkpoints written to another region at the egress
#   price, rounded up to the cent; 0 without a checkpoint policy.
storage_micro_usd := _f.storage_micro_usd

# METADATA
# title: Estimated egress cost (micro-USD)
# description: >-
#   ceil(GiB pulled from datasets outside the booking's region) × egress price
#   per GiB, rounded up to the cent; 0 when every dataset is in the booking's region.
egress_micro_usd := _f.egress_micro_usd

# METADATA
# title: Estimated total cost (micro-USD)
# description: compute + storage + egress. The confirmation gate requires the confirmed cost to cover it.
total_micro_usd := _f.total_micro_usd

# METADATA
# title: Seconds of the run past the booking term
# description: max(0, now + hours × 3600 − term.end).
past_term_seconds := _f.past_term_seconds

# METADATA
# title: Estimated incremental cost (micro-USD)
# description: >-
#   Compute past the booking term (W × seconds past term / 3600 × price,
#   rounded up to the cent) plus storage plus egress.
incremental_micro_usd := _f.incremental_micro_usd

# METADATA
# title: Budget estimates
# description: Numbers for the decision's estimates (integers in micro-USD, strings in USD rounded up to the cent).
estimates := {
	"gpu_hours": _f.gpu_hours, "compute_cost_micro_usd": _f.compute_micro_usd, "compute_cost_usd": _f.compute_usd,
	"lost_gpu_hours": _f.lost_gpu_hours, "lost_work_cost_micro_usd": _f.lost_work_micro_usd,
	"lost_work_cost_usd": _f.lost_work_usd, "storage_cost_micro_usd": _f.storage_micro_usd,
	"storage_cost_usd": _f.storage_usd, "egress_gib": _f.egress_gib, "egress_cost_micro_usd": _f.egress_micro_usd,
	"egress_cost_usd": _f.egress_usd, "total_cost_micro_usd": _f.total_micro_usd, "total_cost_usd": _f.total_usd,
	"incremental_cost_micro_usd": _f.incremental_micro_usd, "incremental_cost_usd": _f.incremental_usd,
	"past_term_seconds": _f.past_term_seconds,
} if _f

# with a fact missing, one rule per key (_estimates below): only its key is left out
else := {k: v | some k, v in _estimates}

_estimates["gpu_hours"] := _f.gpu_hours

_estimates["compute_cost_micro_usd"] := compute_micro_usd

_estimates["compute_cost_usd"] := _f.compute_usd

_estimates["lost_gpu_hours"] := _f.lost_gpu_hours

_estimates["lost_work_cost_micro_usd"] := lost_work_micro_usd

_estimates["lost_work_cost_usd"] := _f.lost_work_usd

_estimates["storage_cost_micro_usd"] := storage_micro_usd

_estimates["storage_cost_usd"] := _f.storage_usd

_estimates["egress_gib"] := _f.egress_gib

_estimates["egress_cost_micro_usd"] := egress_micro_usd

_estimates["egress_cost_usd"] := _f.egress_usd

_estimates["total_cost_micro_usd"] := total_micro_usd

_estimates["total_cost_usd"] := _f.total_usd

_estimates["incremental_cost_micro_usd"] := incremental_micro_usd

_estimates["incremental_cost_usd"] := _f.incremental_usd

_estimates["past_term_seconds"] := past_term_seconds

# METADATA
# title: Budget amount malformed
# description: budget.ceiling_usd and budget.max_incremental_usd must be plain decimal USD strings (at most 6 decimals).
# custom:
#   code: BUDGET_MONEY_MALFORMED
#   gate: budget
#   fix: Write money as a decimal string such as "1234.56" (no sign, exponent, separators or currency symbol).
deny contains v if {
	some field, amount in {"ceiling_usd": "ceiling_micro_usd", "max_incremental_usd": "max_incremental_micro_usd"}
	not _f[amount]
	v := lib.violation(rego.metadata.rule(), sprintf("budget.%s is not a plain decimal USD string", [field]))
}

# METADATA
# title: Wall-clock hours malformed
# description: budget.max_wall_clock_hours must be a positive number with at most 2 decimals.
# custom:
#   code: BUDGET_HOURS_MALFORMED
#   gate: budget
#   fix: Give max_wall_clock_hours with at most two decimals, e.g. 6 or 12.25.
deny contains v if {
	not _has_hours
	v := lib.violation(
		rego.metadata.rule(),
		"budget.max_wall_clock_hours is not a positive number with at most 2 decimals",
	)
}

_has_hours if _f.centi_hours > 0

# METADATA
# title: Cost cannot be estimated
# description: >-
#   The total cost could not be computed (bad hardware, hours, price,
#   checkpoint or dataset figures); a run whose cost is unknown is not admitted.
# custom:
#   code: BUDGET_ESTIMATE_UNAVAILABLE
#   gate: budget
#   fix: Fix the budget, hardware, checkpoint and data fields named by the other violations.
deny contains v if {
	some name in _missing_estimates
	v := lib.violation(
		rego.metadata.rule(),
		sprintf("the run's %s cost could not be estimated from the manifest and booking", [name]),
	)
}

_missing_estimates contains "total" if not _f.total_micro_usd

_missing_estimates contains "incremental" if not _f.incremental_micro_usd

# METADATA
# title: Estimated cost above the ceiling
# description: >-
#   The estimated total cost (compute with the expected lost work, storage,
#   egress) must not exceed budget.ceiling_usd.
# custom:
#   code: BUDGET_CEILING_EXCEEDED
#   gate: budget
#   fix: Raise budget.ceiling_usd to the estimate, or shorten the run (hours, GPUs, checkpoints, remote data).
deny contains v if {
	_f.total_micro_usd > _f.ceiling_micro_usd
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf(
			concat("", [
				"the run is estimated at %s USD (compute %s, of which %s for %s GPU-hours expected lost to failures,",
				" + storage %s + egress %s), above the ceiling of %s USD",
			]),
			[
				lib.usd(total_micro_usd), lib.usd(compute_micro_usd), lib.usd(lost_work_micro_usd), _f.lost_gpu_hours,
				lib.usd(storage_micro_usd), lib.usd(egress_micro_usd), lib.usd(_f.ceiling_micro_usd),
			],
		),
		sprintf("raise budget.ceiling_usd to at least %s, or lower max_wall_clock_hours (%s GPU-hours at %s USD)", [
			lib.usd(total_micro_usd), _f.gpu_hours, lib.usd(_f.price_micro_usd),
		]),
	)
}

# METADATA
# title: Incremental cost above the limit
# description: >-
#   Spend beyond what the booking covers (compute past the term end,
#   checkpoint storage and egress) must not exceed budget.max_incremental_usd.
# custom:
#   code: BUDGET_INCREMENTAL_EXCEEDED
#   gate: budget
#   fix: Raise budget.max_incremental_usd, end the run by the term end, keep fewer checkpoints, or stage remote data.
deny contains v if {
	_f.incremental_micro_usd > _f.max_incremental_micro_usd
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf(
			concat("", [
				"the run adds an estimated %s USD beyond the booking",
				" (%d s past the term end, storage %s, egress %s), above the limit of %s USD",
			]),
			[
				lib.usd(incremental_micro_usd), past_term_seconds,
				lib.usd(storage_micro_usd), lib.usd(egress_micro_usd), lib.usd(_f.max_incremental_micro_usd),
			],
		),
		sprintf("raise budget.max_incremental_usd to at least %s, or shorten the run so it ends by the term end", [
			lib.usd(incremental_micro_usd),
		]),
	)
}

# METADATA
# title: Run outlasts the booking
# description: >-
#   The term is a hard limit: a run whose wall-clock limit reaches past the
#   booking term end is denied (a run needs no hours the booking does not
#   entitle). Go refuses it again before the commit whatever the bundle says.
#   Cancel and cleanup stay admissible after the term.
# custom:
#   code: BUDGET_RUN_PAST_TERM
#   gate: budget
#   fix: Lower max_wall_clock_hours so the run ends by the term end, or extend the booking.
deny contains v if {
	_f.past_term_seconds > 0
	v := lib.violation(
		rego.metadata.rule(),
		sprintf("at its wall-clock limit the run ends %d s after the booking term", [past_term_seconds]),
	)
}
