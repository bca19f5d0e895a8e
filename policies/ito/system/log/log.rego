# METADATA
# title: Decision-log masking
# description: >-
#   JSON pointers (RFC 6901) that Go removes from the policy input before it
#   writes a decision-log event, as OPA's system.log.mask does. Go also refuses
#   any event that still looks like a token, signature, key or credential, and
#   drops (and counts) an event when this policy fails.
package ito.system.log

# METADATA
# title: Pointers to mask
# description: >-
#   Always the pointers of data.ito.config.log.always_mask; the whole manifest
#   when the data gate found a credential in it (its location may be a key).
# entrypoint: true
mask contains pointer if {
	some pointer in data.ito.config.log.always_mask
}

mask contains "/manifest" if {
	some v in data.ito.datasets.deny
	v.code == "MANIFEST_CREDENTIAL_DETECTED"
}
