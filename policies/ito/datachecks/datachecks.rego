# METADATA
# title: Data pre-check gate
# description: >-
#   For train.create: every dataset is either on the bundle's approved catalog
#   (data.ito.config.datachecks.catalog, matched by URI prefix) or "custom".
#   A custom dataset needs its own deduplication provenance (method, ratio
#   removed, report digest) beside its decontamination record, a content
#   digest, and, when the run trains on at least ladder_required_from_tokens
#   tokens, a verified 150M-token ladder decision from the eval authority
#   (trust.evals) bound to that digest, recent, with outcome "proceed".
package ito.datachecks

import data.ito.lib

_m := input.manifest

_cfg := data.ito.config.datachecks

_datasets := d if {
	d := _m.data
	is_array(d)
}

_catalog_entry(d) := entry if {
	is_string(d.uri)
	some entry in data.ito.config.datachecks.catalog
	startswith(d.uri, entry.uri_prefix)
}

_custom contains i if {
	some i, d in _datasets
	not _catalog_entry(d)
}

# METADATA
# title: Custom datasets
# description: Indices (in data[]) of the datasets that are not on the approved catalog.
custom_datasets := sort([i | some i in _custom])

# ---------------------------------------------------------------------------
# Deduplication provenance

_has_dedup(dd) if {
	dd.method in _cfg.dedup_methods
	is_number(dd.ratio)
	dd.ratio >= 0
	dd.ratio < 1
	lib.is_digest(dd.report_digest)
}

# METADATA
# title: Deduplication provenance missing
# description: >-
#   A custom dataset has no complete dedup record (a method from
#   dedup_methods, the ratio removed in [0, 1), a report digest); catalog
#   datasets carry theirs in the catalog.
# custom:
#   code: DATA_DEDUP_MISSING
#   gate: datachecks
deny contains v if {
	some i in _custom
	not _has_dedup(lib.value_at(_datasets[i], ["dedup"], null))
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("custom dataset data[%d] has no complete deduplication record (method, ratio, report digest)", [i]),
		sprintf("deduplicate it (%s) and record method, ratio removed and the report's sha256 digest in data[%d].dedup", [
			concat(", ", _cfg.dedup_methods), i,
		]),
	)
}

# ---------------------------------------------------------------------------
# The 150M-token ladder decision

_steps_tokens contains t if {
	t := _m.objective.max_tokens
	lib.is_count(t)
}

_steps_tokens contains (steps * gbs) * seq if {
	steps := _m.objective.max_steps
	gbs := _m.objective.global_batch_size
	seq := _m.objective.sequence_length
	lib.is_count(steps)
	lib.is_count(gbs)
	lib.is_count(seq)
}

# METADATA
# title: Tokens the run trains on
# description: min(objective.max_tokens, max_steps × global batch × sequence length).
run_tokens := min(_steps_tokens) if count(_steps_tokens) > 0

_is_large if run_tokens >= _cfg.ladder_required_from_tokens

# METADATA
# title: Custom dataset without a digest
# description: A large run's custom dataset needs a content digest to bind its ladder decision to.
# custom:
#   code: DATA_DIGEST_MISSING
#   gate: datachecks
#   fix: Record the dataset's sha256 content digest in data[].digest.
deny contains v if {
	some i in _custom
	_is_large
	not lib.is_digest(lib.value_at(_datasets[i], ["digest"], ""))
	v := lib.violation(rego.metadata.rule(), sprintf("custom dataset data[%d] has no sha256 content digest", [i]))
}

_decisions := [r |
	some r in input.eval_reports
	lib.value_at(r, ["claims", "kind"], null) == "ladder_decision"
	r.verified == true
]

_decision_for(digest) := [r | some r in _decisions; r.claims.dataset_digest == digest]

# METADATA
# title: Ladder decision missing
# description: >-
#   A large run (run_tokens >= ladder_required_from_tokens) on a custom
#   dataset needs a verified ladder decision for that dataset's digest.
# custom:
#   code: DATA_LADDER_DECISION_MISSING
#   gate: datachecks
deny contains v if {
	some i in _custom
	_is_large
	digest := _datasets[i].digest
	lib.is_digest(digest)
	count(_decision_for(digest)) == 0
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("custom dataset data[%d] has no ladder decision for its digest; the run trains on %d tokens", [
			i, run_tokens,
		]),
		sprintf("run the %d-token ladder on it and send the eval authority's decision with the admission", [
			_cfg.ladder_tokens,
		]),
	)
}

# METADATA
# title: Ladder decision is not proceed
# description: The ladder decision for a custom dataset says something other than "proceed".
# custom:
#   code: DATA_LADDER_DECISION_NOT_PROCEED
#   gate: datachecks
#   fix: Fix or replace the dataset and run the ladder again; only a "proceed" decision admits a large run.
deny contains v if {
	some i in _custom
	_is_large
	some r in _decision_for(_datasets[i].digest)
	not lib.value_at(r, ["claims", "outcome"], null) == "proceed"
	v := lib.violation(rego.metadata.rule(), sprintf("the ladder decision for data[%d] is %s, not \"proceed\"", [
		i, lib.show(lib.value_at(r, ["claims", "outcome"], null)),
	]))
}

# METADATA
# title: Ladder decision too old
# description: The ladder decision was issued more than ladder_max_age_seconds before now.
# custom:
#   code: DATA_LADDER_DECISION_STALE
#   gate: datachecks
#   fix: Run the ladder again on the dataset as it is now.
deny contains v if {
	some i in _custom
	_is_large
	some r in _decision_for(_datasets[i].digest)
	not _is_recent(r.claims)
	v := lib.violation(rego.metadata.rule(), sprintf(
		"the ladder decision for data[%d] was issued at %s, more than %d s ago",
		[i, lib.show(lib.value_at(r, ["claims", "iat"], null)), _cfg.ladder_max_age_seconds],
	))
}

_is_recent(claims) if {
	is_number(claims.iat)
	input.now - claims.iat <= _cfg.ladder_max_age_seconds
}
