# METADATA
# title: Shared helpers
# description: >-
#   Helpers every gate uses: building coded violations from rule METADATA,
#   exact decimal parsing (money as integer micro-USD, hours as integer
#   centi-hours) and formatting. Pure functions; nothing here reads the clock.
package ito.lib

# METADATA
# title: Known actions
# description: >-
#   The request actions the admission contract defines (docs/policy-input.md):
#   the keys of the bundle's action table (data.ito.config.actions, equal to
#   Go's api.Actions by test).
actions := {a | some a, _ in data.ito.config.actions}

# METADATA
# title: Acts on a run
# description: >-
#   True for an action that names an admitted run (request.run_id): every
#   action whose effect steps or ends a run.
acts_on_run(action) if data.ito.config.actions[action].effect in {"step_run", "end_run"}

# METADATA
# title: Steps a live run
# description: True for an action that acts on a live run without ending it (stage advance, restart).
steps_run(action) if data.ito.config.actions[action].effect == "step_run"

# METADATA
# title: Is a train.create request
# description: True when the request creates a training run (the only action that carries a manifest).
is_train_create if input.request.action == "train.create"

# METADATA
# title: Runs the training gates
# description: >-
#   True for the actions the parallelism, checkpoint and budget gates judge:
#   train.create (the manifest) and train.stage.advance (the effective
#   manifest of the stage it enters, train_manifest).
runs_training_gates if input.request.action in {"train.create", "train.stage.advance"}

# METADATA
# title: The manifest the training gates judge
# description: >-
#   For train.stage.advance the effective manifest of the stage it enters,
#   stage_manifest(input.manifest, input.request.stage); for any other
#   input input.manifest. Go computes input.facts from the same manifest
#   (trainfacts.StageManifest).
train_manifest := stage_manifest(input.manifest, input.request.stage) if {
	input.request.action == "train.stage.advance"
	is_object(input.manifest)
} else := input.manifest

# METADATA
# title: Effective manifest of a stage
# description: >-
#   m without stage_settings, with m.stage_settings[stage] (its objective,
#   hardware and parallelism) merged over it by object.union (key by key,
#   nested objects merged again) and objective.stage set to stage. A stage
#   without settings keeps the manifest's own. Go's
#   trainfacts.StageManifest is the same function.
stage_manifest(m, stage) := object.union(
	object.union(object.remove(m, {"stage_settings"}), _stage_settings(m, stage)),
	{"objective": {"stage": stage}},
)

_stage_settings(m, stage) := s if {
	s := m.stage_settings[stage]
	is_object(s)
} else := {}

# METADATA
# title: Is a teardown request
# description: >-
#   True for an action that ends a run (train.cancel, train.cleanup): it stops
#   or cleans up a run already admitted, so it stays possible after the
#   booking ended.
is_teardown if data.ito.config.actions[input.request.action].effect == "end_run"

# METADATA
# title: Violation from rule metadata
# description: >-
#   Builds {code, gate, message[, fix]} from the calling rule's METADATA
#   (rego.metadata.rule()), so a code is written in exactly one place.
#   The fix is custom.fix when the METADATA has one.
violation(meta, message) := {
	"code": meta.custom.code, "gate": meta.custom.gate, "message": message,
	"fix": meta.custom.fix,
} if {
	is_string(object.get(meta.custom, "fix", null))
} else := {"code": meta.custom.code, "gate": meta.custom.gate, "message": message}

# METADATA
# title: Violation with a computed fix
# description: Like violation, with a fix computed by the rule (overrides custom.fix).
violation_fix(meta, message, fix) := {
	"code": meta.custom.code, "gate": meta.custom.gate, "message": message,
	"fix": fix,
}

# METADATA
# title: Decimal string to scaled integer
# description: >-
#   Parses a plain non-negative decimal string with at most `places`
#   fractional digits (1..6) into the exact integer value × 10^places:
#   scaled("2.49", 6) == 2490000. No sign, exponent, spaces or leading zeros;
#   at most 12 integer digits. Undefined when malformed.
scaled(s, places) := n if {
	is_string(s)
	[[_, whole, fraction]] := regex.find_all_string_submatch_n(_decimal_patterns[places], s, 1)
	unit := _units[places]

	# "1" + the fraction padded to `places` digits, minus 10^places: keeps leading zeros ("05" -> 50000)
	n := (to_number(whole) * unit) + (to_number(concat("", [
		"1",
		substring(concat("", [fraction, "000000"]), 0, places),
	])) - unit)
}

# Per number of places (1..6): the whole part and the fraction digits (empty
# when there is no fraction). Constants, so no pattern is built per call.
_decimal_patterns := {
	1: `^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,1}))?$`,
	2: `^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,2}))?$`,
	3: `^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,3}))?$`,
	4: `^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,4}))?$`,
	5: `^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,5}))?$`,
	6: `^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,6}))?$`,
}

_units := {1: 10, 2: 100, 3: 1000, 4: 10000, 5: 100000, 6: 1000000}

# METADATA
# title: USD string to micro-USD
# description: Exact integer micro-USD of a decimal USD string ("2.49" -> 2490000); undefined when malformed.
micro_usd(s) := n if {
	# scaled(s, 6) written out (the pattern is _decimal_patterns[6]): no function
	# call or rule reference per amount
	is_string(s)
	[[_, whole, fraction]] := regex.find_all_string_submatch_n(`^(0|[1-9][0-9]{0,11})(?:\.([0-9]{1,6}))?$`, s, 1)
	n := (to_number(whole) * 1000000) + (to_number(concat("", [
		"1",
		substring(concat("", [fraction, "000000"]), 0, 6),
	])) - 1000000)
}

