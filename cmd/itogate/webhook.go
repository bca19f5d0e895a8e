package main

import (
	"io"
	"io/fs"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/deploy"
	"github.com/itocompute/itogate/gatekeeper/webhook"
	"github.com/itocompute/itogate/policies"
)

func newWebhookCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "The Kubernetes admission webhook's configuration",
	}
	var bundleDir string
	config := &cobra.Command{
		Use:   "config",
		Short: "Print the ValidatingWebhookConfiguration with matchConditions generated from a bundle's resource model",
		Long: "Print deploy/kubernetes/base/validatingwebhookconfiguration.yaml with its matchConditions generated from\n" +
			"the policy bundle's kinds table and resource model (the embedded bundle, or --bundle DIR): the apiserver then\n" +
			"sends itogate only what the policy could refuse. Regenerate it whenever the bundle's resource model changes\n" +
			"(a GPU resource name, a device variable, a device path or annotation): names the conditions do not know\n" +
			"never reach the webhook.",
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			var bundle fs.FS = policies.Bundle()
			if bundleDir != "" {
				b, err := bundleDirFS(bundleDir)
				if err != nil {
					return err
				}
				bundle = b
			}
			out, err := webhook.Configuration(deploy.WebhookConfiguration, bundle)
			if err != nil {
				return err
			}
			_, err = stdout.Write(out)
			return err
		},
	}
	config.Flags().StringVar(&bundleDir, "bundle", "", "the policy bundle directory (the one holding ito/); default: the embedded bundle")
	annotate(config.Flags(), "bundle", valueReadsDir)
	var policiesBundleDir string
	admissionPolicies := &cobra.Command{
		Use:   "policies",
		Short: "Print the ValidatingAdmissionPolicies with the values generated from a bundle",
		Long: "Print deploy/kubernetes/base/admissionpolicies.yaml with the values it takes from the policy bundle\n" +
			"(the embedded bundle, or --bundle DIR): the controller identities of itogate-ticketed-pods from\n" +
			"controllers.users, so the apiserver lets the same identities change a ticketed Pod's labels and\n" +
			"ownerReferences that the webhook trusts to create children; the grace bound of itogate-pod-deletion\n" +
			"from max_termination_grace_seconds, so a DELETE or an eviction keeps the bound pod templates are held to;\n" +
			"and the device annotation prefixes and keys of itogate-pod-device-annotations from\n" +
			"device_annotation_prefixes and device_annotation_keys, so no one but a cluster admin adds to a running\n" +
			"Pod an annotation the webhook refuses at admission. Regenerate it whenever any of them changes.",
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			var bundle fs.FS = policies.Bundle()
			if policiesBundleDir != "" {
				b, err := bundleDirFS(policiesBundleDir)
				if err != nil {
					return err
				}
				bundle = b
			}
			out, err := webhook.AdmissionPolicies(deploy.AdmissionPolicies, bundle)
			if err != nil {
				return err
			}
			_, err = stdout.Write(out)
			return err
		},
	}
	admissionPolicies.Flags().StringVar(&policiesBundleDir, "bundle", "", "the policy bundle directory (the one holding ito/); default: the embedded bundle")
	annotate(admissionPolicies.Flags(), "bundle", valueReadsDir)
	cmd.AddCommand(config, admissionPolicies)
	return cmd
}
