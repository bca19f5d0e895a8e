//go:build k8s

package k8s

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/itocompute/itogate/gatekeeper/webhook"
)

// itogateNS is the namespace docs/kubernetes.md installs itogate into.
const itogateNS = "itogate-system"

// docsPath is the operator's guide TestInstall follows.
var docsPath = filepath.Join("..", "..", "docs", "kubernetes.md")

// TestInstall installs itogate on a real kube-apiserver as a new operator
// would, following docs/kubernetes.md "Deploying": step 1's kubectl
// commands, then the Helm chart (`helm install` with the guide's values
// file), its uninstall, then the kustomize example installation
// (examples/team-a: cert-manager overlay, tenant namespace and RBAC), and
// server-side dry runs of the other documented installs. Every object must
// be accepted by the apiserver; the installed webhook must name the
// install's Service and ask cert-manager for its CA (or carry the given
// caBundle); the admission policies must guard a controlled namespace's
// labels against a tenant; and with no itogate behind the Service (no
// kubelet runs it) a GPU workload in a controlled namespace is refused.
//
// cert-manager is not installed: stand-in CRDs (testdata/) make its
// Issuer and Certificate acceptable, and nothing issues or injects. The
// Helm and kustomize installs share their cluster-scoped objects (the
// webhook configuration and the admission policies have fixed names, one
// install per cluster), so they run one after the other, the first
// uninstalled before the second; namespaces are kept (no namespace
// controller runs here to finish deleting one).
func TestInstall(t *testing.T) {
	ctx := t.Context()
	env, cfg, cs := startControlPlane(t, "cert-manager-crds.yaml")
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	aggregateClusterRoles(t, cs)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()

	t.Run("step 1: namespace and Secrets", func(t *testing.T) {
		for _, args := range docCommands(t, "**1. Namespace and Secrets**", "kubectl") {
			for _, a := range args {
				// The files the Secrets are made of: placeholders (nothing
				// reads them here).
				if f, ok := strings.CutPrefix(a, "--from-file="); ok {
					f = f[strings.LastIndexByte(f, '=')+1:]
					if err := os.WriteFile(filepath.Join(work, f), []byte("placeholder\n"), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			if out, err := kubectlIn(t, env, work, nil, args...); err != nil {
				t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		for _, s := range []string{"itogate-keys", "itogate-postgres"} {
			if _, err := cs.CoreV1().Secrets(itogateNS).Get(ctx, s, metav1.GetOptions{}); err != nil {
				t.Fatalf("secret %s: %v", s, err)
			}
		}
	})

	// Step 3 of the guide: team-a under control (the example installation
	// creates it with the label itself). The tenant (group team-a) may
	// patch her own namespace, as platforms that let a team label it do:
	// what stops her is the installed guard.
	tenant := impersonate(t, cfg, "bob", "team-a")
	t.Run("step 3: a namespace under control", func(t *testing.T) {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsA}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if out, err := kubectl(t, env, "label", "namespace", nsA, "itogate.io/enforce=true"); err != nil {
			t.Fatalf("kubectl label: %v\n%s", err, out)
		}
		grantOwnNamespace(t, cs, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "team-a"})
	})

	values := docBlock(t, "**2a. With Helm.**", "yaml")
	values = fillIn(t, values, "sha256:<from your registry>", digest)
	valuesFile := filepath.Join(work, "my-values.yaml")
	if err := os.WriteFile(valuesFile, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(root, "deploy", "helm", "itogate")
	kubeconfig := kubeconfigOf(t, env)

	t.Run("helm install", func(t *testing.T) {
		out, err := tool(t, root, "helm", "install", "itogate", chart, "-n", itogateNS, "-f", valuesFile, "--kubeconfig", kubeconfig)
		if err != nil {
			t.Fatalf("helm install: %v\n%s", err, out)
		}
		vwc := checkWebhook(t, cs, itogateNS)
		if got := vwc.Annotations["cert-manager.io/inject-ca-from"]; got != itogateNS+"/itogate-tls" {
			t.Errorf("cert-manager.io/inject-ca-from %q, want %s/itogate-tls", got, itogateNS)
		}
		if vwc.Labels["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("webhook labels %v: not Helm's", vwc.Labels)
		}
		checkCertificate(t, dyn, cs, itogateNS)
		checkInstalledObjects(t, dyn, cs, itogateNS)
		checkGuards(t, cs, tenant)
	})
	t.Run("helm uninstall", func(t *testing.T) {
		out, err := tool(t, root, "helm", "uninstall", "itogate", "-n", itogateNS, "--kubeconfig", kubeconfig)
		if err != nil {
			t.Fatalf("helm uninstall: %v\n%s", err, out)
		}
		// The cluster-scoped objects go with the release: the next install
		// creates its own.
		ar := cs.AdmissionregistrationV1()
		if _, err := ar.ValidatingWebhookConfigurations().Get(ctx, "itogate", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("webhook configuration after uninstall: %v", err)
		}
		for p := range webhook.AdmissionPolicyCodes {
			if _, err := ar.ValidatingAdmissionPolicies().Get(ctx, p, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("policy %s after uninstall: %v", p, err)
			}
			if _, err := ar.ValidatingAdmissionPolicyBindings().Get(ctx, p, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("binding %s after uninstall: %v", p, err)
			}
		}
	})

	example := filepath.Join(root, "deploy", "kubernetes", "examples", "team-a")
	t.Run("kustomize: the example installation", func(t *testing.T) {
		built, err := tool(t, root, "kustomize", "build", example)
		if err != nil {
			t.Fatalf("kustomize build: %v\n%s", err, built)
		}
		if out, err := kubectlIn(t, env, "", bytes.NewReader(built), "apply", "--server-side", "-f", "-"); err != nil {
			t.Fatalf("kubectl apply --server-side: %v\n%s", err, out)
		}
		vwc := checkWebhook(t, cs, itogateNS)
		if got := vwc.Annotations["cert-manager.io/inject-ca-from"]; got != itogateNS+"/itogate-tls" {
			t.Errorf("cert-manager.io/inject-ca-from %q, want %s/itogate-tls", got, itogateNS)
		}
		if _, ok := vwc.Labels["app.kubernetes.io/managed-by"]; ok {
			t.Errorf("webhook labels %v: left over from the Helm release", vwc.Labels)
		}
		checkCertificate(t, dyn, cs, itogateNS)
		checkInstalledObjects(t, dyn, cs, itogateNS)
		ns, err := cs.CoreV1().Namespaces().Get(ctx, nsA, metav1.GetOptions{})
		if err != nil || ns.Labels["itogate.io/enforce"] != "true" {
			t.Fatalf("namespace %s: %v %v", nsA, ns.Labels, err)
		}
		checkGuards(t, cs, tenant)
		// The example's tenant RBAC: the group edits in team-a, and only there.
		cpu := gpuJob("tenant-cpu", "", 1, 0)
		cpu.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: qty(1)}}
		if _, err := tenant.BatchV1().Jobs(nsA).Create(ctx, cpu, metav1.CreateOptions{}); err != nil {
			t.Errorf("a CPU Job of the tenant in %s: %v", nsA, err)
		}
		if _, err := tenant.BatchV1().Jobs("default").Create(ctx, cpu, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("a Job of the tenant in default: %v, want Forbidden", err)
		}
		if _, err := tenant.BatchV1().Jobs(nsA).Create(ctx, gpuJob("tenant-gpu", "", 1, 8),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !failedCalling(err, itogateNS) {
			t.Errorf("a GPU Job of the tenant with no itogate: %v, want the webhook's call to fail and the apiserver to refuse", err)
		}
	})

	t.Run("kustomize: kubectl apply -k deploy/kubernetes", func(t *testing.T) {
		out, err := kubectl(t, env, "apply", "--server-side", "--dry-run=server", "-k", filepath.Join(root, "deploy", "kubernetes"))
		if err != nil || !strings.Contains(out, "validatingwebhookconfiguration.admissionregistration.k8s.io/itogate serverside-applied (server dry run)") {
			t.Fatalf("kubectl apply -k: %v\n%s", err, out)
		}
	})

	// The guide's overlay of one's own (2b), with your own CA: the
	// configuration of the example, the image by digest, overlays/ca-bundle
	// and the guide's patch putting the CA into both webhooks.
	caPEM, _, _ := serving(t, work)
	caB64 := base64.StdEncoding.EncodeToString(caPEM)
	t.Run("kustomize: an overlay of your own with your CA", func(t *testing.T) {
		site := filepath.Join(work, "itogate-site")
		if err := os.MkdirAll(site, 0o700); err != nil {
			t.Fatal(err)
		}
		cfgYAML, err := os.ReadFile(filepath.Join(example, "itogate.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(site, "itogate.yaml"), cfgYAML, 0o600); err != nil {
			t.Fatal(err)
		}
		k := docBlock(t, "**2b. With kustomize.**", "yaml")
		// The clone, as a path relative to the overlay (kustomize refuses absolute ones).
		rel, err := filepath.Rel(site, filepath.Join(root, "deploy", "kubernetes", "overlays", "ca-bundle"))
		if err != nil {
			t.Fatal(err)
		}
		k = fillIn(t, k, "../itogate/deploy/kubernetes/overlays/cert-manager", rel)
		k = fillIn(t, k, "sha256:<from your registry>", digest)
		k += fillIn(t, docBlock(t, "add to your overlay a patch replacing", "yaml"), "<base64 -w0 ca.crt>", caB64)
		if err := os.WriteFile(filepath.Join(site, "kustomization.yaml"), []byte(k), 0o600); err != nil {
			t.Fatal(err)
		}
		built, err := tool(t, root, "kustomize", "build", site)
		if err != nil {
			t.Fatalf("kustomize build of the guide's overlay:\n%s\n%v\n%s", k, err, built)
		}
		out, err := kubectlIn(t, env, "", bytes.NewReader(built), "apply", "--server-side", "--dry-run=server", "-o", "yaml", "-f", "-")
		if err != nil {
			t.Fatalf("kubectl apply --dry-run=server: %v\n%s", err, out)
		}
		if n := strings.Count(out, "caBundle: "+caB64+"\n"); n != 2 {
			t.Errorf("%d webhooks carry the CA, want 2:\n%s", n, out)
		}
		if !strings.Contains(out, "image: registry.example.com/itogate@sha256:") {
			t.Errorf("the image is not pinned by digest:\n%s", out)
		}
		// As shipped, overlays/ca-bundle's placeholder is refused (docs).
		built, err = tool(t, root, "kustomize", "build", filepath.Join(root, "deploy", "kubernetes", "overlays", "ca-bundle"))
		if err != nil {
			t.Fatalf("kustomize build overlays/ca-bundle: %v\n%s", err, built)
		}
		out, err = kubectlIn(t, env, "", bytes.NewReader(built), "apply", "--server-side", "--dry-run=server", "-f", "-")
		if err == nil || !strings.Contains(out, "Kind=ValidatingWebhookConfiguration: error decoding from json: illegal base64 data") {
			t.Errorf("overlays/ca-bundle as shipped: %v, want the placeholder refused\n%s", err, out)
		}
	})

	t.Run("helm template: your own CA", func(t *testing.T) {
		own := filepath.Join(work, "own-ca.yaml")
		if err := os.WriteFile(own, []byte("tls: {certManager: {enabled: false}, caBundle: "+caB64+"}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		rendered, err := tool(t, root, "helm", "template", "itogate", chart, "-n", itogateNS, "-f", valuesFile, "-f", own)
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, rendered)
		}
		if bytes.Contains(rendered, []byte("cert-manager.io")) {
			t.Errorf("cert-manager objects or annotations without cert-manager:\n%s", rendered)
		}
		out, err := kubectlIn(t, env, "", bytes.NewReader(rendered), "apply", "--server-side", "--dry-run=server", "-o", "yaml", "-f", "-")
		if err != nil {
			t.Fatalf("kubectl apply --dry-run=server: %v\n%s", err, out)
		}
		if n := strings.Count(out, "caBundle: "+caB64+"\n"); n != 2 {
			t.Errorf("%d webhooks carry the CA, want 2:\n%s", n, out)
		}
	})
}

// checkWebhook: the installed configuration's webhooks (enforcing and warn)
// call the install's webhook Service in ns on 443 at their paths; that
// Service exists and forwards to the Deployment's webhook port.
func checkWebhook(t *testing.T, cs *kubernetes.Clientset, ns string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	ctx := t.Context()
	vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "itogate", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the webhook configuration: %v", err)
	}
	paths := map[string]string{"workloads.itogate.io": "/validate", "warn.workloads.itogate.io": "/validate-warn"}
	if len(vwc.Webhooks) != len(paths) {
		t.Fatalf("%d webhooks, want %d", len(vwc.Webhooks), len(paths))
	}
	for _, w := range vwc.Webhooks {
		s := w.ClientConfig.Service
		if s == nil || w.ClientConfig.URL != nil || s.Namespace != ns || s.Name != "itogate-webhook" ||
			s.Path == nil || *s.Path != paths[w.Name] || s.Port == nil || *s.Port != 443 {
			t.Errorf("webhook %s calls %+v, want the Service %s/itogate-webhook:443%s", w.Name, w.ClientConfig, ns, paths[w.Name])
		}
		if !slices.ContainsFunc(w.NamespaceSelector.MatchExpressions, func(r metav1.LabelSelectorRequirement) bool {
			return r.Key == "kubernetes.io/metadata.name" && r.Operator == metav1.LabelSelectorOpNotIn && slices.Contains(r.Values, ns)
		}) {
			t.Errorf("webhook %s does not exclude its own namespace %s: %+v", w.Name, ns, w.NamespaceSelector)
		}
	}
	svc, err := cs.CoreV1().Services(ns).Get(ctx, "itogate-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the webhook's Service: %v", err)
	}
	dep, err := cs.AppsV1().Deployments(ns).Get(ctx, "itogate", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Deployment: %v", err)
	}
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("the Service selects %v, the Deployment's Pods are labelled %v", svc.Spec.Selector, dep.Spec.Template.Labels)
		}
	}
	i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == 443 })
	if i < 0 {
		t.Fatalf("the webhook's Service has no port 443: %+v", svc.Spec.Ports)
	}
	target := svc.Spec.Ports[i].TargetPort
	if target != intstr.FromString("webhook") || !slices.ContainsFunc(dep.Spec.Template.Spec.Containers[0].Ports,
		func(p corev1.ContainerPort) bool { return p.Name == "webhook" && p.ContainerPort == 9443 }) {
		t.Errorf("the Service's port 443 targets %v, the container's ports are %+v: want webhook, 9443",
			target, dep.Spec.Template.Spec.Containers[0].Ports)
	}
	return vwc
}

