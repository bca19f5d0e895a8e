package deploy

import "github.com/itocompute/itogate/gatekeeper/api"

// AdmissionPolicyCodes maps each ValidatingAdmissionPolicy of
// kubernetes/base/admissionpolicies.yaml to the stable code every refusal
// of it leads its message with (the kube-apiserver evaluates them itself,
// with no call to itogate; docs/kubernetes.md).
var AdmissionPolicyCodes = map[string]api.Code{
	"itogate-workload-delete":  api.CodeWorkloadOrphaningDelete,
	"itogate-namespace-labels": api.CodeNamespaceLabelGuarded,
}
