// Package deploy holds the Kubernetes deploy files (deploy/kubernetes) and
// embeds the shipped ValidatingWebhookConfiguration, the template `itogate
// webhook config` regenerates its matchConditions in, and the shipped
// ValidatingAdmissionPolicies, the template `itogate webhook policies`
// regenerates the controller identities in.
package deploy

import _ "embed"

// AdmissionPolicies is kubernetes/base/admissionpolicies.yaml.
//
//go:embed kubernetes/base/admissionpolicies.yaml
var AdmissionPolicies []byte

// WebhookConfiguration is kubernetes/base/validatingwebhookconfiguration.yaml.
//
//go:embed kubernetes/base/validatingwebhookconfiguration.yaml
var WebhookConfiguration []byte
