package ito.datasets_test

import data.ito.datasets

# Shapes found by review: userinfo without a password or with an encoded
# colon, current API secret-key prefixes, and inline base64 data URIs.
credential_shapes := {
	"token userinfo": "https://ghs_0123456789abcdefABCDEF@github.com/org/repo",
	"encoded colon userinfo": "https://user%3Apass@example.com/x",
	"stripe live key": "sk_live_51HxxxxxxxxxxxxxxxxxxxxxxxxxY",
	"openai project key": "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
	"base64 data uri": "data:text/plain;base64,QUtJQUlPU0ZPRE5ON0VYQU1QTEU=",
}

test_credential_shapes_detected[name] if {
	some name, uri in credential_shapes
	codes := {v.code | some v in datasets.deny} with input as {"manifest": {"data": [{"uri": uri}]}}
	"MANIFEST_CREDENTIAL_DETECTED" in codes
}

test_plain_uris_pass[uri] if {
	some uri in ["s3://ito-datasets/fineweb-edu/", "hf://datasets/allenai/c4", "gs://b/p@v2/shard"]
	codes := {v.code | some v in datasets.deny} with input as {"manifest": {"data": [{"uri": uri}]}}
	not "MANIFEST_CREDENTIAL_DETECTED" in codes
}
