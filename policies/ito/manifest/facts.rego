# The field check: which fields the gates compute with are missing or ill-typed (MANIFEST_FIELD_INVALID).
# Part of package ito.manifest (see manifest.rego for the gate).
package ito.manifest

import data.ito.lib

# The gate reads the check's result from _f: Go's input.facts.manifest
# (gatekeeper/trainfacts, once per decision with this bundle's field list),
# or, for an input without facts (opa test, opa eval), facts_reference, the
# check below. TestFactsMatchReference holds Go's facts byte-identical to it.
_f := f if {
	f := input.facts.manifest
} else := facts_reference if {
	not input.facts
}

# METADATA
# title: Manifest field check (Rego reference)
# description: >-
#   invalid_fields: each entry {path, kind} of data.ito.config.manifest.fields,
#   in that order, whose value in input.manifest (null when absent or when a
#   step of its path is not an object) is not of its kind; then, for each
#   stage of kind_values.stage in that order that has stage_settings, the
#   fields its settings make wrong (_stage_invalid_fields): what Go
#   computes as input.facts.manifest (trainfacts, Model.invalidFields).
facts_reference := {"invalid_fields": array.concat(
	[{"path": field.path, "kind": field.kind} |
		some field in data.ito.config.manifest.fields
		not _is_kind(field.kind, lib.value_at(input, array.concat(["manifest"], field.path), null))
	],
	_stage_invalid_fields,
)}

# A later stage is judged on its effective manifest (lib.stage_manifest: the
# manifest with the stage's settings merged over it), so its settings are
# checked as that manifest: a field right in the manifest and wrong in the
# stage's effective manifest is named under stage_settings/<stage> (a field
# wrong in both is named once, for the manifest). Settings that are not an
# object would be ignored by the merge: they are named as stage_settings/<stage>.
# Only the stage names of kind_values.stage are looked at, so no other key
# of stage_settings reaches a message.
_stage_invalid_fields := [entry |
	settings := lib.value_at(input, ["manifest", "stage_settings"], {})
	is_object(settings)
	some stage in object.get(data.ito.config.manifest.kind_values, "stage", [])
	some entry in _stage_entries(stage, settings[stage])
]

_stage_entries(stage, settings) := [{"path": ["stage_settings", stage], "kind": "optional_object"}] if {
	not is_object(settings)
} else := [{"path": array.concat(["stage_settings", stage], field.path), "kind": field.kind} |
	effective := lib.stage_manifest(input.manifest, stage)
	some field in data.ito.config.manifest.fields
	not _is_kind(field.kind, lib.value_at(effective, field.path, null))
	_is_kind(field.kind, lib.value_at(input, array.concat(["manifest"], field.path), null))
]

# A kind of kind_values: one of the values listed (null: the field may be absent).
_is_kind(kind, x) if x in data.ito.config.manifest.kind_values[kind]

_is_kind(kind, x) if {
	kind in {"count", "optional_count"}
	lib.is_count(x)
}

_is_kind(kind, x) if {
	kind in {"optional_count", "positive_number", "array", "layer_counts", "optional_object"}
	x == null
}

_is_kind(kind, x) if {
	kind == "string"
	is_string(x)
	x != ""
}

_is_kind(kind, x) if {
	kind == "positive_number"
	is_number(x)
	x > 0
}

_is_kind(kind, x) if {
	kind == "datasets"
	is_array(x)
	count(x) > 0
	every d in x {
		is_object(d)
	}
}

_is_kind(kind, x) if {
	kind == "array"
	is_array(x)
}

_is_kind(kind, x) if {
	kind == "layer_counts"
	is_array(x)
	every n in x {
		is_number(n)
		n >= 0
		n == floor(n)
	}
}

_is_kind(kind, x) if {
	kind == "optional_object"
	is_object(x)
}
