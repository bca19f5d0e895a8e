// Package deploy holds the Kubernetes deploy files (deploy/kubernetes) and
// embeds the shipped ValidatingWebhookConfiguration, the template `itogate
// webhook config` regenerates its matchConditions in.
package deploy

import _ "embed"

// WebhookConfiguration is kubernetes/base/validatingwebhookconfiguration.yaml.
//
//go:embed kubernetes/base/validatingwebhookconfiguration.yaml
var WebhookConfiguration []byte
