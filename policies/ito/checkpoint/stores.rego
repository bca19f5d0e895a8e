# Where a run may keep its checkpoints: a store named for the booking, reached
# by a scheme its tier serves, within the booking's quota with its live runs.
# Part of package ito.checkpoint (see checkpoint.rego for the model and the other checks).
package ito.checkpoint

import data.ito.lib

# The booking's stores: the entitlement's checkpoint_stores claim (the desk
# names a booking's own buckets), else the operator's stores for the
# booking's region (bundle data). Each is {uri_prefix, region, tier?}.
_stores := s if {
	s := input.entitlement.checkpoint_stores
	is_array(s)
} else := s if {
	s := data.ito.config.checkpoint.stores[input.entitlement.region]
	is_array(s)
} else := []

_uri := _ckpt.storage_uri if is_string(_ckpt.storage_uri)

# the stores whose prefix the URI is under (prefixes end with "/", so a
# bucket named like another's prefix does not match)
_matching_stores := [s |
	some s in _stores
	is_string(s.uri_prefix)
	endswith(s.uri_prefix, "/")
	startswith(_uri, s.uri_prefix)
]

_store_problems contains sprintf("%s is in none of the booking's checkpoint stores (%s)", [
	lib.show(_uri), _store_prefixes_text,
]) if {
	_has_policy
	count(_matching_stores) == 0
}

_store_problems contains sprintf("store %s is %s storage, not the declared tier %s", [
	lib.show(store.uri_prefix), lib.show(store.tier), lib.show(_tier_name),
]) if {
	store := _matching_stores[0]
	is_string(store.tier)
	store.tier != _f.tier
}

_store_problems contains sprintf("store %s is in region %s, not the declared region %s", [
	lib.show(store.uri_prefix), lib.show(store.region), lib.show(storage_region),
]) if {
	store := _matching_stores[0]
	is_string(store.region)
	store.region != _f.storage_region
}

_store_prefixes_text := concat(", ", [lib.show(s.uri_prefix) | some s in _stores]) if count(_stores) > 0

else := "none named for this booking"

# METADATA
# title: Checkpoint store not booked
# description: >-
#   checkpoint.storage_uri must be under a store the entitlement's
#   checkpoint_stores (else bundle data, data.ito.config.checkpoint.stores
#   for the booking's region) names for the booking, and a store that fixes
#   its tier or region must match the declared storage_tier and
#   storage_region: the tier and region that price and time the checkpoint
#   are the store's, not the manifest's word.
# custom:
#   code: CHECKPOINT_STORE_NOT_BOOKED
#   gate: checkpoint
#   fix: Write checkpoints under one of the booking's store prefixes, with its tier and region.
deny contains v if {
	some problem in _store_problems
	v := lib.violation_fix(rego.metadata.rule(), problem, _store_fix)
}

_store_fix := sprintf("set checkpoint.storage_uri under one of %s (and storage_tier/storage_region to the store's)", [
	_store_prefixes_text,
]) if {
	count(_stores) > 0
} else := "ask the desk for a booking that names a checkpoint store (entitlement checkpoint_stores)"

# METADATA
# title: Checkpoint URI scheme does not match the storage tier
# description: >-
#   The storage URI's scheme must be one the storage tier serves
#   (data.ito.tables.storage[tier].schemes): a file:// path or another
#   service's bucket does not get the declared tier's bandwidth or quota.
# custom:
#   code: CHECKPOINT_SCHEME_TIER_MISMATCH
#   gate: checkpoint
#   fix: Use a storage_uri whose scheme the tier serves, or the tier of that store.
deny contains v if {
	_has_policy
	schemes := data.ito.tables.storage[_f.tier].schemes
	not _scheme_served(schemes)
	v := lib.violation_fix(
		rego.metadata.rule(),
		sprintf("checkpoint URI scheme %s is not served by storage tier %s (%s)", [
			lib.show(object.get(_ckpt, "storage_uri", null)), lib.show(_tier_name), concat(", ", schemes),
		]),
		sprintf("use a %s URI for tier %s, or the tier of the store you write to", [
			concat(" or ", [sprintf("%s://", [s]) | some s in schemes]), _tier_name,
		]),
	)
}

_scheme_served(schemes) if _scheme in schemes

# The checkpoint storage the booking's live runs keep (input.ledger.booking,
# every account's; the ledger sums the same at commit), 0 without a ledger.
_held_gib := h if {
	h := input.ledger.booking.held_checkpoint_gib
	is_number(h)
	h >= 0
} else := 0

# Whole GiB, as the ledger records and re-checks them: the run's
# checkpoints rounded up, the quota rounded down.
_needed_whole_gib := ceil(_needed_gib)

_quota_whole_gib := floor(_quota_gib)
