package ito.datasets_test

import data.ito.datasets

_base := data.ito.testdata.base.input

_set(path, value) := {"op": "add", "path": path, "value": value}

_remove(path) := {"op": "remove", "path": path}

test_data_codes[name] if {
	some name, tc in _cases
	inp := json.patch(_base, tc.patch)
	got := {v.code | some v in datasets.deny with input as inp}
	warned := {v.code | some v in datasets.warn with input as inp}
	print(name, "got", got, "warned", warned)
	got == tc.want
	warned == object.get(tc, "warn", set())
}

_cases := {
	"valid": {"patch": [], "want": set()},
	"decontamination missing": {
		"patch": [_remove("/manifest/data/0/decontamination")],
		"want": {"DATA_DECONTAMINATION_MISSING"},
	},
	"report digest not a digest": {
		"patch": [_set("/manifest/data/0/decontamination/report_digest", "see wiki")],
		"want": {"DATA_DECONTAMINATION_MISSING"},
	},
	"empty method": {"patch": [_set("/manifest/data/0/decontamination/method", "")], "want": {"DATA_DECONTAMINATION_MISSING"}},
	"old eval suite version": {
		"patch": [_set("/manifest/data/0/decontamination/eval_suite_version", "2026.04")],
		"want": {"DATA_DECONTAMINATION_STALE"},
	},
	"other eval suite": {
		"patch": [_set("/manifest/data/0/decontamination/eval_suite", "lm-eval-harness")],
		"want": {"DATA_DECONTAMINATION_STALE"},
	},
	"non-commercial license": {"patch": [_set("/manifest/data/0/license", "cc-by-nc-4.0")], "want": {"DATA_LICENSE_NOT_ALLOWED"}},
	"license in capitals": {"patch": [_set("/manifest/data/0/license", "ODC-BY-1.0")], "want": set()},
	"license missing": {"patch": [_remove("/manifest/data/0/license")], "want": {"DATA_LICENSE_NOT_ALLOWED"}},
	"pii": {"patch": [_set("/manifest/data/0/pii", true)], "want": {"DATA_PII_NOT_ALLOWED"}},
	"pii missing": {"patch": [_remove("/manifest/data/0/pii")], "want": {"DATA_PII_NOT_ALLOWED"}},
	"pii as a string": {"patch": [_set("/manifest/data/0/pii", "false")], "want": {"DATA_PII_NOT_ALLOWED"}},
	"second dataset bad": {
		"patch": [{"op": "add", "path": "/manifest/data/-", "value": {
			"uri": "s3://ito-datasets/web/", "license": "proprietary", "tokens": 1, "region": "us-east-1", "pii": true,
			"decontamination": {
				"eval_suite": "ito-evals", "eval_suite_version": "2025.01", "method": "13-gram-overlap",
				"report_digest": concat("", ["sha256:", concat("", ["0" | some _ in numbers.range(1, 64)])]),
			},
		}}],
		"want": {"DATA_LICENSE_NOT_ALLOWED", "DATA_PII_NOT_ALLOWED", "DATA_DECONTAMINATION_STALE"},
	},
	"dataset in another region": {
		"patch": [_set("/manifest/data/0/region", "eu-west-1")],
		"want": set(),
		"warn": {"DATA_REGION_REMOTE"},
	},
}

test_pii_allowed_by_bundle_data if {
	inp := json.patch(_base, [_set("/manifest/data/0/pii", true)])
	count(datasets.deny) == 0 with input as inp with data.ito.config.data.pii_allowed as true
}

test_stale_message if {
	inp := json.patch(_base, [_set("/manifest/data/0/decontamination/eval_suite_version", "2026.04")])
	[v.message | some v in datasets.deny with input as inp] == [
		`dataset data[0] was decontaminated against "ito-evals" "2026.04", not ito-evals 2026.10`,
	]
}

