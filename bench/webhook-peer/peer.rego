# The peer of itogate's Kubernetes webhook for `make bench` (bench/run.sh):
# what a Gatekeeper/OPA user runs with `opa run --server`. It answers an
# admission.k8s.io/v1 AdmissionReview posted as input to
# POST /v1/data/bench/webhook/review with an AdmissionReview, deciding with
# the SAME data.ito.workload.decision of the bundle (policies/) as itogate.
# The facts itogate's Go code gathers are made here the OPA way: the ticket
# is verified by io.jwt.decode_verify against the same public JWKS (issuer,
# audience and expiry checked by OPA, typ here), and the run's ledger record
# and workload binding, which OPA cannot read, are static data written by
# `loadgen -webhook-setup` (data.webhook_peer). Only for benchmarking.
package bench.webhook

_peer := data.webhook_peer

_req := input.request

_obj := _req.object

_meta := object.get(_obj, "metadata", {})

_raw := object.get(_meta, ["annotations", _peer.annotation], "")

# [header, claims] of a ticket that verifies.
_verified := [header, claims] if {
	_raw != ""
	[valid, header, claims] := io.jwt.decode_verify(_raw, {
		"cert": _peer.jwks,
		"iss": _peer.issuer,
		"aud": _peer.audience,
	})
	valid
	header.typ == _peer.typ
}

_ticket := {"present": false} if _raw == ""

_ticket := {"present": true, "verified": true, "claims": _verified[1]} if _verified

_ticket := {"present": true, "verified": false, "error": "rejected"} if {
	_raw != ""
	not _verified
}

_run := r if {
	r := _peer.runs[_verified[1].run_id]
} else := {"found": false}

_binding := b if {
	b := _peer.bindings[_verified[1].run_id]
} else := {"bound": false, "identity": "", "uids": []}

_namespace := {"name": _req.namespace, "account": a} if {
	a := _peer.namespaces[_req.namespace]
} else := {"name": _req.namespace}

_name := n if {
	n := _meta.name
	n != ""
} else := _req.name

_uid := u if {
	u := _meta.uid
	u != ""
} else := _req.uid

_owner_uid := u if {
	some ref in object.get(_meta, "ownerReferences", [])
	ref.controller == true
	u := ref.uid
} else := ""

_workload_input := {
	"now": floor(time.now_ns() / 1000000000),
	"review": {
		"operation": _req.operation,
		"dry_run": object.get(_req, "dryRun", false),
		"kind": _req.kind,
		"namespace": _req.namespace,
		"name": _name,
		"user": object.get(_req, ["userInfo", "username"], ""),
		"object": _obj,
	},
	"namespace": _namespace,
	"ticket": _ticket,
	"run": _run,
	"binding": _binding,
	"object_ref": {
		"identity": concat("/", [_req.kind.group, _req.kind.kind, _req.namespace, _name]),
		"uid": _uid,
		"owner_uid": _owner_uid,
	},
}

_decision := d if {
	wi := _workload_input
	d := data.ito.workload.decision with input as wi
}

_response := {"uid": _req.uid, "allowed": true} if _decision.allow

_response := {"uid": _req.uid, "allowed": false, "status": {
	"status": "Failure",
	"code": 403,
	"reason": "Forbidden",
	"message": concat("; ", [sprintf("%s: %s", [v.code, v.message]) | some v in _decision.violations]),
}} if not _decision.allow

# METADATA
# title: AdmissionReview response
# description: The answer to input (an AdmissionReview), allowed or not.
# entrypoint: true
review := {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": _response}