# METADATA
# title: Number to centi-units
# description: >-
#   Exact integer hundredths of a JSON number with at most 2 decimals
#   (6.5 -> 650); undefined for anything else (strings, 1e3, 0.125). Uses the
#   number's decimal text, so no float is ever multiplied.
centi(x) := scaled(sprintf("%v", [x]), 2) if is_number(x)

# METADATA
# title: Ceiling division
# description: ceil(a / b) for integers a >= 0, b > 0, exact at any size (see div_floor).
ceil_div(a, b) := (n - (n % b)) / b if {
	n := (a + b) - 1
	n < 9223372036854775808
} else := div_floor((a + b) - 1, b)

# METADATA
# title: Integer division, rounded down
# description: >-
#   floor(a / b) for integers a >= 0, b > 0, exact at any size. Rego's `+`,
#   `-`, `*` and `%` are exact on integers of any size, but `/` outside the
#   int32 range computes a float with a 64-bit mantissa: exact for a dividend
#   below 2^63 that b divides (a - a % b), only an estimate above. There the
#   estimate is corrected twice by the exact remainder it leaves (each step
#   shrinks the error by ~2^62, so quotients up to ~2^120 come out exact) and
#   checked: the result is undefined rather than wrong, and a cost that cannot
#   be computed is denied (BUDGET_ESTIMATE_UNAVAILABLE).
div_floor(a, b) := (a - (a % b)) / b if a < 9223372036854775808

div_floor(a, b) := q if {
	a >= 9223372036854775808
	q := _div_checked(a, b, _div_refine(a, b, _div_refine(a, b, floor(a / b))))
}

# q plus the float estimate of what the exact remainder a - q×b still holds
_div_refine(a, b, q) := q + floor((a - (q * b)) / b)

# q when 0 <= a - q×b < b; one off either way is corrected, further is undefined
_div_checked(a, b, q) := q + _div_step(a - (q * b), b)

_div_step(r, b) := 0 if {
	r >= 0
	r < b
}

_div_step(r, b) := -1 if {
	r < 0
	r >= 0 - b
}

_div_step(r, b) := 1 if {
	r >= b
	r < 2 * b
}

# METADATA
# title: Micro-USD rounded up to the cent
# description: The smallest whole number of cents, in micro-USD, that is at least micro (1234567 -> 1240000).
ceil_cent(micro) := ceil_div(micro, 10000) * 10000

# METADATA
# title: Micro-USD to USD string, rounded up to the cent
# description: 1234567 micro-USD -> "1.24". Rounds up, never down.
usd(micro) := centi_string(ceil_div(micro, 10000))

# METADATA
# title: Centi-units to decimal string
# description: 650 -> "6.50".
centi_string(c) := sprintf("%d.%02d", [(c - r) / 100, r]) if {
	c < 9223372036854775808
	r := c % 100
} else := sprintf("%d.%02d", [div_floor(c, 100), c % 100])

# METADATA
# title: Round to 2 decimals
# description: For estimates (memory, ratios) only; never for money.
round2(x) := round(x * 100) / 100

# METADATA
# title: Value at a path, or a default
# description: object.get over a path that also tolerates non-object intermediate values.
value_at(doc, path, default_value) := object.get(doc, path, default_value) if is_object(doc)

else := default_value

# METADATA
# title: Is a SHA-256 digest
# description: True for "sha256:" followed by 64 lowercase hex digits.
is_digest(s) if regex.match(`^sha256:[0-9a-f]{64}$`, s)

# METADATA
# title: Is a positive integer
# description: A JSON number that is a whole number >= 1.
is_count(x) if {
	is_number(x)
	x >= 1
	x == floor(x)
}

# METADATA
# title: Safe display of a fact
# description: >-
#   JSON text of a value for a message: numbers, booleans and null as is;
#   strings only when short, plain (letters, digits, . _ : / + - and spaces) and free of
#   anything credential-shaped; otherwise "(withheld)". Messages never echo secrets.
show(x) := json.marshal(x) if _is_showable(x)

show(x) := "(withheld)" if not _is_showable(x)

_is_showable(x) if is_number(x)

_is_showable(x) if is_boolean(x)

_is_showable(x) if is_null(x)

_is_showable(x) if {
	is_string(x)
	regex.match(`^[A-Za-z0-9 ._:/+-]{0,64}$`, x)
	not is_credential_like(x)
}

# METADATA
# title: Looks like a credential
# description: >-
#   True when a string matches any credential pattern of
#   data.ito.config.data.credentials.value_patterns (every regex of a pattern's `all` list).
is_credential_like(s) if count(credential_kinds(s)) > 0

# METADATA
# title: Credential kinds in a string
# description: The set of credential pattern kinds a string matches (names only, never the match).
credential_kinds(s) := {p.kind |
	is_string(s)
	regex.match(credential_prefilter, s)
	some p in data.ito.config.data.credentials.value_patterns
	every re in p.all {
		regex.match(re, s)
	}
}

# METADATA
# title: Credential prefilter
# description: >-
#   One alternation of every credential pattern's first regex: a string that
#   matches none of them cannot match any pattern, so most strings cost one
#   regex, not one per pattern (the data gate also runs it once over all of
#   the manifest's strings before it scans them one by one).
credential_prefilter := concat("", [
	"(?:",
	concat(")|(?:", [p.all[0] | some p in data.ito.config.data.credentials.value_patterns]),
	")",
])