# Credentials: each case puts a secret somewhere in the manifest; the deny must name the
# path, and the message must not contain the secret (or its distinctive part).
_credential_cases := {
	"aws access key id in source": {"path": "/manifest/source", "value": "key AKIAIOSFODNN7EXAMPLE here", "secret": "AKIAIOSFODNN7EXAMPLE", "at": "/source", "kind": "aws access key id"},
	"aws session key in uri": {"path": "/manifest/data/0/uri", "value": "s3://b/ASIAY34FZKBOKMUTVV7A/x", "secret": "ASIAY34FZKBOKMUTVV7A", "at": "/data/0/uri", "kind": "aws access key id"},
	"pem private key": {"path": "/manifest/name", "value": "-----BEGIN RSA PRIVATE KEY-----\nMIIEow", "secret": "MIIEow", "at": "/name", "kind": "private key"},
	"openssh private key": {"path": "/manifest/source", "value": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk", "secret": "b3BlbnNzaC1rZXk", "at": "/source", "kind": "private key"},
	"bearer token": {"path": "/manifest/source", "value": "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345", "secret": "abcdefghijklmnopqrstuvwxyz012345", "at": "/source", "kind": "bearer token"},
	"jwt": {"path": "/manifest/checkpoint/storage_uri", "value": "s3://ckpt/?t=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "secret": "eyJhbGciOiJIUzI1NiJ9", "at": "/checkpoint/storage_uri", "kind": "JWT"},
	"github token": {"path": "/manifest/model/name", "value": "ghp_0123456789abcdefghijABCDEFGHIJ012345", "secret": "ghp_0123456789", "at": "/model/name", "kind": "GitHub token"},
	"github fine-grained token": {"path": "/manifest/source", "value": "github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "secret": "github_pat_11ABCDEFG", "at": "/source", "kind": "GitHub token"},
	"hugging face token": {"path": "/manifest/data/0/uri", "value": "hf://datasets/x?token=hf_abcdefghijklmnopqrstuvwxyzABCDEFGH", "secret": "hf_abcdefghij", "at": "/data/0/uri", "kind": "Hugging Face token"},
	"slack token": {"path": "/manifest/source", "value": "xoxb-1234567890-abcdefghij", "secret": "xoxb-1234567890", "at": "/source", "kind": "Slack token"},
	"gitlab token": {"path": "/manifest/source", "value": "glpat-abcdefghij0123456789", "secret": "glpat-abcdefghij", "at": "/source", "kind": "GitLab token"},
	"openai key": {"path": "/manifest/source", "value": "sk-proj-abcdefghijT3BlbkFJabcdefghij", "secret": "T3BlbkFJ", "at": "/source", "kind": "API secret key, OpenAI API key"},
	"google api key": {"path": "/manifest/source", "value": "AIzaSyA0123456789abcdefghijklmnopqrstuv", "secret": "AIzaSyA0123456789", "at": "/source", "kind": "Google API key"},
	"s3 presigned url": {"path": "/manifest/data/0/uri", "value": "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=abc123", "secret": "abc123", "at": "/data/0/uri", "kind": "S3 presigned URL"},
	"gcs signed url": {"path": "/manifest/data/0/uri", "value": "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4&X-Goog-Signature=f00d", "secret": "f00d", "at": "/data/0/uri", "kind": "GCS signed URL"},
	"legacy signed url": {"path": "/manifest/data/0/uri", "value": "https://b.s3.amazonaws.com/k?AWSAccessKeyId=ID1&Expires=1&Signature=c2ln", "secret": "c2ln", "at": "/data/0/uri", "kind": "legacy signed URL"},
	"azure sas url": {"path": "/manifest/data/0/uri", "value": "https://a.blob.core.windows.net/c?sv=2022-11-02&se=2026-01-01&sr=c&sp=r&sig=bm90YXNpZw%3D", "secret": "bm90YXNpZw", "at": "/data/0/uri", "kind": "Azure SAS URL"},
	"url userinfo": {"path": "/manifest/checkpoint/storage_uri", "value": "https://trainer:hunter2@minio.internal/ckpt", "secret": "hunter2", "at": "/checkpoint/storage_uri", "kind": "URL userinfo"},
	"url with empty user": {"path": "/manifest/data/0/uri", "value": "https://:s3cr3t@git.internal/x", "secret": "s3cr3t", "at": "/data/0/uri", "kind": "URL userinfo"},
	"password field": {"path": "/manifest/checkpoint/password", "value": "hunter2", "secret": "hunter2", "at": "/checkpoint/password", "kind": "secret-named field"},
	"api_key field": {"path": "/manifest/model/api_key", "value": "k-123", "secret": "k-123", "at": "/model/api_key", "kind": "secret-named field"},
	"hf_token field": {"path": "/manifest/hf_token", "value": "anything", "secret": "anything", "at": "/hf_token", "kind": "secret-named field"},
	"client secret object": {"path": "/manifest/data/0/client_secret", "value": {"v": 1}, "secret": "\"v\"", "at": "/data/0/client_secret", "kind": "secret-named field"},
	"secret as a key": {"path": "/manifest/model/AKIAIOSFODNN7EXAMPLE", "value": "x", "secret": "AKIAIOSFODNN7EXAMPLE", "at": "/model/(withheld)", "kind": "aws access key id"},
}

test_credential_detected[name] if {
	some name, tc in _credential_cases
	inp := json.patch(_base, [_set(tc.path, tc.value)])
	violations := [v | some v in datasets.deny with input as inp]
	print(name, violations)
	[v.code | some v in violations] == ["MANIFEST_CREDENTIAL_DETECTED"]
	some v in violations
	v.message == sprintf("manifest %s holds what looks like a credential (%s); it is not shown", [tc.at, tc.kind])
	not contains(json.marshal(v), tc.secret)
}

test_credential_not_detected[name] if {
	some name, tc in {
		"tokens count key": {"path": "/manifest/data/0/tokens", "value": 5},
		"max_tokens key": {"path": "/manifest/objective/max_tokens", "value": 100},
		"ssh url without password": {"path": "/manifest/source", "value": "ssh://git@github.com/org/repo.git"},
		"signature_version query": {"path": "/manifest/data/0/uri", "value": "https://example.com/x?signature_version=2"},
		"sig without se": {"path": "/manifest/data/0/uri", "value": "https://example.com/x?sig=abc"},
		"prose about bearers": {"path": "/manifest/source", "value": "bearer of good news"},
		"empty password": {"path": "/manifest/checkpoint/password", "value": ""},
		"task path": {"path": "/manifest/source", "value": "s3://datasets/task-sk-learn-benchmarks-v2/"},
		"hf repo name": {"path": "/manifest/model/name", "value": "hf_transfer"},
		"public key": {"path": "/manifest/source", "value": "-----BEGIN PUBLIC KEY-----"},
	}
	inp := json.patch(_base, [_set(tc.path, tc.value)])
	count(datasets.deny) == 0 with input as inp
}

test_several_kinds_at_one_path if {
	inp := json.patch(_base, [_set("/manifest/source", "AKIAIOSFODNN7EXAMPLE https://u:p@h/")])
	[v.message | some v in datasets.deny with input as inp] == [
		"manifest /source holds what looks like a credential (URL userinfo, aws access key id); it is not shown",
	]
}

# The credential prefilter runs once over the manifest's strings joined by
# newlines (_may_hold_credential), in multi-line mode. That finds every string a
# pattern matches on its own only when ^, $ and \b mean the same at a newline as
# at a string's edge: no \A or \z, and no pattern that turns multi-line mode off.
test_patterns_are_line_safe[pattern] if {
	some pattern in array.concat(
		[p.all[0] | some p in data.ito.config.data.credentials.value_patterns],
		[data.ito.config.data.credentials.secret_key_pattern],
	)
	not regex.match(`\\[Az]|\(\?[a-zA-Z]*-[a-zA-Z]*m`, pattern)
}

# a manifest without anything credential-shaped is not scanned path by path
test_clean_manifest_skips_the_scan if {
	not datasets._may_hold_credential with input as _base
}

test_credential_cases_are_scanned[name] if {
	some name, tc in _credential_cases
	datasets._may_hold_credential with input as json.patch(_base, [_set(tc.path, tc.value)])
}
