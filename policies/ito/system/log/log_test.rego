package ito.system.log_test

import data.ito.system.log

test_always_masks_the_confirmation_ref if {
	log.mask == {"/confirmation/ref"} with input as {"manifest": {"data": [{"uri": "s3://bucket/path"}]}}
}

test_masks_the_manifest_holding_a_credential if {
	log.mask == {"/confirmation/ref", "/manifest"} with input as {"manifest": {"data": [{"uri": "https://u:p@host/x"}]}}
		with data.ito.datasets.deny as {{"code": "MANIFEST_CREDENTIAL_DETECTED", "gate": "data", "message": "m"}}
}

test_other_denies_keep_the_manifest if {
	log.mask == {"/confirmation/ref"} with input as {"manifest": {}}
		with data.ito.datasets.deny as {{"code": "DATA_PII_NOT_ALLOWED", "gate": "data", "message": "m"}}
}
