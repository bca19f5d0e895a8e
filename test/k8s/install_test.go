//go:build k8s

package k8s

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestInstall installs itogate as an operator would, on a real apiserver:
// the kustomize installs with kubectl (its own kustomize) and the Helm
// chart's `helm template` output (the helm of hack/tools), each applied for
// real or, where an install replaces one already there, with
// --dry-run=server; then reads back what the apiserver stored. cert-manager
// is a stand-in (testdata/cert-manager): its CRDs only.
func TestInstall(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test-k8s` (it builds the binaries with hack/k8s-binaries.sh)")
	}
	ctx := t.Context()
	env := &envtest.Environment{BinaryAssetsDirectory: assets,
		CRDDirectoryPaths: []string{filepath.Join("testdata", "cert-manager")}, ErrorIfCRDPathMissing: true}
	env.ControlPlane.GetAPIServer().Configure().Set("endpoint-reconciler-type", "none")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start etcd and kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop the control plane: %v", err)
		}
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deploy, err := filepath.Abs(filepath.Join("..", "..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	kube := filepath.Join(deploy, "kubernetes")
	apply := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := kubectl(t, env, append([]string{"apply"}, args...)...)
		if err != nil {
			t.Fatalf("kubectl apply %v: %v\n%s", args, err, out)
		}
		return out
	}
	certificates := schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}

	t.Run("kubectl kustomize builds the base, the default and each overlay", func(t *testing.T) {
		for _, dir := range []string{"base", ".", "overlays/cert-manager", "overlays/ca-bundle", "examples/team-a"} {
			out, err := kubectl(t, env, "kustomize", filepath.Join(kube, dir))
			if err != nil || !strings.Contains(out, "kind: ValidatingWebhookConfiguration") {
				t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
			}
		}
	})

	t.Run("kustomize: the example installation with its tenant namespace", func(t *testing.T) {
		apply(t, "-k", filepath.Join(kube, "examples", "team-a"))
		vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "itogate", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h := vwc.Webhooks[0]
		if *h.FailurePolicy != "Fail" || h.ClientConfig.Service == nil || h.ClientConfig.Service.Namespace != "itogate-system" ||
			vwc.Annotations["cert-manager.io/inject-ca-from"] != "itogate-system/itogate-tls" {
			t.Errorf("stored webhook configuration: %+v, annotations %v", h, vwc.Annotations)
		}
		ns, err := cs.CoreV1().Namespaces().Get(ctx, "team-a", metav1.GetOptions{})
		if err != nil || ns.Labels["itogate.io/enforce"] != "true" {
			t.Errorf("tenant namespace team-a: %v %v", ns.Labels, err)
		}
		d, err := cs.AppsV1().Deployments("itogate-system").Get(ctx, "itogate", metav1.GetOptions{})
		if err != nil || *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Scheme != "HTTPS" {
			t.Errorf("deployment: %v", err)
		}
		cert, err := dyn.Resource(certificates).Namespace("itogate-system").Get(ctx, "itogate-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName"); s != "itogate-tls" {
			t.Errorf("certificate secretName %q", s)
		}
	})

	t.Run("kustomize: the ca-bundle overlay as shipped is refused, with a CA of one's own it applies", func(t *testing.T) {
		out, err := kubectl(t, env, "apply", "--dry-run=server", "-k", filepath.Join(kube, "overlays", "ca-bundle"))
		if low := strings.ToLower(out); err == nil || !(strings.Contains(low, "cabundle") || strings.Contains(low, "base64")) {
			t.Fatalf("the placeholder caBundle was accepted: %v\n%s", err, out)
		}
		caPEM, _, _ := serving(t, t.TempDir())
		own := t.TempDir()
		k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + filepath.Join(kube, "overlays", "ca-bundle") +
			"\npatches:\n  - target: {kind: ValidatingWebhookConfiguration, name: itogate}\n    patch: |-\n      - op: replace\n" +
			"        path: /webhooks/0/clientConfig/caBundle\n        value: " + base64.StdEncoding.EncodeToString(caPEM) + "\n" +
			"      - op: replace\n        path: /webhooks/1/clientConfig/caBundle\n        value: " + base64.StdEncoding.EncodeToString(caPEM) + "\n"
		if err := os.WriteFile(filepath.Join(own, "kustomization.yaml"), []byte(k), 0o600); err != nil {
			t.Fatal(err)
		}
		apply(t, "--dry-run=server", "-k", own)
	})

	t.Run("helm: the chart's output, cert-manager, in its own namespace", func(t *testing.T) {
		if _, err := kubectl(t, env, "create", "namespace", "gate"); err != nil {
			t.Fatal(err)
		}
		apply(t, "-f", helmTemplate(t, filepath.Join(deploy, "helm", "itogate"), "gate", "webhook: {namespaces: {team-a: acct_team_a}}"))
		vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "itogate", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h := vwc.Webhooks[0]
		if *h.FailurePolicy != "Fail" || h.ClientConfig.Service.Namespace != "gate" ||
			vwc.Annotations["cert-manager.io/inject-ca-from"] != "gate/itogate-tls" || vwc.Labels["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("stored webhook configuration: %+v, annotations %v, labels %v", h, vwc.Annotations, vwc.Labels)
		}
		excluded := false
		for _, e := range h.NamespaceSelector.MatchExpressions {
			if e.Key == "kubernetes.io/metadata.name" && e.Operator == "NotIn" && strings.Contains(strings.Join(e.Values, ","), "gate") {
				excluded = true
			}
		}
		if !excluded {
			t.Errorf("the release's namespace is not excluded: %+v", h.NamespaceSelector)
		}
		if _, err := dyn.Resource(certificates).Namespace("gate").Get(ctx, "itogate-tls", metav1.GetOptions{}); err != nil {
			t.Error(err)
		}
		for _, name := range []string{"itogate", "itogate-webhook"} {
			if _, err := cs.CoreV1().Services("gate").Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("helm: own CA and a pinned image (server dry run)", func(t *testing.T) {
		caPEM, _, _ := serving(t, t.TempDir())
		values := "replicaCount: 3\nimage: {digest: \"sha256:" + strings.Repeat("ab", 32) + "\"}\n" +
			"tls: {certManager: {enabled: false}, caBundle: " + base64.StdEncoding.EncodeToString(caPEM) + "}\n"
		apply(t, "--dry-run=server", "-f", helmTemplate(t, filepath.Join(deploy, "helm", "itogate"), "gate", values))
	})
}

// helmTemplate renders the chart with the helm of hack/tools into a file.
func helmTemplate(t *testing.T, chart, ns, values string) string {
	t.Helper()
	dir := t.TempDir()
	vf, out := filepath.Join(dir, "values.yaml"), filepath.Join(dir, "rendered.yaml")
	if err := os.WriteFile(vf, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	tools, err := filepath.Abs(filepath.Join("..", "..", "hack", "tools"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "-C", tools, "tool", "helm", "template", "itogate", chart, "--namespace", ns, "--values", vf)
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v %s", err, stderrOf(err))
	}
	if err := os.WriteFile(out, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
