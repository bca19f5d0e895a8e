# METADATA
# title: Idempotency gate
# description: >-
#   The caller's idempotency key must be well formed, and a key the ledger has
#   already seen may only come back with the same request (same request
#   digest). Missing or ill-typed ledger facts deny.
package ito.idempotency

import data.ito.lib

_ledger := lib.value_at(input, ["ledger", "idempotency"], null)

# METADATA
# title: Idempotency key reused for another request
# description: >-
#   The ledger has seen this idempotency key with a different request digest
#   (or the ledger facts are missing): one key names one request forever.
# custom:
#   code: IDEMPOTENCY_KEY_CONFLICT
#   gate: idempotency
#   fix: Use a new idempotency key for a new request; reuse a key only to retry the identical request.
deny contains v if {
	not input.ledger.idempotency.seen == false
	not _is_same_request_again
	v := lib.violation(rego.metadata.rule(), _conflict_message)
}

# a key the ledger has not seen (seen == false) is usable too
_is_same_request_again if {
	input.ledger.idempotency.seen == true
	input.ledger.idempotency.same_request == true
}

default _conflict_message := "the idempotency ledger facts (seen, same_request) are missing or not booleans"

_conflict_message := "the idempotency key was already used for a different request" if {
	_ledger.seen == true
	_ledger.same_request == false
}

# METADATA
# title: Idempotency key malformed
# description: >-
#   The idempotency key must match the pattern in bundle data (1-128
#   letters, digits, dots, underscores, colons or dashes).
# custom:
#   code: IDEMPOTENCY_KEY_INVALID
#   gate: idempotency
#   fix: Send an idempotency key of 1-128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit.
deny contains v if {
	not _is_key_valid
	v := lib.violation(rego.metadata.rule(), "the idempotency key is missing or malformed")
}

_is_key_valid if {
	is_string(input.request.idempotency_key)
	regex.match(data.ito.config.idempotency.key_pattern, input.request.idempotency_key)
}