var certificates = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}

// checkCertificate: cert-manager is asked for the serving certificate the
// webhook's annotation names (ns/itogate-tls), into the Secret the
// Deployment mounts, for the webhook Service's name.
func checkCertificate(t *testing.T, dyn *dynamic.DynamicClient, cs *kubernetes.Clientset, ns string) {
	t.Helper()
	c, err := dyn.Resource(certificates).Namespace(ns).Get(t.Context(), "itogate-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Certificate: %v", err)
	}
	dep, err := cs.AppsV1().Deployments(ns).Get(t.Context(), "itogate", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mounted := ""
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == "tls" && v.Secret != nil {
			mounted = v.Secret.SecretName
		}
	}
	spec, _ := c.Object["spec"].(map[string]any)
	if spec["secretName"] != mounted || mounted == "" {
		t.Errorf("the Certificate writes %v, the Deployment mounts %q", spec["secretName"], mounted)
	}
	names, _ := spec["dnsNames"].([]any)
	if !slices.Contains(names, any("itogate-webhook."+ns+".svc")) {
		t.Errorf("the Certificate's names %v lack the webhook Service's", names)
	}
}

// checkInstalledObjects: the rest of the install is there, and its
// configuration binds team-a.
func checkInstalledObjects(t *testing.T, dyn *dynamic.DynamicClient, cs *kubernetes.Clientset, ns string) {
	t.Helper()
	ctx := t.Context()
	type object struct {
		gvr             schema.GroupVersionResource
		namespace, name string
	}
	objects := []object{
		{schema.GroupVersionResource{Version: "v1", Resource: "services"}, ns, "itogate"},
		{schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, ns, "itogate"},
		{schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, ns, "itogate"},
		{schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}, ns, "itogate"},
	}
	for p := range webhook.AdmissionPolicyCodes {
		objects = append(objects, object{vapBindings, "", p})
	}
	for _, o := range objects {
		if _, err := dyn.Resource(o.gvr).Namespace(o.namespace).Get(ctx, o.name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s %s: %v", o.gvr.Resource, o.name, err)
		}
	}
	cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil || !slices.ContainsFunc(cms.Items, func(c corev1.ConfigMap) bool {
		return strings.HasPrefix(c.Name, "itogate-config") && strings.Contains(c.Data["itogate.yaml"], "team-a: acct_team_a")
	}) {
		t.Errorf("no itogate-config binding team-a: %v", err)
	}
}

