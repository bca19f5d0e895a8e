package webhook

import "github.com/itocompute/itogate/gatekeeper/api"

// AdmissionPolicyCodes maps each ValidatingAdmissionPolicy shipped beside
// the webhook (deploy/kubernetes/base/admissionpolicies.yaml) to the stable
// code every refusal of it leads its message with. The kube-apiserver
// evaluates them itself, with no call to itogate, so they hold while
// itogate is down (docs/kubernetes.md).
var AdmissionPolicyCodes = map[string]api.Code{
	"itogate-workload-delete":  api.CodeWorkloadOrphaningDelete,
	"itogate-namespace-labels": api.CodeNamespaceLabelGuarded,
}
