# The credential scan: where the manifest holds what looks like a credential (MANIFEST_CREDENTIAL_DETECTED).
# Part of package ito.datasets (see datasets.rego for the gate).
package ito.datasets

import data.ito.lib

# The gate reads the scan's findings from _f: Go's input.facts.credentials
# (gatekeeper/trainfacts, once per decision with this bundle's patterns), or,
# for an input without facts (opa test, opa eval), facts_reference, the scan
# below. TestFactsMatchReference holds Go's facts byte-identical to it.
_f := f if {
	f := input.facts.credentials
} else := facts_reference if {
	not input.facts
}

# METADATA
# title: Credential scan (Rego reference)
# description: >-
#   by_path: the JSON pointer (RFC 6901, a segment that is not a plain name
#   withheld) of every manifest value or key that looks like a credential,
#   or of a secret-named field with a value, and its kinds, sorted: what Go
#   computes as input.facts.credentials.
facts_reference := {"by_path": {path: sort(kinds) | some path, kinds in _credentials_by_path}}

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