var vapBindings = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}

// checkGuards: the installed namespace-label policy refuses the tenant's
// relabelling of her controlled namespace (probing with dry runs until the
// apiserver has loaded it), and with no itogate behind the Service the
// webhook fails closed on a GPU Job there.
func checkGuards(t *testing.T, cs *kubernetes.Clientset, tenant *kubernetes.Clientset) {
	t.Helper()
	ctx := t.Context()
	relabel := func(opts metav1.PatchOptions) error {
		_, err := tenant.CoreV1().Namespaces().Patch(ctx, nsA, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"itogate.io/enforce":null}}}`), opts)
		return err
	}
	eventually(t, func() error { return relabel(metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}) },
		"itogate-namespace-labels", "NAMESPACE_LABEL_GUARDED")
	wantPolicyDenied(t, relabel(metav1.PatchOptions{}), "itogate-namespace-labels", "NAMESPACE_LABEL_GUARDED")
	// The apiserver picks the configuration up asynchronously: probe with
	// dry runs until the call fails (readiness, not a time bound: the wait
	// ends at the test's context).
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		_, err := cs.BatchV1().Jobs(nsA).Create(waitCtx, gpuJob("gpu-no-itogate", "", 1, 8), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			if !failedCalling(err, itogateNS) {
				t.Errorf("a GPU Job with no itogate behind the Service: %v, want the webhook's call to fail", err)
			}
			return
		}
		select {
		case <-waitCtx.Done():
			t.Fatal("a GPU Job with no itogate behind the Service was admitted: the webhook is not called")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// failedCalling: err is the apiserver's refusal after its call to the
// enforcing webhook at the Service in ns failed.
func failedCalling(err error, ns string) bool {
	return err != nil && strings.Contains(err.Error(), `failed calling webhook "workloads.itogate.io"`) &&
		strings.Contains(err.Error(), "https://itogate-webhook."+ns+".svc:443/validate")
}

// grantOwnNamespace lets subject get and patch namespace nsA itself.
func grantOwnNamespace(t *testing.T, cs *kubernetes.Clientset, subject rbacv1.Subject) {
	t.Helper()
	ctx := t.Context()
	if _, err := cs.RbacV1().Roles(nsA).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "own-namespace"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"},
			ResourceNames: []string{nsA}, Verbs: []string{"get", "update", "patch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(nsA).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "own-namespace"}, Subjects: []rbacv1.Subject{subject},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "own-namespace"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// aggregateClusterRoles fills the stock aggregated roles (admin, edit,
// view) with the rules of the roles their aggregationRule selects, as
// kube-controller-manager's aggregation controller does (envtest runs no
// controller manager), so a RoleBinding to edit grants what it grants in a
// cluster.
func aggregateClusterRoles(t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	ctx := t.Context()
	for _, name := range []string{"view", "edit", "admin"} { // each includes the one before
		role, err := cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		if err != nil || role.AggregationRule == nil {
			t.Fatalf("cluster role %s: %v (aggregated: %v)", name, err, role != nil && role.AggregationRule != nil)
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range role.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				t.Fatal(err)
			}
			parts, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: s.String()})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range parts.Items {
				if p.Name != name {
					rules = append(rules, p.Rules...)
				}
			}
		}
		role.Rules = rules
		if _, err := cs.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("aggregate %s: %v", name, err)
		}
	}
}

// kubeconfigOf is the admin's kubeconfig file envtest wrote for kubectl.
func kubeconfigOf(t *testing.T, env *envtest.Environment) string {
	t.Helper()
	for _, o := range env.ControlPlane.KubeCtl().Opts {
		if f, ok := strings.CutPrefix(o, "--kubeconfig="); ok {
			return f
		}
	}
	t.Fatal("envtest's kubectl has no --kubeconfig")
	return ""
}

// tool runs a tool pinned in hack/tools (`go -C hack/tools tool NAME
// ARGS`: helm, kustomize), built from the Go module proxy as `make chart`
// does, with helm's configuration, cache and data in the test's temporary
// directory (not the user's); its output is stdout and then stderr.
func tool(t *testing.T, root string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"-C", filepath.Join(root, "hack", "tools"), "tool"}, args...)...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return append(stdout.Bytes(), stderr.Bytes()...), err
	}
	return stdout.Bytes(), nil
}

