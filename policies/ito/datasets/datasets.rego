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
	lib.is_digest(d.decontamination.report_digest)
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
	_has_decontamination(d)
	not _is_current_suite(d.decontamination)
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

_is_current_suite(dc) if {
	dc.eval_suite == _cfg.eval_suite
	dc.eval_suite_version == _cfg.eval_suite_version
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
	lower(d.license) in _cfg.allowed_licenses
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
	not _cfg.pii_allowed == true
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
	_may_hold_credential
	some path, kinds in _credentials_by_path
	v := lib.violation(
		rego.metadata.rule(),
		sprintf("manifest %s holds what looks like a credential (%s); it is not shown", [
			path, concat(", ", sort(kinds)),
		]),
	)
}

# Every string the credential scan below looks at: the manifest's string values
# and its object keys, as sets (a string repeated in the manifest is looked at
# once). A walk without paths is cheap; the scan with paths only runs when one
# of these strings could match (_may_hold_credential).
_manifest_values := {x |
	walk(_m, [_, x])
	is_string(x)
}

_manifest_keys := {k |
	walk(_m, [_, x])
	is_object(x)
	some k, _ in x
	is_string(k)
}

# One regex over all the strings joined by newlines instead of one per string:
# in multi-line mode (?m) ^ and $ also match at each string's start and end,
# and \b sees the newline as a non-word character as it sees a string's edge,
# so a pattern that matches one of the strings matches the joined text too
# (the converse need not hold: then the full scan decides). This holds for
# patterns without \A, \z and (?-m), which test_patterns_are_line_safe checks
# for the bundle's patterns.
_may_hold_credential if regex.match(_lines_prefilter, concat("\n", _manifest_values | _manifest_keys))

_may_hold_credential if regex.match(_lines_secret_key_pattern, concat("\n", _manifest_keys))

_lines_prefilter := concat("", ["(?m:", lib.credential_prefilter, ")"])

_lines_secret_key_pattern := concat("", ["(?m:", _cfg.credentials.secret_key_pattern, ")"])

_credentials_by_path[path] := kinds if {
	some path in {f.path | some f in _credential_findings}
	kinds := {k | some f in _credential_findings; f.path == path; k := f.kind}
}

# The credential kinds of each distinct manifest string (value or key) that
# matches a pattern, and the keys that name a secret: one regex pass per
# distinct string. The scan with paths below walks the manifest only when one
# of them is not empty, and then looks each node up here instead of matching
# it again, so its cost does not grow with the manifest's size otherwise.
_credential_strings[s] := kinds if {
	_may_hold_credential
	some s in (_manifest_values | _manifest_keys)
	kinds := lib.credential_kinds(s)
	count(kinds) > 0
}

_secret_named_keys contains k if {
	_may_hold_credential
	some k in _manifest_keys
	regex.match(_cfg.credentials.secret_key_pattern, k)
}

_must_locate if count(_credential_strings) > 0

_must_locate if count(_secret_named_keys) > 0

# a string value that matches a credential pattern
_credential_findings contains {"path": _pointer(path), "kind": kind} if {
	_may_hold_credential
	_must_locate
	walk(_m, [path, value])
	some kind in _credential_strings[value]
}

# an object key that itself matches a credential pattern (its segment is withheld in the path)
_credential_findings contains {"path": _pointer(path), "kind": kind} if {
	_may_hold_credential
	_must_locate
	walk(_m, [path, _])
	count(path) > 0
	some kind in _credential_strings[path[count(path) - 1]]
}

# a secret-named field (password, token, api_key, ...) with a non-empty value
_credential_findings contains {"path": _pointer(path), "kind": "secret-named field"} if {
	_may_hold_credential
	count(_secret_named_keys) > 0
	walk(_m, [path, value])
	count(path) > 0
	path[count(path) - 1] in _secret_named_keys
	not value in {"", null, false, {}, []}
}

# JSON Pointer (RFC 6901) of a walk path; a segment that is not a plain name or index is withheld
_pointer(path) := concat("", [s | some seg in path; s := concat("", ["/", _segment(seg)])])

_segment(seg) := sprintf("%d", [seg]) if is_number(seg)

_segment(seg) := seg if _is_plain_segment(seg)

_segment(seg) := "(withheld)" if {
	is_string(seg)
	not _is_plain_segment(seg)
}

_is_plain_segment(seg) if {
	is_string(seg)
	regex.match(`^[A-Za-z0-9_.-]{1,64}$`, seg)
	not lib.is_credential_like(seg)
}
