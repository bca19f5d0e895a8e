# METADATA
# title: Data gate
# description: >-
#   Every dataset must carry decontamination provenance against the bundle's
#   eval suite and version, an allowed license and no PII (unless bundle data
#   allows it); and no credential may appear anywhere in the manifest, neither
#   as a value nor as a key. Messages name JSON paths, never the secret.
package ito.datasets

import data.ito.lib

_m := input.manifest

_cfg := data.ito.config.data

_datasets := d if {
	d := _m.data
	is_array(d)
}

# METADATA
# title: Decontamination provenance missing
# description: A dataset has no complete decontamination record (eval suite, version, method, sha256 report digest).
# custom:
#   code: DATA_DECONTAMINATION_MISSING
#   gate: data
#   fix: Decontaminate the dataset against the current eval suite and record suite, version, method and report digest.
deny contains v if {
	some i, d in _datasets
	not _has_decontamination(d)
	v := lib.violation(rego.metadata.rule(), sprintf(
		"dataset data[%d] has no complete decontamination record (eval suite, version, method, report digest)",
		[i],
	))
}

_has_decontamination(d) if {
	is_string(d.decontamination.eval_suite)
	d.decontamination.eval_suite != ""
	is_string(d.decontamination.eval_suite_version)
	d.decontamination.eval_suite_version != ""
	is_string(d.decontamination.method)
	d.decontamination.method != ""

	# lib.is_digest
	regex.match(`^sha256:[0-9a-f]{64}$`, d.decontamination.report_digest)
}

# METADATA
# title: Decontamination against another eval suite
# description: >-
#   A dataset was decontaminated against a different eval suite or version
#   than the bundle's (data.ito.config.data).
# custom:
#   code: DATA_DECONTAMINATION_STALE
#   gate: data
deny contains v if {
	some i, d in _datasets
	not [d.decontamination.eval_suite, d.decontamination.eval_suite_version] == [
		data.ito.config.data.eval_suite,
		data.ito.config.data.eval_suite_version,
	]
	_has_decontamination(d)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("dataset data[%d] was decontaminated against %s %s, not %s %s", [
			i,
			lib.show(d.decontamination.eval_suite), lib.show(d.decontamination.eval_suite_version),
			_cfg.eval_suite, _cfg.eval_suite_version,
		]),
		sprintf("re-run decontamination against %s version %s and record the new report digest", [
			_cfg.eval_suite, _cfg.eval_suite_version,
		]),
	)
}

# METADATA
# title: License not allowed
# description: A dataset's license (case-insensitive) is not on the allow-list in data.ito.config.data.allowed_licenses.
# custom:
#   code: DATA_LICENSE_NOT_ALLOWED
#   gate: data
deny contains v if {
	some i, d in _datasets
	not _is_license_allowed(d)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("dataset data[%d] has license %s, which is not on the allow-list", [
			i, lib.show(lib.value_at(d, ["license"], null)),
		]),
		sprintf("use data under an allowed license (%s), or have the allow-list reviewed", [
			concat(", ", _cfg.allowed_licenses),
		]),
	)
}

_is_license_allowed(d) if {
	is_string(d.license)
	lower(d.license) in data.ito.config.data.allowed_licenses
}

# METADATA
# title: PII not allowed
# description: A dataset is marked as containing PII (or pii is not false) and bundle data does not allow PII.
# custom:
#   code: DATA_PII_NOT_ALLOWED
#   gate: data
#   fix: Remove or anonymize personal data and mark the dataset pii false, or get PII use approved in the bundle.
deny contains v if {
	some i, d in _datasets
	not d.pii == false
	not data.ito.config.data.pii_allowed == true
	v := lib.violation(rego.metadata.rule(), sprintf("dataset data[%d] may contain PII (pii is not false)", [i]))
}

# METADATA
# title: Dataset in another region
# description: A dataset lives in a different region than the cluster; reads cross regions (egress cost, throughput).
# custom:
#   code: DATA_REGION_REMOTE
#   gate: data
#   level: warn
#   fix: Stage the dataset in the cluster's region.
warn contains v if {
	some i, d in _datasets
	is_string(d.region)
	d.region != _m.hardware.region
	v := lib.violation(rego.metadata.rule(), sprintf("dataset data[%d] is in region %s, the cluster in %s", [
		i, lib.show(d.region), lib.show(_m.hardware.region),
	]))
}

# METADATA
# title: Credential in the manifest
# description: >-
#   A manifest value or key looks like a credential (cloud keys, private keys,
#   bearer tokens, JWTs, GitHub/Hugging Face/Slack tokens, presigned URLs,
#   URL userinfo) or a secret-named field has a value. The message names only
#   the JSON path (RFC 6901) and the kind, never the value.
# custom:
#   code: MANIFEST_CREDENTIAL_DETECTED
#   gate: data
#   fix: >-
#     Remove the credential from the manifest and rotate it; reference data
#     through storage the cluster is authorized for.
deny contains v if {
	some path, kinds in _f.by_path
	v := lib.violation(
		rego.metadata.rule(),
		sprintf("manifest %s holds what looks like a credential (%s); it is not shown", [
			path, concat(", ", sort(kinds)),
		]),
	)
}