// docBlock is the first fenced block of lang (```lang) after the line
// holding marker in docs/kubernetes.md, without its fences.
func docBlock(t *testing.T, marker, lang string) string {
	t.Helper()
	raw, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, marker)
	if i < 0 {
		t.Fatalf("%s: no %q", docsPath, marker)
	}
	open := "\n```" + lang + "\n"
	j := strings.Index(doc[i:], open)
	if j < 0 {
		t.Fatalf("%s: no ```%s block after %q", docsPath, lang, marker)
	}
	body := doc[i+j+len(open):]
	end := strings.Index(body, "\n```")
	if end < 0 {
		t.Fatalf("%s: the block after %q is not closed", docsPath, marker)
	}
	return body[:end+1]
}

// digest stands for the image digest the registry reports.
var digest = "sha256:" + strings.Repeat("0123456789abcdef", 4)

// fillIn replaces every placeholder in a block of the guide with value,
// failing the test if the guide no longer has it.
func fillIn(t *testing.T, block, placeholder, value string) string {
	t.Helper()
	if !strings.Contains(block, placeholder) {
		t.Fatalf("%s: no %q in\n%s", docsPath, placeholder, block)
	}
	return strings.ReplaceAll(block, placeholder, value)
}

// docCommands are the commands of program in the first ```bash block after
// marker in docs/kubernetes.md (continuation lines joined, comments
// dropped), each as its arguments after the program's name. The guide's
// commands quote nothing, so words are split at blanks.
func docCommands(t *testing.T, marker, program string) [][]string {
	t.Helper()
	script := strings.ReplaceAll(docBlock(t, marker, "bash"), "\\\n", " ")
	var out [][]string
	for _, line := range strings.Split(script, "\n") {
		line, _, _ = strings.Cut(line, "#")
		words := strings.Fields(line)
		if len(words) == 0 {
			continue
		}
		if words[0] != program || strings.ContainsAny(line, "\"'$`") {
			t.Fatalf("%s: %q after %q is not a plain %s command", docsPath, line, marker, program)
		}
		out = append(out, words[1:])
	}
	if len(out) == 0 {
		t.Fatalf("%s: no %s command after %q", docsPath, program, marker)
	}
	return out
}
